package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// readInput reads a testdata file as Read would, under its base name, so
// that golden files do not depend on where the test runs.
func readInput(t *testing.T, file string) Input {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var in Input
	if errs := in.add(manifest.File{Name: filepath.Base(file), Data: data}); len(errs) > 0 {
		t.Fatalf("read %s: %v", file, errs)
	}
	return in
}

// render formats findings for golden files: one line each, and the fix.
func render(findings []Finding) string {
	var b strings.Builder
	for _, f := range findings {
		b.WriteString(f.String() + "\n  fix: " + f.Fix + "\n")
	}
	return b.String()
}

// measuredSuffix ends the name of the results file that a rule's input is
// linted with, as with --measured: X.results.json for X.yaml.
const measuredSuffix = ".results.json"

// readMeasured reads a results file as `closingtime lint --measured` does.
func readMeasured(t *testing.T, file string) ([]Measurement, error) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	results, err := results.Read(f)
	if err != nil {
		return nil, err
	}
	return Measure(results)
}

// linterFor returns a Linter that runs rule id alone, with the
// measurement of the input file when it has one, and that measurement's
// file name ("" when it has none).
func linterFor(t *testing.T, id, file string) (*Linter, string) {
	t.Helper()
	cfg := Config{Enable: []string{id}}
	measured := strings.TrimSuffix(file, filepath.Ext(file)) + measuredSuffix
	if _, err := os.Stat(measured); err == nil {
		if cfg.Measured, err = readMeasured(t, measured); err != nil {
			t.Fatalf("%s: %v", measured, err)
		}
	} else {
		measured = ""
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, measured
}

// testRule runs rule r alone over the inputs in testdata/<r.ID>, each with
// its results file when it has one: every valid-* file must yield no
// finding, and every invalid-* file at least one, matching its .golden
// file.
func testRule(t *testing.T, r *Rule) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", r.ID, "*"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		return filepath.Ext(f) == ".golden" || strings.HasSuffix(f, measuredSuffix)
	})
	var valid, invalid int
	for _, f := range files {
		switch {
		case strings.HasPrefix(filepath.Base(f), "valid-"):
			valid++
		case strings.HasPrefix(filepath.Base(f), "invalid-"):
			invalid++
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("testdata/%s has %d valid and %d invalid manifests; want at least one of each", r.ID, valid, invalid)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, _ := linterFor(t, r.ID, file)
			got := l.Lint(readInput(t, file))
			if strings.HasPrefix(name, "valid-") {
				if len(got) > 0 {
					t.Errorf("Lint(%s) = %d findings, want none:\n%s", name, len(got), render(got))
				}
				return
			}
			if len(got) == 0 {
				t.Errorf("Lint(%s) found nothing", name)
			}
			for _, f := range got {
				if f.Line < 1 || f.Field == "" || f.Message == "" || f.Fix == "" {
					t.Errorf("finding lacks a position, field, message or fix: %+v", f)
				}
			}
			golden.Check(t, strings.TrimSuffix(file, filepath.Ext(file))+".golden", []byte(render(got)))
		})
	}
}

var ruleID = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func TestRules(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for _, r := range Rules() {
		if !ruleID.MatchString(r.ID) || seen[r.ID] {
			t.Errorf("rule ID %q is not unique kebab-case", r.ID)
		}
		seen[r.ID] = true
		if r.Title == "" || r.Why == "" || r.Fix == "" {
			t.Errorf("rule %s lacks a title, why or fix", r.ID)
		}
		if _, err := os.Stat(filepath.Join("testdata", r.ID)); err != nil {
			t.Errorf("rule %s has no testdata: %v", r.ID, err)
		}
	}
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !seen[d.Name()] && !slices.Contains([]string{"report", "corpus", "measured", "microservices-demo"}, d.Name()) {
			t.Errorf("testdata/%s belongs to no rule", d.Name())
		}
	}
}
