package report

import (
	"bytes"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// comparison returns the sides of a comparison: the real cluster ran only
// the first scenario, with fewer refused requests, a longer rollout and
// a cause the embedded cluster did not give; the embedded cluster's
// second scenario had a request a retry absorbed.
func comparison() []Side {
	diagnosed := func(counts ...results.CauseCount) *results.Diagnosis { return &results.Diagnosis{Causes: counts} }
	embedded := twoScenarios()
	embedded.Scenarios[0].Runs[0].Diagnosis = diagnosed(
		results.CauseCount{Cause: diagnosis.NoEndpoint, Failed: 252, Seconds: []int{0, 1}},
		results.CauseCount{Cause: diagnosis.ExitWithoutDrain, Failed: 9, Seconds: []int{0}})
	embedded.Scenarios[1].Runs[0].Diagnosis = diagnosed(results.CauseCount{Cause: diagnosis.StaleConnection, Absorbed: 1, Seconds: []int{12}})
	real := twoScenarios()
	real.Scenarios = real.Scenarios[:1]
	s := &real.Scenarios[0]
	s.Totals.Refused, s.Totals.OK = 200, 192
	s.Runs[0].RolloutMS = 1500
	s.Runs[0].Diagnosis = diagnosed(
		results.CauseCount{Cause: diagnosis.NoEndpoint, Failed: 200, Seconds: []int{0, 1}},
		results.CauseCount{Cause: diagnosis.ExitWithoutDrain, Failed: 7, Seconds: []int{0}},
		results.CauseCount{Cause: diagnosis.Unknown, Failed: 2, Seconds: []int{1}})
	return []Side{{Cluster: "embedded", Results: embedded}, {Cluster: "cluster", Results: real}}
}

func TestWriteComparison(t *testing.T) {
	var text, js bytes.Buffer
	if err := WriteComparison(&text, comparison()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "compare.txt.golden"), text.Bytes())
	// Under the figures, each scenario's causes on both sides: counted
	// where the side has none of a cause, "-" where it did not run the
	// scenario.
	_, causes, _ := strings.Cut(text.String(), "\n\n")
	lines := strings.Split(strings.TrimSuffix(causes, "\n"), "\n")
	want := [][]string{
		{"scenario", "cause", "embedded", "cluster"},
		{"1-plain", "no-endpoint", "252 failed", "200 failed"},
		{"1-plain", "exit-without-drain", "9 failed", "7 failed"},
		{"1-plain", "unknown", "0 failed", "2 failed"},
		{"3-graceful", "stale-connection", "1 absorbed", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("causes:\n%s\nwant %d lines", causes, len(want))
	}
	columns := regexp.MustCompile(` {2,}`)
	for i, cells := range want {
		if got := columns.Split(strings.TrimSpace(lines[i]), -1); !slices.Equal(got, cells) {
			t.Errorf("causes line %d = %q, want the cells %q", i, lines[i], cells)
		}
	}
	if err := WriteComparisonJSON(&js, comparison()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "compare.json.golden"), js.Bytes())
}

func TestWriteComparisonDuplicate(t *testing.T) {
	twice := twoScenarios()
	twice.Scenarios = append(twice.Scenarios, twice.Scenarios[0])
	err := WriteComparison(&bytes.Buffer{}, []Side{{Cluster: "cluster", Results: twice}})
	if err == nil || !strings.Contains(err.Error(), "1-plain twice") {
		t.Errorf("got %v, want an error naming the scenario given twice", err)
	}
	if err := WriteComparison(&bytes.Buffer{}, []Side{{Cluster: "embedded", Results: &results.Results{}}}); err != nil {
		t.Errorf("no scenarios: %v", err)
	}
}
