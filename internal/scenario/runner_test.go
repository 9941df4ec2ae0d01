package scenario

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests'
// pods run for image closingtime.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// newRunner returns a runner of quick runs on local clusters whose pods
// run binary, working in a temporary directory.
func newRunner(t *testing.T) *Runner {
	t.Helper()
	dir := t.TempDir()
	r, err := NewRunner(RunnerConfig{
		Quick: true,
		NewCluster: func(s ClusterSettings) (*Cluster, error) {
			c, err := local.New(local.Config{
				Nodes:               s.Nodes,
				MinPropagationDelay: s.PropagationDelay.Min,
				MaxPropagationDelay: s.PropagationDelay.Max,
				Kubelet: local.KubeletConfig{WorkingDir: dir, ImageCommands: map[string][]string{Image: {binary}},
					Env: []corev1.EnvVar{{Name: local.CommandEnv, Value: binary}}},
			})
			if err != nil {
				return nil, err
			}
			return &Cluster{Backend: c, Close: c.Close, ListenOutside: c.ListenOutside}, nil
		},
		Progress: func(p Progress) { t.Logf("%s %d/%d %s", p.Scenario, p.Repetition, p.Repetitions, p.Phase) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// catalogCheck is a catalog scenario and a check of the phenomenon its
// result must show.
type catalogCheck struct {
	name  string
	check func(t *testing.T, res *results.Result)
	// tweak, when set, changes the scenario before it runs.
	tweak func(s *Scenario)
}

// checkCatalog runs the scenarios of checks quick, at once, each on a
// cluster of its own, with the deploy's notices only, as the lab does, and
// then each check, as a subtest, on its scenario's result. It checks on
// the way that no notice comes after a deploy, though scenarios such as
// crashloop and probe-liveness-deep crash containers later on purpose.
func checkCatalog(t *testing.T, checks []catalogCheck) {
	t.Helper()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	scenarios, err := Select(all, names)
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) != len(checks) {
		t.Fatalf("%d scenarios for %d checks: name scenarios, not groups", len(scenarios), len(checks))
	}
	for i, c := range checks {
		if c.tweak != nil {
			c.tweak(scenarios[i])
		}
	}
	r := newRunner(t)
	r.cfg.DeployNoticesOnly = true
	r.cfg.Progress = func(p Progress) {
		t.Logf("%s %d/%d %s %s", p.Scenario, p.Repetition, p.Repetitions, p.Phase, p.Notice)
		if p.Notice != "" && p.Phase != PhaseDeploy {
			t.Errorf("notice after the deploy: %+v", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	got := make([]*results.Result, len(scenarios))
	errs := make([]error, len(scenarios))
	var wg sync.WaitGroup
	for i, s := range scenarios {
		wg.Go(func() { got[i], errs[i] = r.Run(ctx, s) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		if len(got[i].Runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", names[i], len(got[i].Runs))
		}
	}
	for i, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.check(t, got[i]) })
	}
}

// firstRun adapts a check of a result's first run to a catalogCheck's.
// noneFailed checks that no request of run failed.
func noneFailed(t *testing.T, run results.Run) {
	if n := run.Totals.Failed(); n != 0 {
		t.Errorf("%d failed, want none; totals %+v", n, run.Totals)
		logFailures(t, run)
	}
}

// cutInFlight returns a check that requests of the run failed, most of
// them cut in flight, each for cause (or one of also).
func cutInFlight(cause results.Cause, also ...results.Cause) func(*testing.T, results.Run) {
	return func(t *testing.T, run results.Run) {
		if tot := run.Totals; tot.Failed() == 0 || tot.Closed+tot.Reset < tot.Failed()/2 {
			t.Errorf("totals %+v: want failures, most of them cut in flight", tot)
			logOutcome(t, run)
		}
		causes(false, []results.Cause{cause}, also...)(t, run)
	}
}

// logFailures logs each failed request of run as the diagnosis explains
// it, so that a failing check says what failed, when and why.
func logFailures(t *testing.T, run results.Run) {
	t.Helper()
	if run.Diagnosis == nil {
		return
	}
	for _, r := range run.Diagnosis.Requests {
		t.Logf("request %s at %.0f ms: %s (%s), connected %.0f ms, failed %.0f ms, pod %q, cause %s",
			r.ID, r.AtMS, r.Class, r.Error, r.ConnectMS, r.FailedMS, r.Pod, r.Cause)
	}
}

// logOutcome logs how run's old pods ended and which pods answered, so
// that a check that wanted failures and saw none says what happened.
func logOutcome(t *testing.T, run results.Run) {
	t.Helper()
	for _, p := range run.OldPods {
		t.Logf("old pod %s: SIGTERM at %v ms, %v requests after it, exit %d %.0f ms after its termination began",
			p.Name, ptr.Deref(p.SigtermMS, -1), ptr.Deref(p.AfterSigterm, -1), p.ExitCode, p.DrainMS)
	}
	for _, c := range run.Clients {
		t.Logf("%s client: responses by pod %v", c.Kind, c.Pods)
	}
	for _, e := range run.Timeline {
		t.Logf("%+v", e)
	}
}

func firstRun(check func(t *testing.T, run results.Run)) func(t *testing.T, res *results.Result) {
	return func(t *testing.T, res *results.Result) { check(t, res.Runs[0]) }
}

// TestRunnerCatalog runs four of the catalog's scenarios quick, at once (they
// mostly wait), and checks the phenomenon each shows.
//
// Seed 001: without a readiness probe a rollout fails many requests, most
// of them refused, with whole seconds where every request fails; with
// readiness, a preStop sleep and a graceful drain, none fails and every old
// pod's last request comes seconds before its SIGTERM.
//
// Seed 000: with Node-style server.close(), an old pod serves busy
// keep-alive connections after SIGTERM until SIGKILL ends the grace period
// (exit 137); with the graceful library, no request fails, none needs a
// retry, and old pods exit 143 well within the grace period.
func TestRunnerCatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	checkCatalog(t, []catalogCheck{
		{name: "1-plain", check: func(t *testing.T, res *results.Result) {
			if res.Deployment != "default/app" {
				t.Errorf("Deployment = %q, want default/app", res.Deployment)
			}
			tot := res.Totals
			if tot.Failed() < tot.Requests/10 || tot.Refused <= tot.Failed()/2 {
				t.Errorf("totals %+v: want at least a tenth of the requests failed, most of them refused", tot)
			}
			run := res.Runs[0]
			if len(run.OldPods) != 3 {
				t.Fatalf("%d old pods, want 3: %+v", len(run.OldPods), run.OldPods)
			}
			whole := 0
			for _, s := range run.FailedSeconds {
				if s.Counts.Total() > 0 && s.Counts.Failed() == s.Counts.Total() {
					whole++
				}
			}
			if whole < 2 {
				t.Errorf("%d seconds where every request failed, want 2 or more: %+v", whole, run.FailedSeconds)
			}
		}},
		{name: "3-graceful", check: func(t *testing.T, res *results.Result) {
			if tot := res.Totals; tot.Failed() != 0 || tot.OK == 0 {
				t.Errorf("totals %+v: want requests and no failure", tot)
			}
			run := res.Runs[0]
			if len(run.OldPods) != 3 {
				t.Fatalf("%d old pods, want 3: %+v", len(run.OldPods), run.OldPods)
			}
			for _, p := range run.OldPods {
				if p.GapMS == nil || *p.GapMS < 1000 || p.AfterSigterm == nil || *p.AfterSigterm != 0 || p.ExitCode != 143 {
					t.Errorf("old pod %+v: want its last request a second or more before SIGTERM, none after, exit 143", p)
				}
			}
			if run.RolloutMS <= 0 || len(run.Timeline) == 0 {
				t.Errorf("rollout %v ms, %d timeline entries: want both", run.RolloutMS, len(run.Timeline))
			}
		}},
		{name: "C-graceful-keepalive", check: func(t *testing.T, res *results.Result) {
			hostages := 0
			for _, p := range res.Runs[0].OldPods {
				if p.ExitCode == 137 && p.AfterSigterm != nil && *p.AfterSigterm > 0 && p.DrainMS >= 9000 {
					hostages++
				}
			}
			if hostages == 0 {
				t.Errorf("old pods %+v: want one that served after SIGTERM until SIGKILL at the 10 s grace period", res.Runs[0].OldPods)
			}
		}},
		{name: "F-closingtime-graceful", check: func(t *testing.T, res *results.Result) {
			if tot := res.Totals; tot.Failed() != 0 || tot.Absorbed != 0 || tot.OK == 0 {
				t.Errorf("totals %+v: want requests, none failed, none absorbed", tot)
			}
			for _, p := range res.Runs[0].OldPods {
				if p.ExitCode != 143 || p.DrainMS > 8000 {
					t.Errorf("old pod %+v: want exit 143 within 8 s of a 10 s grace period", p)
				}
			}
		}},
	})
}

// TestRunnerActions runs the actions other than a rollout restart: a
// deleted pod and a scale-in each end one old pod, which exits on SIGTERM;
// an eviction that the budget refuses ends none, and the timeline has the
// refusal. A drain of a single replica that a budget of minAvailable 1
// protects is refused until its timeout, an outcome rather than an error.
// A dependency outage under a liveness probe that checks the dependency
// restarts pods, which recover once it is over. A release that crashes at
// start backs off 10 s, then 20 s, and is rolled back at the timeout.
// The timeline has the runner's steps of each (a drain's start and end, an
// outage's, the variables applied and the rollback) at the figures' times.
func TestRunnerActions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods under load")
	}
	t.Parallel()
	tests := []struct {
		file        string
		wantOldPods int    // each exits 143 after SIGTERM; -1: not checked
		wantKind    string // a cluster event kind the timeline must have
		// wantSteps are the kinds of the runner's entries, in order.
		wantSteps []string
		check     func(t *testing.T, run results.Run)
		all       func(t *testing.T, res *results.Result) // a check of every run
	}{
		{file: "valid-action-delete-pod.yaml", wantOldPods: 1, wantKind: "pod_deleted", check: func(t *testing.T, run results.Run) {
			if c := run.Capacity; c == nil || c.Replicas != 3 || c.MinReady != 2 {
				t.Errorf("capacity %+v, want 2 of 3 ready", c)
			}
			// The wait covers the deleted pod's exit.
			if run.RolloutMS <= 0 {
				t.Errorf("rollout %v ms, want the time the deleted pod was gone", run.RolloutMS)
			}
		}},
		{file: "valid-action-scale.yaml", wantOldPods: 1, wantKind: "replicaset_scaled", all: func(t *testing.T, res *results.Result) {
			// The second repetition scales from 3 again.
			if len(res.Runs) != 2 || len(res.Runs[1].OldPods) != 1 {
				t.Errorf("%d runs, the second's old pods %+v: want 2 runs, each of one scale-in victim", len(res.Runs), res.Runs[len(res.Runs)-1].OldPods)
			}
		}},
		{file: "valid-action-evict.yaml", wantOldPods: 0, wantKind: "eviction_refused", check: func(t *testing.T, run results.Run) {
			if e := run.Evictions; e == nil || *e != (results.Evictions{Refused: 1}) {
				t.Errorf("evictions %+v, want 1 refused", e)
			}
		}},
		{file: "valid-action-drain.yaml", wantOldPods: 0, wantKind: "node_uncordoned", wantSteps: []string{results.RunnerDrainStarted, results.RunnerDrainEnded}, check: func(t *testing.T, run results.Run) {
			d := run.Drain
			if d == nil || d.Drained || d.Node != "node-1" || d.TimeoutMS != 7000 || d.EndMS < 6500 {
				t.Fatalf("drain %+v, want node-1 blocked until the quick timeout of 7 s", d)
			}
			steps := runnerSteps(run)
			if s := steps[1]; s.AtMS != d.EndMS || s.Node != "node-1" || s.Detail["drained"] != "false" || steps[0].Detail["timeout"] != "7s" {
				t.Errorf("drain steps %+v, want node-1's, given up at %v after a 7s timeout", steps, d.EndMS)
			}
			// kubectl drain retries every 5 s: at 0 s and 5 s.
			if e := run.Evictions; e == nil || e.Accepted != 0 || e.Refused < 2 {
				t.Errorf("evictions %+v, want 2 or more refused, none accepted", e)
			}
		}},
		{file: "valid-action-outage.yaml", wantOldPods: -1, wantKind: "liveness_kill", wantSteps: []string{results.RunnerOutageStarted, results.RunnerOutageEnded}, check: func(t *testing.T, run results.Run) {
			o := run.Outage
			if o == nil || o.Mode != OutageRefuse || o.EndMS-o.StartMS < 5000 {
				t.Fatalf("outage %+v, want 5 s of refuse", o)
			}
			steps := runnerSteps(run)
			if steps[0].AtMS != o.StartMS || steps[1].AtMS != o.EndMS || steps[0].Detail["mode"] != OutageRefuse {
				t.Errorf("outage steps %+v, want the outage's start and end %+v", steps, o)
			}
			if run.Restarts == 0 || run.RecoverMS == nil {
				t.Errorf("restarts %d, recover %v: want restarts, and a recovery", run.Restarts, run.RecoverMS)
			}
		}},
		{file: "valid-action-set-env.yaml", wantOldPods: -1, wantKind: "back_off", wantSteps: []string{results.RunnerEnvApplied, results.RunnerRolledBack}, check: func(t *testing.T, run results.Run) {
			if steps := runnerSteps(run); run.RolledBackMS == nil || steps[1].AtMS != *run.RolledBackMS || len(steps[0].Detail) == 0 {
				t.Errorf("set-env steps %+v, want the variables applied, then the rollback at %v", steps, run.RolledBackMS)
			}
			if len(run.BackOffs) < 2 {
				t.Fatalf("back-offs %+v, want 2 or more", run.BackOffs)
			}
			// The kubelet's rule: 10 s, then twice that, less the time
			// from the exit to the restart decision.
			if d0, d1 := run.BackOffs[0].DelayMS, run.BackOffs[1].DelayMS; d0 < 9000 || d0 > 10000 || d1 < 19000 || d1 > 20000 {
				t.Errorf("back-offs %+v, want about 10 s then 20 s", run.BackOffs)
			}
			if run.RolledBackMS == nil || *run.RolledBackMS < 13000 {
				t.Errorf("rolled back at %v, want at the 13 s timeout", run.RolledBackMS)
			}
			if run.Totals.Failed() != 0 || run.Capacity == nil || run.Capacity.MinReady != 1 {
				t.Errorf("totals %+v, capacity %+v: want no failure, the old pod ready throughout", run.Totals, run.Capacity)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			s, err := ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := newRunner(t).Run(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			run := res.Runs[0]
			if tt.wantOldPods >= 0 {
				if len(run.OldPods) != tt.wantOldPods {
					t.Fatalf("old pods %+v, want %d", run.OldPods, tt.wantOldPods)
				}
				for _, p := range run.OldPods {
					if p.ExitCode != 143 || p.SigtermMS == nil {
						t.Errorf("old pod %+v: want SIGTERM and exit 143", p)
					}
				}
			}
			found := false
			for _, e := range run.Timeline {
				found = found || (e.Source == results.SourceCluster && e.Kind == tt.wantKind && e.AtMS >= 0)
			}
			if !found {
				t.Errorf("no %s event after the action in the timeline", tt.wantKind)
			}
			var steps []string
			last := 0.0
			for _, e := range runnerSteps(run) {
				steps = append(steps, e.Kind)
				if e.AtMS < last {
					t.Errorf("runner step %+v before the one it follows (%v ms)", e, last)
				}
				last = e.AtMS
			}
			if !slices.Equal(steps, tt.wantSteps) {
				t.Fatalf("runner steps %v, want %v", steps, tt.wantSteps)
			}
			if res.Totals.OK == 0 {
				t.Errorf("totals %+v: no request succeeded", res.Totals)
			}
			if tt.check != nil {
				tt.check(t, run)
			}
			if tt.all != nil {
				tt.all(t, res)
			}
		})
	}
}

// runnerSteps returns the runner's entries of run's timeline.
func runnerSteps(run results.Run) []results.Entry {
	var steps []results.Entry
	for _, e := range run.Timeline {
		if e.Source == results.SourceRunner {
			steps = append(steps, e)
		}
	}
	return steps
}

// TestRunnerCatalogDisruptions runs the catalog's scenarios beyond the
// rollouts quick, at once, and checks the phenomenon each shows (seeds 000,
// 003, 004): a liveness probe on a dependency restarts pods during an
// outage and CrashLoopBackOff delays the recovery, while the same check as
// readiness restarts nothing and recovers within seconds; a release that
// crashes at start backs off 10, 20, 40 s; a surge keeps every pod ready
// where maxUnavailable 1 does not; a budget refuses an eviction but not a
// DELETE or a rollout, and blocks the drain of a single replica with
// minAvailable 1 but not with maxUnavailable 1.
func TestRunnerCatalogDisruptions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs outages and rollouts under load")
	}
	t.Parallel()
	// capacity checks a rollout's capacity and the fewest ready pods its
	// strategy allows.
	capacity := func(want string, allowed int) func(t *testing.T, run results.Run) {
		return func(t *testing.T, run results.Run) {
			if c := run.Capacity; c == nil || fmt.Sprintf("%d/%d", c.MinReady, c.Replicas) != want || c.Allowed == nil || *c.Allowed != allowed {
				t.Errorf("capacity %+v, want %s, %d allowed", c, want, allowed)
			}
		}
	}
	evictions := func(accepted int, refused bool) func(t *testing.T, run results.Run) {
		return func(t *testing.T, run results.Run) {
			if e := run.Evictions; e == nil || e.Accepted != accepted || (e.Refused > 0) != refused {
				t.Errorf("evictions %+v, want %d accepted, refusals %v", e, accepted, refused)
			}
		}
	}
	checkCatalog(t, []catalogCheck{
		{name: "probe-liveness-deep", check: firstRun(func(t *testing.T, run results.Run) {
			if run.Restarts == 0 || len(run.BackOffs) == 0 || run.RecoverMS == nil || *run.RecoverMS < 5000 {
				t.Errorf("restarts %d, back-offs %+v, recover %v ms: want restarts, back-offs and 5 s or more to recover",
					run.Restarts, run.BackOffs, run.RecoverMS)
			}
			causes(false, []results.Cause{diagnosis.LivenessRestart}, diagnosis.NoEndpoint, diagnosis.NotListening)(t, run)
		})},
		{name: "probe-readiness-deep", check: firstRun(func(t *testing.T, run results.Run) {
			if run.Restarts != 0 || run.RecoverMS == nil || *run.RecoverMS > 5000 || run.Capacity.MinReady != 0 {
				t.Errorf("restarts %d, recover %v ms, capacity %+v: want no restart, every pod unready, back within 5 s",
					run.Restarts, run.RecoverMS, run.Capacity)
			}
			// Refused while no pod is ready, at most about once a second
			// (the kernel's rate of ICMP errors to one client), timed out
			// past that.
			if tot := run.Totals; tot.Failed() != tot.Refused+tot.Timeout+tot.HTTP5xx || tot.Refused == 0 {
				t.Errorf("totals %+v: want refused, connect timeouts or 5xx, as while no pod is ready", tot)
			}
			causes(false, []results.Cause{diagnosis.NoEndpoint})(t, run)
		})},
		{name: "crashloop", check: firstRun(func(t *testing.T, run results.Run) {
			var delays []float64
			for _, b := range run.BackOffs {
				delays = append(delays, math.Round(b.DelayMS/1000))
			}
			if !slices.Equal(delays, []float64{10, 20, 40}) || run.RolledBackMS == nil || run.Totals.Failed() != 0 {
				t.Errorf("back-offs %v s, rolled back %v, totals %+v: want 10 20 40, a rollback, no failure", delays, run.RolledBackMS, run.Totals)
			}
		})},
		{name: "surge-1-unavailable-0", check: firstRun(capacity("3/3", 3))},
		{name: "surge-0-unavailable-1", check: firstRun(capacity("2/3", 2))},
		{name: "pdb-1-evict", check: firstRun(evictions(0, true))},
		{name: "pdb-2-delete", check: firstRun(func(t *testing.T, run results.Run) {
			if len(run.OldPods) != 1 || run.Evictions != nil {
				t.Errorf("old pods %+v, evictions %+v: want the pod deleted, no eviction", run.OldPods, run.Evictions)
			}
			if c := run.Capacity; c == nil || c.Allowed != nil {
				t.Errorf("capacity %+v, want one with no allowed figure: a deletion is not a rollout", c)
			}
		})},
		{name: "pdb-3-rollout", check: firstRun(func(t *testing.T, run results.Run) {
			capacity("2/3", 2)(t, run)
			if len(run.OldPods) != 3 {
				t.Errorf("old pods %+v, want 3 replaced", run.OldPods)
			}
		})},
		{name: "pdb-4-drain-min-available", check: firstRun(func(t *testing.T, run results.Run) {
			evictions(0, true)(t, run)
			if d := run.Drain; d == nil || d.Drained {
				t.Errorf("drain %+v, want blocked", d)
			}
		})},
		{name: "pdb-5-drain-max-unavailable", check: firstRun(func(t *testing.T, run results.Run) {
			evictions(1, false)(t, run)
			if d := run.Drain; d == nil || !d.Drained {
				t.Errorf("drain %+v, want drained", d)
			}
		})},
	})
}

// TestRunnerSeed003 runs the seed-003 group quick and checks each pair:
// a drain budget shorter than the requests cuts them at its deadline, and
// one that covers them cuts none; a scale-in's victims that exit on
// SIGTERM cut theirs, and draining ones none; a supervisord program that runs the
// server through a shell without exec loses the stop signal and the
// server dies mid-request, and with exec it drains. The supervisord pair
// needs Debian's supervisord, which .ci/run installs: without it, the
// test runs the drain pair alone, unless CLOSINGTIME_REQUIRE_SUPERVISORD=1.
func TestRunnerSeed003(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	none := firstRun(noneFailed)
	cut := func(cause results.Cause) func(*testing.T, *results.Result) {
		return firstRun(cutInFlight(cause, diagnosis.RoutingRace, diagnosis.ExitWithoutDrain))
	}
	checks := []catalogCheck{
		{name: "seed003-drain-12s", check: cut(diagnosis.DrainDeadline)},
		{name: "seed003-drain-24s", check: none},
		{name: "seed003-scale-in-exit", check: cut(diagnosis.ExitWithoutDrain)},
		{name: "seed003-scale-in-drain", check: none},
	}
	if _, err := exec.LookPath("supervisord"); err == nil || os.Getenv("CLOSINGTIME_REQUIRE_SUPERVISORD") == "1" {
		checks = append(checks,
			catalogCheck{name: "seed003-supervisord-sh", check: cut(diagnosis.SupervisedUnsignalled)},
			catalogCheck{name: "seed003-supervisord-exec", check: none})
	} else {
		t.Log("no supervisord in PATH: the supervisord pair is left out (apt-get install supervisor)")
	}
	checkCatalog(t, checks)
}

// TestRunnerSeed003Proxy runs the seed-003 scenarios with a sidecar proxy
// quick: a proxy signalled with its app outlives it and answers 503 for
// it, and one stopped after the app's drain lets nothing fail; a proxy
// ready before its app answers 503 for it at a scale-out, and one held
// until the app is ready lets nothing fail.
func TestRunnerSeed003Proxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts and scale-outs under load")
	}
	if err := podnet.Check(); err != nil {
		t.Skipf("the proxy reaches its app on the pod's loopback, which needs network namespaces: %v (run as root)", err)
	}
	t.Parallel()
	checkCatalog(t, []catalogCheck{
		// Its new pods are ready through their proxy alone: on a loaded
		// machine their server may still be starting when the first
		// requests come, which is the proxy's readiness before its app's.
		{name: "seed003-proxy-outlives", check: firstRun(proxied(diagnosis.ProxyOutlivedApp, diagnosis.ExitWithoutDrain, diagnosis.ProxyReadyBeforeApp))},
		{name: "seed003-proxy-last", check: firstRun(noneFailed)},
		{name: "seed003-scale-out-early", check: firstRun(proxied(diagnosis.ProxyReadyBeforeApp))},
		{name: "seed003-scale-out-held", check: firstRun(noneFailed)},
	})
}

