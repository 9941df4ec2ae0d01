package cli

import (
	"bytes"
	"context"
	"fmt"
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
// exited-without-drain, and the text output names each cause diagnosed
// and its fix. With the preStop sleep and a drain
// (http.Server.Shutdown), nothing is cut and nothing is diagnosed, but for
// one race that Shutdown has: it closes the idle keep-alive connections
// at once, and a request the client is sending on one that moment is
// lost. The diagnosis calls that a stale connection; any variant may have
// it, on a kept-alive connection at its pod's SIGTERM (one request, in one
// of 35 runs of the drain on a busy machine of two cores).
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
			run, out := rolloutUserServer(t, server, tt.manifest)
			d := run.Diagnosis
			if d == nil {
				d = &results.Diagnosis{}
			}
			diagnosed := 0
			for _, cc := range d.Causes {
				diagnosed += cc.Failed
			}
			if int64(diagnosed) != run.Totals.Failed() {
				t.Errorf("%d failed requests, %d of them diagnosed; causes %+v", run.Totals.Failed(), diagnosed, d.Causes)
			}
			for _, c := range tt.want {
				if !slices.ContainsFunc(d.Causes, func(cc results.CauseCount) bool { return cc.Cause == c && cc.Failed > 0 }) {
					t.Errorf("no failed request of cause %s; totals %+v, causes %+v", c, run.Totals, d.Causes)
				}
			}
			wrong := map[results.Cause]int{}
			for _, r := range d.Requests {
				switch {
				case slices.Contains(tt.want, r.Cause) || slices.Contains(tt.also, r.Cause):
				case staleAtSigterm(run, r):
					t.Logf("stale keep-alive connection at its pod's SIGTERM: %s", requestEvidence(r))
				default:
					wrong[r.Cause]++
				}
			}
			for c, n := range wrong {
				t.Errorf("%d requests of cause %s, want only %v (or %v, or a stale connection at SIGTERM)", n, c, tt.want, tt.also)
				logRequests(t, d.Requests, c)
			}
			for _, info := range diagnosis.Causes() {
				has := slices.ContainsFunc(d.Causes, func(cc results.CauseCount) bool { return cc.Cause == info.Cause && cc.Failed > 0 })
				if strings.Contains(out, info.Title) != has || has && !strings.Contains(out, info.Fix) {
					t.Errorf("cause %s diagnosed: %v; the text output should name it and its fix then, and not otherwise:\n%s", info.Cause, has, out)
				}
			}
			if len(tt.want) == 0 {
				return
			}
			for _, p := range run.OldPods {
				if !slices.ContainsFunc(d.Findings, func(f results.Finding) bool { return f.Pod == p.Name && f.Kind == "exited-without-drain" }) {
					t.Errorf("old pod %s (exit %d): no finding exited-without-drain; findings %+v", p.Name, p.ExitCode, d.Findings)
				}
			}
		})
	}
}

// sigtermRace bounds how long after its pod's SIGTERM a request on a
// kept-alive connection may fail as stale: the server closes its idle
// connections on the signal (Shutdown at once, an exit with the process),
// and after that a client no longer sends on them. sigtermStamp is how
// much earlier than the failure the kubelet may stamp the signal it sent.
const (
	sigtermRace  = 1000 // ms
	sigtermStamp = 100  // ms
)

// staleAtSigterm reports whether r is a stale connection of the race at
// SIGTERM: a request on a kept-alive connection to an old pod of run that
// failed within sigtermRace after the pod's SIGTERM, as the kubelet
// stamped it.
func staleAtSigterm(run results.Run, r results.Request) bool {
	if r.Cause != diagnosis.StaleConnection || r.ConnRequests == 0 {
		return false
	}
	return slices.ContainsFunc(run.OldPods, func(p results.OldPod) bool {
		return p.Name == r.Pod && p.SigtermMS != nil && r.FailedMS >= *p.SigtermMS-sigtermStamp && r.FailedMS <= *p.SigtermMS+sigtermRace
	})
}

// rolloutUserServer runs closingtime rollout --local of manifest, its
// image run as the user's server at server, with a new-conn and a
// keep-alive client, and returns the run its results file holds and its
// text output. At 50 requests a second of 400 ms each (the manifests'
// WORK_MS), about 20 are in flight at any moment, spread over the old
// pods' kept-alive connections: every old pod has some when its signal
// comes.
func rolloutUserServer(t *testing.T, server, manifest string) (results.Run, string) {
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
	return run, out.String()
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
		t.Logf("  %s", requestEvidence(r))
	}
}

// requestEvidence says what the diagnosis joined to r, in one line.
func requestEvidence(r results.Request) string {
	ready := "unknown"
	if r.ReadyEndpoints != nil {
		ready = strconv.Itoa(*r.ReadyEndpoints)
	}
	reprobe := "none"
	if p := r.Reprobe; p != nil {
		reprobe = fmt.Sprintf("%s at %.0f ms to %q", p.Class, p.AtMS, p.Addr)
	}
	return fmt.Sprintf("%s %s %s at %.0f ms (connect %.0f, failed %.0f), %d before on its connection, addr %q, pod %q %s -> %s, routed by %v, ready endpoints %s, reprobe %s: %s",
		r.ID, r.Client, r.Class, r.AtMS, r.ConnectMS, r.FailedMS, r.ConnRequests, r.Addr, r.Pod, r.AtConnect.State, r.AtFailure.State, r.RoutedBy, ready, reprobe, r.Error)
}
