package scenario

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
)

// TestSetupOf: the exits that count are those of the Deployment's own pods
// while they do not terminate; a pod counts as ready until it is unready
// or terminates.
func TestSetupOf(t *testing.T) {
	t.Parallel()
	exit := func(pod, code string) cluster.Event {
		return cluster.Event{Kind: cluster.ContainerExited, Pod: pod, Container: "app", Fields: map[string]string{"code": code}}
	}
	events := []cluster.Event{
		{Kind: cluster.PodCreated, Pod: "app-a1b2c-1", Object: "ReplicaSet/app-a1b2c"},
		{Kind: cluster.PodCreated, Pod: "app-a1b2c-2", Object: "ReplicaSet/app-a1b2c"},
		{Kind: cluster.PodCreated, Pod: "app-a1b2c-3", Object: "ReplicaSet/app-a1b2c"},
		// Another Deployment's, whose name begins with app-.
		{Kind: cluster.PodCreated, Pod: "app-canary-x9z-1", Object: "ReplicaSet/app-canary-x9z"},
		// An init container that completed is a step of the start.
		{Kind: cluster.ContainerExited, Pod: "app-a1b2c-1", Container: "init", Fields: map[string]string{"code": "0", "init": "1/1"}},
		{Kind: cluster.PodReady, Pod: "app-a1b2c-1"},
		{Kind: cluster.PodReady, Pod: "app-a1b2c-2"},
		{Kind: cluster.PodReady, Pod: "app-a1b2c-3"},
		// One that failed runs again after its back-off: the pod's
		// readiness tells whether it ever passes.
		{Kind: cluster.ContainerExited, Pod: "app-a1b2c-2", Container: "init", Fields: map[string]string{"code": "1", "init": "1/1"}},
		exit("app-canary-x9z-1", "1"),
		exit("app-a1b2c-2", "2"),
		{Kind: cluster.PodUnready, Pod: "app-a1b2c-2"},
		// An exit of a pod that terminates is its end, not a crash.
		{Kind: cluster.PodTerminating, Pod: "app-a1b2c-3"},
		exit("app-a1b2c-3", "143"),
		// A failed start counts as an exit does.
		{Kind: cluster.ContainerStartFailed, Pod: "app-a1b2c-1", Container: "app", Fields: map[string]string{"error": `exec: "myapp": executable file not found in $PATH`}},
	}
	exits, failed, ready, known := setupOf(events, "app")
	want := []string{"pod app-a1b2c-2: container app exited with code 2",
		`pod app-a1b2c-1: container app failed to start: exec: "myapp": executable file not found in $PATH`}
	if !cmp.Equal(exits, want) || failed != 1 || ready != 1 || known != 3 {
		t.Errorf("setupOf = %q (%d failed starts), %d ready of %d known; want %q (1 failed start), 1 ready of 3", exits, failed, ready, known, want)
	}
	if exits, _, ready, known := setupOf(events[:8], "app"); len(exits) > 0 || ready != 3 || known != 3 {
		t.Errorf("setupOf before the exits = %q, %d ready of %d known; want none, 3 ready of 3", exits, ready, known)
	}
}

