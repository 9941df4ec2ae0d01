package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// comparison returns the sides of a comparison: the real cluster ran only
// the first scenario, with fewer refused requests and a longer rollout.
func comparison() []Side {
	real := twoScenarios()
	real.Scenarios = real.Scenarios[:1]
	s := &real.Scenarios[0]
	s.Totals.Refused, s.Totals.OK = 200, 192
	s.Runs[0].RolloutMS = 1500
	return []Side{{Cluster: "embedded", Results: twoScenarios()}, {Cluster: "cluster", Results: real}}
}

func TestWriteComparison(t *testing.T) {
	var text, js bytes.Buffer
	if err := WriteComparison(&text, comparison()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "compare.txt.golden"), text.Bytes())
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
