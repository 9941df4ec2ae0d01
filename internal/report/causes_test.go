package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// diagnosed returns the results of three scenarios with their diagnoses,
// as the runner gives them: a run whose failures had two causes, with a
// finding that three pods share; a run whose failures a retry partly
// absorbed, with a limit of its cluster; two runs of a scenario whose
// causes differ from run to run, one of them spread over many seconds;
// and a run with nothing to tell.
func diagnosed() *results.Results {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	f := ptr.To[float64]
	n := ptr.To[int]
	var refused, closed load.Counts
	refused[load.OK], refused[load.Refused] = 45, 5
	closed[load.OK], closed[load.Closed] = 48, 2
	oldPod := func(name string, sigterm float64) results.OldPod {
		return results.OldPod{Name: name, SigtermMS: f(sigterm), LastRequestMS: f(sigterm - 300), GapMS: f(300), AfterSigterm: n(0), DrainMS: 20, ExitCode: 143}
	}
	routing := "at SIGTERM, the routing view of node-1, node-2 still sent new connections to it: a preStop delay would have covered the propagation"
	viaService := "connections went to the Service's address: the pod behind a failed connection is inferred from the pods that stopped or were listed then, not seen"
	keepAlive := func(rep int, at time.Time, failed int, counts ...results.CauseCount) results.Run {
		return results.Run{
			Repetition: rep, Start: at, Totals: results.Totals{Requests: 480, OK: int64(480 - failed), Closed: int64(failed)},
			Diagnosis: &results.Diagnosis{
				Causes:   counts,
				Findings: []results.Finding{{Pod: "app-67b75bbcbc-tszfw", Kind: "killed-at-grace-end", Text: "killed at the end of its 10.00 s grace period, exit 137"}},
				Limits:   []string{viaService},
			},
		}
	}
	return &results.Results{Scenarios: []results.Result{
		{
			Name: "2-readiness", Deployment: "default/app", Totals: results.Totals{Requests: 1102, OK: 1074, Refused: 22, Closed: 6},
			Runs: []results.Run{{
				Repetition: 1, Start: start, Totals: results.Totals{Requests: 1102, OK: 1074, Refused: 22, Closed: 6},
				FailedSeconds: []results.FailedSecond{{Second: 5, Counts: closed}, {Second: 6, Counts: refused}},
				OldPods:       []results.OldPod{oldPod("app-5dc5bbfc9f-2zckl", 6020), oldPod("app-5dc5bbfc9f-gkbrs", 12030), oldPod("app-5dc5bbfc9f-68vq4", 18030)},
				Diagnosis: &results.Diagnosis{
					Causes: []results.CauseCount{
						{Cause: diagnosis.NoEndpoint, Failed: 22, FirstMS: 6079, LastMS: 18119, Seconds: []int{6, 12, 18}},
						{Cause: diagnosis.ExitWithoutDrain, Failed: 6, FirstMS: 5819, LastMS: 18019, Seconds: []int{5, 11, 17, 18},
							Pods: []string{"app-5dc5bbfc9f-2zckl", "app-5dc5bbfc9f-68vq4", "app-5dc5bbfc9f-gkbrs"}},
					},
					Findings: []results.Finding{
						{Pod: "app-5dc5bbfc9f-2zckl", Kind: "exited-without-drain", Text: "exited 0.00 s after SIGTERM with code 143, cutting 1 request in flight"},
						{Pod: "app-5dc5bbfc9f-2zckl", Kind: "routing-not-converged", Text: routing},
						{Pod: "app-5dc5bbfc9f-gkbrs", Kind: "exited-without-drain", Text: "exited 0.00 s after SIGTERM with code 143, cutting 2 requests in flight"},
						{Pod: "app-5dc5bbfc9f-gkbrs", Kind: "routing-not-converged", Text: routing},
						{Pod: "app-5dc5bbfc9f-68vq4", Kind: "exited-without-drain", Text: "exited 0.00 s after SIGTERM with code 143, cutting 3 requests in flight"},
						{Pod: "app-5dc5bbfc9f-68vq4", Kind: "routing-not-converged", Text: routing},
					},
				},
			}},
		},
		{
			Name: "E-client-retry", Deployment: "default/app", Totals: results.Totals{Requests: 484, OK: 482, Closed: 2, Absorbed: 3},
			Runs: []results.Run{{
				Repetition: 1, Start: start.Add(time.Minute), Totals: results.Totals{Requests: 484, OK: 482, Closed: 2, Absorbed: 3},
				Diagnosis: &results.Diagnosis{
					Causes: []results.CauseCount{
						{Cause: diagnosis.StaleConnection, Failed: 2, Absorbed: 3, FirstMS: 14805, LastMS: 24649, Seconds: []int{14, 24}},
						{Cause: diagnosis.Unknown, Absorbed: 1, FirstMS: 25009, LastMS: 25009, Seconds: []int{25}},
					},
					Limits: []string{viaService},
				},
			}},
		},
		{
			Name: "C-graceful-keepalive", Deployment: "default/app", Totals: results.Totals{Requests: 960, OK: 943, Closed: 17},
			Runs: []results.Run{
				keepAlive(1, start.Add(2*time.Minute), 3,
					results.CauseCount{Cause: diagnosis.KilledKeepAliveHostage, Failed: 3, FirstMS: 14805, LastMS: 24649, Seconds: []int{14, 19, 24}}),
				keepAlive(2, start.Add(3*time.Minute), 14,
					results.CauseCount{Cause: diagnosis.KilledKeepAliveHostage, Failed: 10, FirstMS: 1000, LastMS: 40100, Seconds: []int{1, 3, 5, 6, 7, 9, 11, 20, 40}},
					results.CauseCount{Cause: diagnosis.StaleConnection, Failed: 4, FirstMS: 15000, LastMS: 15900, Seconds: []int{15}}),
			},
		},
		{
			Name: "3-graceful", Deployment: "default/app", Totals: results.Totals{Requests: 1350, OK: 1350},
			Runs: []results.Run{{Repetition: 1, Start: start.Add(4 * time.Minute), Totals: results.Totals{Requests: 1350, OK: 1350},
				OldPods: []results.OldPod{oldPod("app-5bfbb5fb9f-f2rck", 11010)}}},
		},
	}}
}

