package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// userServerImage is the image of the rollout-user-*.yaml manifests, which
// --image-command maps to testdata/userserver.
const userServerImage = "registry.example/user-shop:1.0"

// buildUserServer builds testdata/userserver, a user's server that knows
// nothing of closingtime, into a temporary directory and returns its path.
func buildUserServer(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on $PATH, and it builds testdata/userserver")
	}
	bin := filepath.Join(t.TempDir(), "userserver")
	out, err := exec.Command(goTool, "build", "-o", bin, "./testdata/userserver").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./testdata/userserver: %v\n%s", err, out)
	}
	return bin
}

// TestRolloutDiagnosisUserServer rolls out a user's own server (not
// closingtime serve: it logs plain text and tells nothing of its shutdown)
// under new-conn and keep-alive traffic, and checks what the diagnosis
// says. Without a SIGTERM handler the server exits on the signal with
// requests in flight: with no preStop hook, the exit cuts them and new
// connections still routed to the gone pod are refused (a routing race);
// behind a preStop sleep longer than the endpoint propagation, only the
// kept-alive connections are still on the old pods when the signal comes,
// and the exit cuts their requests. Each old pod gets the finding
// exited-without-drain. With the preStop sleep and a drain
// (http.Server.Shutdown), no request fails and nothing is diagnosed.
func TestRolloutDiagnosisUserServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	server := buildUserServer(t)
	for _, tt := range []struct {
		name, manifest string
		// want are the causes that must each explain failed requests;
		// also, those that may, as the manifest lets them happen.
		want, also []results.Cause
	}{
		{name: "no preStop, no drain", manifest: "rollout-user-exit.yaml",
			want: []results.Cause{diagnosis.ExitWithoutDrain}, also: []results.Cause{diagnosis.RoutingRace}},
		{name: "preStop, no drain", manifest: "rollout-user-prestop.yaml",
			want: []results.Cause{diagnosis.ExitWithoutDrain}},
		{name: "preStop and drain", manifest: "rollout-user-drain.yaml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := rolloutUserServer(t, server, tt.manifest)
			d := run.Diagnosis
			if len(tt.want) == 0 {
				if run.Totals.Failed() > 0 {
					t.Errorf("totals %+v: want no failed request", run.Totals)
				}
				if d != nil {
					for _, cc := range d.Causes {
						t.Errorf("%d failed and %d absorbed requests of cause %s, want none", cc.Failed, cc.Absorbed, cc.Cause)
						logRequests(t, d.Requests, cc.Cause)
					}
				}
				return
			}
			if run.Totals.Failed() == 0 || d == nil {
				t.Fatalf("totals %+v, diagnosis %+v: want failed requests, diagnosed", run.Totals, d)
			}
			for _, c := range tt.want {
				if !slices.ContainsFunc(d.Causes, func(cc results.CauseCount) bool { return cc.Cause == c && cc.Failed > 0 }) {
					t.Errorf("no failed request of cause %s; causes %+v", c, d.Causes)
				}
			}
			for _, cc := range d.Causes {
				if slices.Contains(tt.want, cc.Cause) || slices.Contains(tt.also, cc.Cause) {
					continue
				}
				t.Errorf("%d failed and %d absorbed requests of cause %s, want only %v (or %v)", cc.Failed, cc.Absorbed, cc.Cause, tt.want, tt.also)
				logRequests(t, d.Requests, cc.Cause)
			}
			for _, p := range run.OldPods {
				if !slices.ContainsFunc(d.Findings, func(f results.Finding) bool { return f.Pod == p.Name && f.Kind == "exited-without-drain" }) {
					t.Errorf("old pod %s (exit %d): no finding exited-without-drain; findings %+v", p.Name, p.ExitCode, d.Findings)
				}
			}
		})
	}
}

// rolloutUserServer runs closingtime rollout --local of manifest, its
// image run as the user's server at server, with a new-conn and a
// keep-alive client, and returns the run its results file holds. At 50
// requests a second of 400 ms each (the manifests' WORK_MS), about 20 are
// in flight at any moment, spread over the old pods' kept-alive
// connections: every old pod has some when its signal comes.
func rolloutUserServer(t *testing.T, server, manifest string) results.Run {
	t.Helper()
	file := filepath.Join(t.TempDir(), "results.json")
	args := []string{"rollout", "-f", filepath.Join("testdata", manifest), "--local",
		"--image-command", userServerImage + "=" + server,
		"--client", "new-conn=20", "--client", "keep-alive=50", "--connections", "32",
		"--warm-up", "1s", "--after", "1s", "--max-failures", "-1", "--results", file}
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := results.Read(f)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	if len(res.Scenarios) != 1 || len(res.Scenarios[0].Runs) != 1 {
		t.Fatalf("results %+v: want one rollout's run", res)
	}
	run := res.Scenarios[0].Runs[0]
	t.Logf("stdout:\n%s", out.String())
	if d := run.Diagnosis; d != nil {
		t.Logf("causes %+v\nfindings %+v\nlimits %q", d.Causes, d.Findings, d.Limits)
	}
	return run
}

// logRequests logs the evidence of the first requests of cause c.
func logRequests(t *testing.T, requests []results.Request, c results.Cause) {
	t.Helper()
	const most = 5
	n := 0
	for _, r := range requests {
		if r.Cause != c {
			continue
		}
		if n++; n > most {
			t.Logf("  and more")
			return
		}
		ready := "unknown"
		if r.ReadyEndpoints != nil {
			ready = strconv.Itoa(*r.ReadyEndpoints)
		}
		t.Logf("  %s %s %s at %.0f ms (connect %.0f, failed %.0f), %d before on its connection, addr %q, pod %q %s -> %s, routed by %v, ready endpoints %s: %s",
			r.ID, r.Client, r.Class, r.AtMS, r.ConnectMS, r.FailedMS, r.ConnRequests, r.Addr, r.Pod, r.AtConnect.State, r.AtFailure.State, r.RoutedBy, ready, r.Error)
	}
}
