package lint

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// Report is the outcome of one lint run, as WriteText, WriteJSON and
// WriteSARIF render it.
type Report struct {
	// Version is the version of closingtime that ran, as `closingtime
	// version` prints it; SARIF gives it as the driver's version, and ""
	// leaves it out.
	Version string
	// Rules are the rules that ran.
	Rules []Rule
	// Findings are what they found, ordered by file and line.
	Findings []Finding
	// Errors are the inputs that could not be read, each an
	// *manifest.Error or an error naming its input.
	Errors []error
}

// Count returns the number of findings at or above severity min.
func (r Report) Count(min Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity >= min {
			n++
		}
	}
	return n
}

// inputError returns err's file and line, when it names them.
func inputError(err error) (file string, line int, reason string) {
	var e *manifest.Error
	if errors.As(err, &e) {
		return e.File, e.Line, e.Err.Error()
	}
	return "", 0, err.Error()
}

// ANSI escapes for WriteText's colour.
const (
	ansiBold   = "\x1b[1m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiReset  = "\x1b[0m"
)

var severityColour = [...]string{Info: ansiCyan, Warning: ansiYellow, Error: ansiRed}

// WriteText writes r for people: findings and input errors grouped by
// file, each with its line, severity, rule, object, field, message, why
// and fix, then a summary line. colour adds ANSI colours, for a terminal.
func WriteText(w io.Writer, r Report, colour bool) error {
	paint := func(code, s string) string {
		if !colour {
			return s
		}
		return code + s + ansiReset
	}
	type group struct {
		errs     []string
		findings []Finding
	}
	groups := make(map[string]*group)
	at := func(file string) *group {
		if groups[file] == nil {
			groups[file] = &group{}
		}
		return groups[file]
	}
	for _, err := range r.Errors {
		file, line, reason := inputError(err)
		g := at(file)
		if line > 0 {
			g.errs = append(g.errs, fmt.Sprintf("%s:%d: %s %s", file, line, paint(ansiRed, "cannot read:"), reason))
		} else {
			g.errs = append(g.errs, fmt.Sprintf("%s: %s %s", file, paint(ansiRed, "cannot read:"), reason))
		}
	}
	for _, f := range r.Findings {
		at(f.File).findings = append(at(f.File).findings, f)
	}
	files := make([]string, 0, len(groups))
	for f := range groups {
		files = append(files, f)
	}
	slices.Sort(files)

	var b strings.Builder
	for _, file := range files {
		g := groups[file]
		if file != "" {
			b.WriteString(paint(ansiBold, file) + "\n")
		}
		for _, e := range g.errs {
			b.WriteString("  " + e + "\n")
		}
		for _, f := range g.findings {
			fmt.Fprintf(&b, "  %s:%d: %s [%s] %s, %s\n", f.File, f.Line, paint(severityColour[f.Severity], f.Severity.String()), f.Rule, f.Object, f.Field)
			fmt.Fprintf(&b, "    %s\n    why: %s\n    fix: %s\n", f.Message, f.Why, f.Fix)
		}
		b.WriteString("\n")
	}
	b.WriteString(summary(r) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// summary counts findings by severity and input errors.
func summary(r Report) string {
	var counts [len(severityNames)]int
	files := make(map[string]bool)
	for _, f := range r.Findings {
		counts[f.Severity]++
		files[f.File] = true
	}
	s := fmt.Sprintf("%d %s, %d %s, %d info", counts[Error], plural(counts[Error], "error"), counts[Warning], plural(counts[Warning], "warning"), counts[Info])
	if len(r.Findings) > 0 {
		s += fmt.Sprintf(" in %d %s", len(files), plural(len(files), "file"))
	}
	if n := len(r.Errors); n > 0 {
		s += fmt.Sprintf("; %d %s could not be read", n, plural(n, "input"))
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