// TestWriteTextCauses renders the diagnoses: each cause of a run with its
// own count, a run of one scenario with its fixes, those of several with
// theirs once under their sum.
func TestWriteTextCauses(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, diagnosed()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// Mixed causes: each counted, with the seconds its requests were
		// sent in.
		"    22 failed  no ready endpoint: the Service refused the connection, or let it time out (sent in +6s +12s +18s)\n",
		"    6 failed   cut in flight: the server exited on the stop signal without draining (sent in +5s +11s +17s..+18s)\n",
		"      fix: " + diagnosis.Describe(diagnosis.NoEndpoint).Fix + " — docs/diagnosis.md#no-endpoint, closingtime lint: rolling-update-unavailable\n",
		"    2 failed, 3 absorbed  stale connection:",
		"    1 absorbed            unknown: no rule explains the evidence (sent in +25s)\n",
		// Over the runs of a scenario, summed, without seconds.
		"C-graceful-keepalive, 2 runs: 960 requests, 17 failed\n  causes:\n    13 failed  cut by SIGKILL: busy keep-alive",
		"  pods app-5dc5bbfc9f-2zckl, app-5dc5bbfc9f-gkbrs, app-5dc5bbfc9f-68vq4, each: at SIGTERM,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "fix: "+diagnosis.Describe(diagnosis.KilledKeepAliveHostage).Fix); n != 1 {
		t.Errorf("the fix of a cause of two runs is written %d times, want once, under their sum:\n%s", n, out)
	}
	if n := strings.Count(out, "note: connections went to the Service's address"); n != 2 {
		t.Errorf("the note of the Service's address is written %d times, want twice: for E's run and once for C's two runs:\n%s", n, out)
	}
	_, graceful, _ := strings.Cut(out, "3-graceful, run 1")
	if strings.Contains(graceful, "causes") || strings.Contains(graceful, "\n  pod ") {
		t.Errorf("a run without a diagnosis has a causes block:\n%s", graceful)
	}
	golden.Check(t, filepath.Join("testdata", "causes.txt.golden"), b.Bytes())
}

func TestSecondsSpan(t *testing.T) {
	tests := []struct {
		seconds []int
		want    string
	}{
		{[]int{5}, "+5s"},
		{[]int{-1, 0}, "-1s..+0s"},
		{[]int{10, 11, 12, 13, 14, 15}, "+10s..+15s"},
		{[]int{5, 11, 17, 18}, "+5s +11s +17s..+18s"},
		{[]int{1, 3, 5, 7, 9, 11}, "+1s +3s +5s +7s +9s +11s"},
		{[]int{1, 3, 5, 6, 7, 9, 11, 20, 40}, "+1s +3s +5s..+7s +9s … +40s"},
	}
	for _, tt := range tests {
		if got := secondsSpan(tt.seconds); got != tt.want {
			t.Errorf("secondsSpan(%v) = %q, want %q", tt.seconds, got, tt.want)
		}
	}
}
