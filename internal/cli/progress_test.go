package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// TestProgressLines checks the display written where standard error is not
// a terminal: a line per phase, with the repetition once there is one, and
// a line per notice, after its phase.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, []*scenario.Scenario{{Name: "1-plain"}})
	p.update(scenario.Progress{Scenario: "1-plain", Repetitions: 2, Phase: scenario.PhaseDeploy})
	p.update(scenario.Progress{Scenario: "1-plain", Repetitions: 2, Phase: scenario.PhaseDeploy, Notice: "pod app-1: container app exited with code 1"})
	p.update(scenario.Progress{Scenario: "1-plain", Repetition: 2, Repetitions: 2, Phase: scenario.PhaseWait})
	p.finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"1-plain                  deploy", "1-plain                  deploy: pod app-1: container app exited with code 1", "1-plain                  2/2 wait"}
	if len(lines) != len(want) {
		t.Fatalf("progress lines:\n%s\nwant %d", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d %q, want it to end with %q", i, lines[i], w)
		}
	}
}

// TestProgressBars draws the bars into a buffer: each scenario's bar shows
// its name, its repetition and phase, and fills as the phases go by.
func TestProgressBars(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressBars(&buf, []*scenario.Scenario{{Name: "1-plain"}, {Name: "3-graceful"}}, true)
	p.update(scenario.Progress{Scenario: "1-plain", Repetitions: 1, Phase: scenario.PhaseDeploy})
	p.update(scenario.Progress{Scenario: "1-plain", Repetition: 1, Repetitions: 1, Phase: scenario.PhaseDone})
	p.update(scenario.Progress{Scenario: "3-graceful", Repetitions: 3, Phase: scenario.PhaseDeploy})
	p.update(scenario.Progress{Scenario: "3-graceful", Repetition: 2, Repetitions: 3, Phase: scenario.PhaseAct})
	p.update(scenario.Progress{Scenario: "no-such-scenario", Phase: scenario.PhaseAct})
	p.update(scenario.Progress{Scenario: "3-graceful", Repetition: 2, Repetitions: 3, Phase: scenario.PhaseAct, Notice: "pod app-1: readiness probe failed"})
	fmt.Fprintln(p, "lab: interrupted")
	if got, want := p.bars["3-graceful"].bar.Current(), int64(1+4+2); got != want {
		t.Errorf("3-graceful's bar at %d, want %d", got, want)
	}
	p.finish()
	fmt.Fprintln(p, "lab: interrupted again")
	out := buf.String()
	if !strings.HasPrefix(out, "3-graceful 2/3 act: pod app-1: readiness probe failed\nlab: interrupted\n") || !strings.HasSuffix(out, "\nlab: interrupted again\n") {
		t.Errorf("the notice and the first message are not above the bars, or the second not below them:\n%q", out)
	}
	for _, want := range []string{"1-plain", "done 1/1", "3-graceful", "act 2/3"} {
		if !strings.Contains(out, want) {
			t.Errorf("bars lack %q:\n%s", want, out)
		}
	}
	if !p.bars["1-plain"].bar.Completed() || !p.bars["3-graceful"].bar.Aborted() {
		t.Error("finish should leave the finished scenario's bar complete and stop the other")
	}
}
