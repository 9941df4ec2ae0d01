package scenario

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests'
// pods run for image closingtime.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// subnets gives each test cluster a /16 of its own.
var subnets atomic.Int32

// newRunner returns a runner of quick runs on local clusters whose pods
// run binary, working in a temporary directory.
func newRunner(t *testing.T) *Runner {
	t.Helper()
	dir := t.TempDir()
	r, err := NewRunner(RunnerConfig{
		Quick: true,
		NewCluster: func(s ClusterSettings) (Cluster, error) {
			return local.New(local.Config{
				Nodes:               s.Nodes,
				PodCIDR:             netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(30 + subnets.Add(1)%30), 0, 0}), 16),
				MinPropagationDelay: s.PropagationDelay.Min,
				MaxPropagationDelay: s.PropagationDelay.Max,
				Kubelet:             local.KubeletConfig{WorkingDir: dir, ImageCommands: map[string][]string{Image: {binary}}},
			})
		},
		Progress: func(p Progress) { t.Logf("%s %d/%d %s", p.Scenario, p.Repetition, p.Repetitions, p.Phase) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runCatalog runs the catalog's scenarios names quick, at once, each on a
// cluster of its own, and returns their results in the order of names.
func runCatalog(t *testing.T, names ...string) []*Result {
	t.Helper()
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	scenarios, err := Select(all, names)
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := make([]*Result, len(scenarios))
	errs := make([]error, len(scenarios))
	var wg sync.WaitGroup
	for i, s := range scenarios {
		wg.Go(func() { results[i], errs[i] = r.Run(ctx, s) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		if len(results[i].Runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", names[i], len(results[i].Runs))
		}
	}
	return results
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
	tests := []struct {
		name  string
		check func(t *testing.T, res *Result)
	}{
		{name: "1-plain", check: func(t *testing.T, res *Result) {
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
		{name: "3-graceful", check: func(t *testing.T, res *Result) {
			if tot := res.Totals; tot.Failed() != 0 || tot.OK == 0 {
				t.Errorf("totals %+v: want requests and no failure", tot)
			}
			run := res.Runs[0]
			if len(run.OldPods) != 3 {
				t.Fatalf("%d old pods, want 3: %+v", len(run.OldPods), run.OldPods)
			}
			for _, p := range run.OldPods {
				if p.GapMS == nil || *p.GapMS < 1000 || p.AfterSigterm != 0 || p.ExitCode != 143 {
					t.Errorf("old pod %+v: want its last request a second or more before SIGTERM, none after, exit 143", p)
				}
			}
			if run.RolloutMS <= 0 || len(run.Timeline) == 0 {
				t.Errorf("rollout %v ms, %d timeline entries: want both", run.RolloutMS, len(run.Timeline))
			}
		}},
		{name: "C-graceful-keepalive", check: func(t *testing.T, res *Result) {
			hostages := 0
			for _, p := range res.Runs[0].OldPods {
				if p.ExitCode == 137 && p.AfterSigterm > 0 && p.DrainMS >= 9000 {
					hostages++
				}
			}
			if hostages == 0 {
				t.Errorf("old pods %+v: want one that served after SIGTERM until SIGKILL at the 10 s grace period", res.Runs[0].OldPods)
			}
		}},
		{name: "F-closingtime-graceful", check: func(t *testing.T, res *Result) {
			if tot := res.Totals; tot.Failed() != 0 || tot.Absorbed != 0 || tot.OK == 0 {
				t.Errorf("totals %+v: want requests, none failed, none absorbed", tot)
			}
			for _, p := range res.Runs[0].OldPods {
				if p.ExitCode != 143 || p.DrainMS > 8000 {
					t.Errorf("old pod %+v: want exit 143 within 8 s of a 10 s grace period", p)
				}
			}
		}},
	}
	names := make([]string, len(tests))
	for i, tt := range tests {
		names[i] = tt.name
	}
	results := runCatalog(t, names...)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, results[i]) })
	}
}

// TestRunnerActions runs the actions other than a rollout restart: a
// deleted pod and a scale-in each end one old pod, which exits on SIGTERM;
// an eviction that the budget refuses ends none, and the timeline has the
// refusal.
func TestRunnerActions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods under load")
	}
	t.Parallel()
	tests := []struct {
		file        string
		wantOldPods int
		wantKind    string // a cluster event kind the timeline must have
	}{
		{file: "valid-action-delete-pod.yaml", wantOldPods: 1, wantKind: "pod_deleted"},
		{file: "valid-action-scale.yaml", wantOldPods: 1, wantKind: "replicaset_scaled"},
		{file: "valid-action-evict.yaml", wantOldPods: 0, wantKind: "eviction_refused"},
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
			if len(run.OldPods) != tt.wantOldPods {
				t.Fatalf("old pods %+v, want %d", run.OldPods, tt.wantOldPods)
			}
			for _, p := range run.OldPods {
				if p.ExitCode != 143 || p.SigtermMS == nil {
					t.Errorf("old pod %+v: want SIGTERM and exit 143", p)
				}
			}
			found := false
			for _, e := range run.Timeline {
				found = found || (e.Source == "cluster" && e.Kind == tt.wantKind && e.AtMS >= 0)
			}
			if !found {
				t.Errorf("no %s event after the action in the timeline", tt.wantKind)
			}
			if res.Totals.OK == 0 {
				t.Errorf("totals %+v: no request succeeded", res.Totals)
			}
		})
	}
}