// TestDeployedExisting: the pods of a Deployment that ran before the run
// come without events (the kube backend lists them silently): with none
// seen created, readiness is its first rollout's to vouch for, and the
// check passes at once; an exit of a pod seen created does not.
func TestDeployedExisting(t *testing.T) {
	t.Parallel()
	s := noticeScenario(t, nil, time.Minute)
	d, err := s.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	// A cluster without those pods: no logs to quote.
	c, err := local.New(local.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer c.Close(ctx)
	rec := &cluster.EventLog{}
	record := func(events ...cluster.Event) {
		for _, e := range events {
			rec.Record(e)
		}
	}
	record(cluster.Event{Kind: cluster.PodReady, Pod: "app-a1b2c-1"})
	if err := deployed(ctx, s, c, rec, d); err != nil {
		t.Errorf("deployed with no pod seen created: %v, want nil at once", err)
	}
	// One of its pods replaced since: the others are still the rollout's.
	record(cluster.Event{Kind: cluster.PodCreated, Pod: "app-f00-2", Object: "ReplicaSet/app-f00"},
		cluster.Event{Kind: cluster.PodReady, Pod: "app-f00-2"})
	begin := time.Now()
	if err := deployed(ctx, s, c, rec, d); err != nil || time.Since(begin) > 5*time.Second {
		t.Errorf("deployed with one pod replaced and ready: %v after %v, want nil at once", err, time.Since(begin))
	}
	record(cluster.Event{Kind: cluster.PodCreated, Pod: "app-f00-1", Object: "ReplicaSet/app-f00"},
		cluster.Event{Kind: cluster.ContainerExited, Pod: "app-f00-1", Container: "app", Fields: map[string]string{"code": "1"}})
	var derr *DeployError
	if err := deployed(ctx, s, c, rec, d); !errors.As(err, &derr) || derr.Cause != "pod app-f00-1: container app exited with code 1" {
		t.Errorf("deployed after an exit: %v, want a *DeployError with the exit as its cause", err)
	}
}

// TestRunnerStartFailure runs a Deployment whose command is no file: the
// deploy stops at the first failed start, well before the run's limit,
// with a *DeployError of the deploy that quotes the failure.
func TestRunnerStartFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	t.Parallel()
	s := noticeScenario(t, nil, 30*time.Second)
	d, err := s.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Command = []string{"/no/such/app"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newRunner(t).Run(ctx, s)
	var derr *DeployError
	if res != nil || !errors.As(err, &derr) || derr.Step != "deploy" ||
		!strings.Contains(err.Error(), "failed to start") ||
		!strings.Contains(derr.Cause, "container app failed to start: ") || !strings.Contains(derr.Cause, "/no/such/app") {
		t.Fatalf("Run = %v, %v; want no result and a *DeployError of the deploy that quotes the failed start", res, err)
	}
}

// TestRunnerCrashBeforeAction runs a Deployment whose containers serve,
// their pods ready, the Service answering, and then exit 3 s after their
// start, during the warm-up: the action is not done, and the run returns
// a *DeployError that quotes the exit instead of a result.
func TestRunnerCrashBeforeAction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods that crash")
	}
	t.Parallel()
	s := noticeScenario(t, []string{"serve", "--crash-after", "3s", "--crash-code", "3"}, time.Minute)
	s.WarmUp = 10 * time.Second
	r := newRunner(t)
	var mu sync.Mutex
	var phases []Phase
	r.cfg.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Notice == "" {
			phases = append(phases, p.Phase)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := r.Run(ctx, s)
	mu.Lock()
	defer mu.Unlock()
	var derr *DeployError
	if res != nil || !errors.As(err, &derr) || derr.Step != "deploy" ||
		!strings.Contains(err.Error(), " before the rollout-restart, which was not done") || !strings.Contains(derr.Cause, "container app exited with code 3") {
		t.Fatalf("Run = %v, %v; want no result and a *DeployError of the exit with code 3 before the action", res, err)
	}
	if slices.Contains(phases, PhaseAct) {
		t.Errorf("phases %v: the action was done", phases)
	}
}

// TestOtherExits: an exit of a container of another Deployment of the
// workload, such as the ingress in front of the measured one, is told
// with its Deployment's name; the measured one's are setupOf's.
func TestOtherExits(t *testing.T) {
	t.Parallel()
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Select(all, []string{"seed002-no-fix"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s[0].Deployment()
	if err != nil {
		t.Fatal(err)
	}
	events := []cluster.Event{
		{Kind: cluster.PodCreated, Pod: "app-a1b2c-1", Object: "ReplicaSet/app-a1b2c"},
		{Kind: cluster.PodCreated, Pod: "ingress-x9z8y-1", Object: "ReplicaSet/ingress-x9z8y"},
		{Kind: cluster.ContainerExited, Pod: "app-a1b2c-1", Container: "app", Fields: map[string]string{"code": "1"}},
		{Kind: cluster.ContainerExited, Pod: "ingress-x9z8y-1", Container: "nginx", Fields: map[string]string{"code": "4"}},
	}
	want := []string{"Deployment ingress: pod ingress-x9z8y-1: container nginx exited with code 4"}
	if got := otherExits(events, s[0], d); !cmp.Equal(got, want) {
		t.Errorf("otherExits = %q, want %q", got, want)
	}
}
