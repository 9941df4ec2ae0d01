package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// writeDiagnosis writes the end of a run's block: a line per cause of
// d with its requests and the seconds it covered, and under it, when
// fixes is true, its fix (see Fix); then a line per pod finding (see
// writeFindings) and, when fixes is true, a note per limit. A scenario of several runs gives its
// fixes and notes once, after them (writeScenarioCauses). A nil d writes
// nothing.
func writeDiagnosis(w io.Writer, d *results.Diagnosis, fixes bool) {
	if d == nil {
		return
	}
	writeCauses(w, d.Causes, fixes)
	writeFindings(w, d.Findings)
	if fixes {
		writeNotes(w, d.Limits)
	}
}

// writeScenarioCauses writes, for a scenario of several runs, its causes
// summed over them (diagnosis.Sum), each with its fix, and the distinct
// limits of its runs: what the runs' blocks left out. It writes nothing
// for a scenario of one run, nor for one whose runs had neither.
func writeScenarioCauses(w io.Writer, s results.Result) {
	if len(s.Runs) < 2 {
		return
	}
	sum := diagnosis.Sum(s.Runs)
	var limits []string
	for _, run := range s.Runs {
		if run.Diagnosis == nil {
			continue
		}
		for _, l := range run.Diagnosis.Limits {
			if !slices.Contains(limits, l) {
				limits = append(limits, l)
			}
		}
	}
	if len(sum) == 0 && len(limits) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s, %d runs: %d requests, %d failed\n", s.Name, len(s.Runs), s.Totals.Requests, s.Totals.Failed())
	writeCauses(w, sum, true)
	writeNotes(w, limits)
}

// writeCauses writes "  causes:" and a line per cause of counts: its
// requests (causeCount), its title and, if known, the seconds it covered;
// under it its fix when fixes is true. The titles line up.
func writeCauses(w io.Writer, counts []results.CauseCount, fixes bool) {
	if len(counts) == 0 {
		return
	}
	fmt.Fprintln(w, "  causes:")
	width := 0
	for _, c := range counts {
		width = max(width, len(causeCount(c)))
	}
	for _, c := range counts {
		line := diagnosis.Describe(c.Cause).Title
		if len(c.Seconds) > 0 {
			line += " (sent in " + secondsSpan(c.Seconds) + ")"
		}
		fmt.Fprintf(w, "    %-*s  %s\n", width, causeCount(c), line)
		if fixes {
			fmt.Fprintf(w, "      fix: %s\n", Fix(c.Cause))
		}
	}
}

// writeFindings writes a line per finding, "  pod NAME: TEXT"; one that
// several pods share, word for word, is one line that names them all,
// "  pods A, B, each: TEXT". The lines of a kind of finding come
// together, the kinds in the order they first come in findings.
func writeFindings(w io.Writer, findings []results.Finding) {
	type line struct {
		kind, text string
		pods       []string
	}
	var lines []*line
	byText := map[string]*line{}
	for _, f := range findings {
		l := byText[f.Text]
		if l == nil {
			l = &line{kind: f.Kind, text: f.Text}
			byText[f.Text] = l
			lines = append(lines, l)
		}
		l.pods = append(l.pods, f.Pod)
	}
	var kinds []string
	for _, l := range lines {
		if !slices.Contains(kinds, l.kind) {
			kinds = append(kinds, l.kind)
		}
	}
	slices.SortStableFunc(lines, func(a, b *line) int {
		return slices.Index(kinds, a.kind) - slices.Index(kinds, b.kind)
	})
	for _, l := range lines {
		if len(l.pods) == 1 {
			fmt.Fprintf(w, "  pod %s: %s\n", l.pods[0], l.text)
		} else {
			fmt.Fprintf(w, "  pods %s, each: %s\n", strings.Join(l.pods, ", "), l.text)
		}
	}
}

// writeNotes writes a note per limit of a diagnosis.
func writeNotes(w io.Writer, limits []string) {
	for _, l := range limits {
		fmt.Fprintf(w, "  note: %s\n", l)
	}
}

// Fix spells what to change against cause c, the section of
// docs/diagnosis.md that explains it, and the closingtime lint rule that
// catches it in the manifests, if one does: "add a readiness probe … —
// docs/diagnosis.md#not-listening, closingtime lint:
// readiness-probe-missing".
func Fix(c results.Cause) string {
	info := diagnosis.Describe(c)
	fix := info.Fix + " — " + diagnosis.DocsLink(c)
	if info.Rule != "" {
		fix += ", closingtime lint: " + info.Rule
	}
	return fix
}

// causeCount spells the requests of a cause: "12 failed", "3 failed, 2
// absorbed", or "2 absorbed" when a retry saved them all.
func causeCount(c results.CauseCount) string {
	switch {
	case c.Absorbed == 0:
		return fmt.Sprintf("%d failed", c.Failed)
	case c.Failed == 0:
		return fmt.Sprintf("%d absorbed", c.Absorbed)
	}
	return fmt.Sprintf("%d failed, %d absorbed", c.Failed, c.Absorbed)
}

// maxSpans is how many runs of seconds secondsSpan lists before it
// elides the middle ones.
const maxSpans = 6

// secondsSpan spells seconds, sorted, as the per-second lines do ("+5s"),
// consecutive ones as a range: "-1s..+2s +5s +11s..+12s". Past maxSpans
// runs it gives the first ones, "…" and the last.
func secondsSpan(seconds []int) string {
	var spans []string
	for i := 0; i < len(seconds); {
		j := i
		for j+1 < len(seconds) && seconds[j+1] == seconds[j]+1 {
			j++
		}
		span := fmt.Sprintf("%+ds", seconds[i])
		if j > i {
			span += fmt.Sprintf("..%+ds", seconds[j])
		}
		spans = append(spans, span)
		i = j + 1
	}
	if len(spans) > maxSpans {
		spans = append(spans[:maxSpans-2:maxSpans-2], "…", spans[len(spans)-1])
	}
	return strings.Join(spans, " ")
}