// TestRunnerGRPC runs the grpc group quick: a gRPC server that stops at
// once cuts the calls in flight on its connections, and its closed port
// refuses the channels that the routing still sends there; the graceful
// library's stop (health NOT_SERVING, a pre-stop delay, GracefulStop)
// lets nothing fail; GracefulStop with a budget shorter than the calls
// cuts them at its deadline. Behind a headless Service, a long-lived
// channel whose old pods all stop before its resolver may look again
// fails its calls until it does; one that follows the endpoints loses
// none. At a scale-out, long-lived channels through
// the ClusterIP stay on the pod they were made to, and the new pods get
// none of their calls; a maximum connection age on the server moves them.
func TestRunnerGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under gRPC load")
	}
	t.Parallel()
	checkCatalog(t, []catalogCheck{
		// A call sent on a long-lived channel's connection just after its
		// pod's exit, before the channel read the connection's end, is a
		// stale connection's.
		{name: "grpc-stop", check: firstRun(causes(false, []results.Cause{diagnosis.ExitWithoutDrain, diagnosis.RoutingRace}, diagnosis.StaleConnection))},
		{name: "grpc-graceful", check: firstRun(noneFailed)},
		{name: "grpc-drain-short", check: firstRun(cutInFlight(diagnosis.DrainDeadline, diagnosis.RoutingRace, diagnosis.ExitWithoutDrain))},
		{name: "grpc-pinned", check: firstRun(pinnedPods(2))},
		{name: "grpc-max-age", check: firstRun(pinnedPods(0))},
		{name: "grpc-headless", check: firstRun(staleResolution)},
		{name: "grpc-headless-watch", check: firstRun(noneFailed)},
	})
}

