package report

import (
	"bytes"
	"encoding/xml"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// TestJUnitGolden pins the document: a failing and a passing run.
func TestJUnitGolden(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteJUnit(&b, "closingtime lab", twoScenarios(), 0); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "junit.xml.golden"), b.Bytes())
}

// TestJUnitShapes reads the document back as a CI system does and checks
// its counts and each test case's verdict against the limit.
func TestJUnitShapes(t *testing.T) {
	t.Parallel()
	type testCase struct {
		Name    string `xml:"name,attr"`
		Class   string `xml:"classname,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		} `xml:"failure"`
		Out string `xml:"system-out"`
	}
	type doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Name     string     `xml:"name,attr"`
			Tests    int        `xml:"tests,attr"`
			Failures int        `xml:"failures,attr"`
			Cases    []testCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	repeated := twoScenarios()
	plain := &repeated.Scenarios[0]
	second := plain.Runs[0]
	second.Repetition, second.Totals.Refused, second.Totals.OK = 2, 0, 392
	plain.Runs = append(plain.Runs, second)
	tests := []struct {
		name    string
		results *results.Results
		limit   int64
		// failed lists the failing test cases as suite/case.
		failed []string
		tests  int
	}{
		{name: "limit zero", results: twoScenarios(), limit: 0, failed: []string{"rollout/1-plain (Deployment app)/run 1"}, tests: 2},
		{name: "at the limit", results: twoScenarios(), limit: 261, tests: 2},
		{name: "one over the limit", results: twoScenarios(), limit: 260, failed: []string{"rollout/1-plain (Deployment app)/run 1"}, tests: 2},
		{name: "no limit", results: twoScenarios(), limit: NoLimit, tests: 2},
		{name: "a case per repetition", results: repeated, limit: 100, failed: []string{"rollout/1-plain (Deployment app)/run 1"}, tests: 3},
		{name: "no scenarios", results: &results.Results{}, limit: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteJUnit(&b, "rollout", tt.results, tt.limit); err != nil {
				t.Fatal(err)
			}
			var d doc
			if err := xml.Unmarshal(b.Bytes(), &d); err != nil {
				t.Fatalf("not XML: %v\n%s", err, b.String())
			}
			var failed []string
			tests := 0
			for _, s := range d.Suites {
				n := 0
				for _, c := range s.Cases {
					tests++
					if c.Class != s.Name {
						t.Errorf("case %q has class %q, want its suite's %q", c.Name, c.Class, s.Name)
					}
					if c.Failure == nil {
						if !strings.Contains(c.Out, ", "+c.Name+" (action at") {
							t.Errorf("passing case %s/%s: output %q, want the run's figures", s.Name, c.Name, c.Out)
						}
						continue
					}
					n++
					failed = append(failed, s.Name+"/"+c.Name)
					if !strings.Contains(c.Failure.Message, "261 of 401 requests failed (refused=252 closed=9)") || !strings.Contains(c.Failure.Text, "+0s refused=50") {
						t.Errorf("failure of %s/%s: message %q, text %q; want the counts by class and the failed seconds", s.Name, c.Name, c.Failure.Message, c.Failure.Text)
					}
				}
				if s.Tests != len(s.Cases) || s.Failures != n {
					t.Errorf("suite %s: tests=%d failures=%d, want %d and %d", s.Name, s.Tests, s.Failures, len(s.Cases), n)
				}
			}
			if tests != tt.tests || d.Tests != tests || d.Failures != len(failed) {
				t.Errorf("tests=%d failures=%d with %d cases, want %d cases and the failures counted", d.Tests, d.Failures, tests, tt.tests)
			}
			if strings.Join(failed, ",") != strings.Join(tt.failed, ",") {
				t.Errorf("failed %q, want %q", failed, tt.failed)
			}
		})
	}
}