// TestRunnerHTTP2 runs the HTTP/2 scenarios of the grpc group: a Go
// client's long-lived HTTP/2 connections stay on the pod they were made
// to at a scale-out unless their lifetime is bounded, and follow the
// graceful library's GOAWAY in a rollout without a failure.
func TestRunnerHTTP2(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under HTTP/2 load")
	}
	t.Parallel()
	checkCatalog(t, []catalogCheck{
		{name: "http2-graceful", check: firstRun(noneFailed)},
		{name: "http2-pinned", check: firstRun(pinnedPods(2))},
		{name: "http2-max-lifetime", check: firstRun(pinnedPods(0))},
	})
}

// staleResolution checks that the long-lived channel's calls failed, each
// for its resolver's stale addresses, and the channel per call's none.
func staleResolution(t *testing.T, run results.Run) {
	for _, c := range run.Clients {
		if failed := c.Totals.Failed(); (c.Kind == load.KeepAlive) != (failed > 0) {
			t.Errorf("%s client: %d failed, want failures only of the long-lived channel", c.Kind, failed)
		}
	}
	causes(false, []results.Cause{diagnosis.StaleResolution})(t, run)
}

// pinnedPods returns a check that nothing failed, and that n pods got a
// connections-pinned finding: pods that joined and that the keep-alive
// client's connections never reached.
func pinnedPods(n int) func(*testing.T, results.Run) {
	return func(t *testing.T, run results.Run) {
		noneFailed(t, run)
		var pinned []string
		if run.Diagnosis != nil {
			for _, f := range run.Diagnosis.Findings {
				if f.Kind == "connections-pinned" {
					pinned = append(pinned, f.Pod)
				}
			}
		}
		if len(pinned) != n {
			t.Errorf("pods pinned out %v, want %d of them", pinned, n)
			logOutcome(t, run)
		}
	}
}

// proxied returns a check that requests of the run failed, most of them
// 503s of the pods' proxy, each for cause (or one of also).
func proxied(cause results.Cause, also ...results.Cause) func(*testing.T, results.Run) {
	return func(t *testing.T, run results.Run) {
		if tot := run.Totals; tot.Failed() == 0 || tot.HTTP5xx < tot.Failed()/2 {
			t.Errorf("totals %+v: want failures, most of them the proxy's 5xx", tot)
			logOutcome(t, run)
		}
		causes(false, []results.Cause{cause}, also...)(t, run)
	}
}

// TestRunnerIngress runs the seed-002 and edge-retry scenarios quick, one
// after the other and before the parallel tests (an ingress and its
// clients' connections weigh on a loaded machine): an ingress in front
// of the Service (closingtime proxy --role edge) routes on to pods in
// their termination for its update delay and, without retries, answers
// 502 and 504 for them; a preStop delay longer than that lets nothing
// fail; retries hide from the client what the pods still drop, and the
// ingress's log tells the cause of what they do not.
func TestRunnerIngress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load behind an ingress")
	}
	for _, c := range []catalogCheck{
		{name: "seed002-drain", check: firstRun(proxied(diagnosis.IngressRoutingRace))},
		{name: "seed002-prestop-drain", check: firstRun(noneFailed)},
		{name: "edge-retry-on", check: firstRun(func(t *testing.T, run results.Run) {
			var retried int64
			for _, c := range run.Clients {
				retried += c.ProxyRetried
			}
			// The client sees at most the requests whose retry met a gone
			// pod too, or took longer than its timeout.
			if tot := run.Totals; retried == 0 || tot.Failed() > retried/4 {
				t.Errorf("%d failed, %d retried by the ingress: want retries, and few failures", tot.Failed(), retried)
				logFailures(t, run)
			}
			// What the client still sees, a timeout while the ingress
			// tried gone pods, its log tells.
			causes(false, nil, diagnosis.IngressRoutingRace)(t, run)
		})},
	} {
		checkCatalog(t, []catalogCheck{c})
	}
}

// TestRunnerSeed003Pool runs the seed-003 pool pair quick, apart from the
// rest of the group, whose traffic would starve its keep-alive client: a
// caller's pool that reaps only idle connections keeps its busy ones on a
// scale-in's victims, which serve them on until SIGKILL cuts them, and one
// with a maximum lifetime leaves them in time.
func TestRunnerSeed003Pool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scale-ins under load")
	}
	t.Parallel()
	checkCatalog(t, []catalogCheck{
		// A request that reaches a victim's idle connection as its
		// server.close() closes the idle ones, at SIGTERM, is lost to
		// that race (stale-connection): rare, and real.
		{name: "seed003-pool-idle", check: firstRun(cutInFlight(diagnosis.KilledKeepAliveHostage, diagnosis.StaleConnection))},
		{name: "seed003-pool-lifetime", check: firstRun(noneFailed)},
	})
}
