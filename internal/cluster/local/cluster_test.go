package local

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// newCluster starts a two-node cluster on a /16 of its own, with endpoint
// changes reaching the nodes within 0.1 to 0.5 s, and closes it when the
// test ends.
func newCluster(t *testing.T) *Cluster {
	t.Helper()
	return startCluster(t, Config{MinPropagationDelay: 100 * time.Millisecond, MaxPropagationDelay: 500 * time.Millisecond})
}

// startCluster starts a cluster configured by cfg, with a temporary
// working directory, and closes it when the test or benchmark ends.
func startCluster(tb testing.TB, cfg Config) *Cluster {
	tb.Helper()
	cfg.Kubelet.WorkingDir = tb.TempDir()
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			tb.Errorf("close cluster: %v", err)
		}
	})
	return c
}

// webDeployment returns Deployment web of `closingtime serve` pods with
// args, and its Service.
func webDeployment(replicas int32, grace int64, args ...string) (*appsv1.Deployment, *corev1.Service) {
	pod := servePod("", grace, args...)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       pod.Spec,
			},
		},
	}
	d.Spec.Template.Spec.NodeName = ""
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	return d, svc
}

func rollingUpdate(surge, unavailable string) appsv1.DeploymentStrategy {
	s, u := intstr.Parse(surge), intstr.Parse(unavailable)
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &s, MaxUnavailable: &u}}
}

// rollout applies objects, waits for the first rollout, restarts the
// Deployment rollouts times and waits for each. It returns the index of the
// event log where the restarts began.
func rollout(t *testing.T, c *Cluster, objects []runtime.Object, rollouts int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitLimit)
	defer cancel()
	if err := c.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatalf("first rollout: %v; events: %s", err, describe(c.EventLog().Events()))
	}
	start := len(c.EventLog().Events())
	for range rollouts {
		// kubectl's restartedAt has a second's precision; ours does not.
		if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
		st, err := c.RolloutStatus(ctx, "default", "web")
		if err != nil {
			t.Fatalf("rollout: %v; events: %s", err, describe(c.EventLog().Events()[start:]))
		}
		if st.OldPodsGoneAt.Before(st.CompletedAt) {
			t.Errorf("old pods gone at %v, before the rollout completed at %v", st.OldPodsGoneAt, st.CompletedAt)
		}
	}
	return start
}

// readyBounds replays events from index from and returns the least and
// the most pods that were Ready and not terminating at once, after the
// first moment all want were.
func readyBounds(events []cluster.Event, from int) (least, most int) {
	ready := map[string]bool{}
	least, most = 1<<30, 0
	for i, e := range events {
		switch e.Kind {
		case cluster.PodReady:
			ready[e.Pod] = true
		case cluster.PodUnready, cluster.PodDeleted:
			delete(ready, e.Pod)
		default:
			continue
		}
		if i >= from {
			least, most = min(least, len(ready)), max(most, len(ready))
		}
	}
	return least, most
}

// TestClusterRollingUpdateBounds is acceptance item 8: with maxSurge 0 and
// maxUnavailable 1, a 3-replica rollout drops to 2 ready pods; with 1 and
// 0, it never goes below 3 (D2–D5).
func TestClusterRollingUpdateBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts")
	}
	t.Parallel()
	tests := []struct {
		name               string
		surge, unavailable string
		wantLeast          int
		wantMostAtMost     int
	}{
		{name: "surge 0 unavailable 1", surge: "0", unavailable: "1", wantLeast: 2, wantMostAtMost: 3},
		{name: "surge 1 unavailable 0", surge: "1", unavailable: "0", wantLeast: 3, wantMostAtMost: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			d, svc := webDeployment(3, 2, "--shutdown=exit", "--work=10ms")
			d.Spec.Strategy = rollingUpdate(tt.surge, tt.unavailable)
			d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
			start := rollout(t, c, []runtime.Object{d, svc}, 1)
			least, most := readyBounds(c.EventLog().Events(), start)
			if least != tt.wantLeast || most > tt.wantMostAtMost {
				t.Errorf("ready pods during the rollout in [%d, %d], want least %d and most ≤ %d; events: %s",
					least, most, tt.wantLeast, tt.wantMostAtMost, describe(c.EventLog().Events()[start:]))
			}
		})
	}
}

// TestClusterEvictionBudget is acceptance item 7: with one replica and
// minAvailable 1, the eviction API refuses with 429, while DELETE and a
// rollout go through (X3, X5, X7).
func TestClusterEvictionBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(1, 2, "--shutdown=exit")
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
	pdb := budget("web", policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("1"))})
	rollout(t, c, []runtime.Object{d, svc, pdb}, 1)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	pods := activePods(c)
	if len(pods) != 1 {
		t.Fatalf("%d active pods, want 1", len(pods))
	}
	err := c.Evict(ctx, "default", pods[0].Name)
	var refused *cluster.EvictionError
	if !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests || refused.Budget != "web" {
		t.Fatalf("Evict() = %v, want a 429 from budget web", err)
	}
	// Drain retries the refusal until its timeout (X6, X7).
	err = c.Drain(ctx, pods[0].Spec.NodeName, cluster.DrainOptions{Timeout: 300 * time.Millisecond, RetryDelay: 100 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain() = %v, want its timeout", err)
	}
	if err := c.Cordon(ctx, pods[0].Spec.NodeName, false); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePod(ctx, "default", pods[0].Name, nil); err != nil {
		t.Fatalf("DeletePod() = %v, want the DELETE to ignore the budget", err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, pods[0].Name)
	lines, err := c.Logs(ctx, "default", pods[0].Name, "app")
	if err != nil || len(lines) == 0 {
		t.Errorf("Logs() of a deleted pod = %d lines, %v; want its lines", len(lines), err)
	}

	// The stream holds the story from the first event on, in order.
	var kinds []cluster.EventKind
	var last time.Time
	for e := range c.Events(ctx) {
		if e.Time.Before(last) {
			t.Errorf("event %s at %v, before the one ahead of it at %v", e.Kind, e.Time, last)
		}
		last = e.Time
		kinds = append(kinds, e.Kind)
		if e.Kind == cluster.EvictionRefused {
			break
		}
	}
	if len(kinds) == 0 || kinds[0] != cluster.ReplicaSetScaled {
		t.Errorf("events begin with %v, want the first ReplicaSet's scaling", kinds)
	}
}

// waitGone waits until pod name has left the store.
func waitGone(t *testing.T, c *Cluster, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitLocked(ctx, func() bool { return c.pods[key("default", name)] == nil }); err != nil {
		t.Fatalf("pod %s still there: %v", name, err)
	}
}

// activePods returns the pods that are not terminating.
func activePods(c *Cluster) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range c.Pods("default") {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// tally counts the outcomes of requests.
type tally struct {
	mu                 sync.Mutex
	ok, refused, other int
	firstOther         error
	failedAt           []time.Time // when each failed request started
	okAt               []time.Time // when each successful one started
}

// add counts the outcome of a request that started at start.
func (tl *tally) add(start time.Time, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if err != nil {
		tl.failedAt = append(tl.failedAt, start)
	} else {
		tl.okAt = append(tl.okAt, start)
	}
	switch {
	case err == nil:
		tl.ok++
	case errors.Is(err, syscall.ECONNREFUSED):
		tl.refused++
	default:
		tl.other++
		if tl.firstOther == nil {
			tl.firstOther = err
		}
	}
}

// drive sends GET /work through dial on a new connection every interval
// until ctx ends, as a script or a probe would, and counts the outcomes.
func drive(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), interval time.Duration) *tally {
	var tl tally
	var wg sync.WaitGroup
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// One request per tick; the loop ends with ctx.
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-ticker.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				tl.add(start, request(dial))
			}()
		}
	}
	wg.Wait()
	return &tl
}

func request(dial func(context.Context, string, string) (net.Conn, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", "web.default:80")
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /work HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode >= 500 {
		return errors.New(resp.Status)
	}
	return nil
}

// TestClusterRolloutUnderLoad runs rollouts under load through the routing
// dialer. Acceptance item 1: without a readiness probe, new pods count as
// ready before they listen, and requests are refused. Item 3: a readiness
// probe, a preStop sleep and a graceful drain lose nothing over three
// rollouts.
func TestClusterRolloutUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	t.Run("no readiness probe", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		d, svc := webDeployment(3, 2, "--shutdown=exit", "--startup-delay=1s", "--work=20ms")
		d.Spec.Strategy = rollingUpdate("1", "0")
		tl := underLoad(t, c, "node-1", []runtime.Object{d, svc}, 20*time.Millisecond, 1, 2*time.Second)
		if tl.refused == 0 {
			t.Errorf("no refused request during a rollout without a readiness probe")
		}
		// A stretch where every request fails: the old pods are gone and
		// the new ones, counted ready, do not listen yet.
		if !failedStretch(tl, 300*time.Millisecond) {
			t.Errorf("no 300 ms in which every request failed; failures at %v", tl.failedAt)
		}
	})
	t.Run("readiness probe only", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		d, svc := webDeployment(3, 2, "--shutdown=exit", "--startup-delay=1s", "--work=20ms")
		d.Spec.Strategy = rollingUpdate("1", "0")
		d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
		tl := underLoad(t, c, "node-1", []runtime.Object{d, svc}, 10*time.Millisecond, 1, time.Second)
		if len(tl.failedAt) == 0 {
			t.Fatal("no failed request: SIGTERM and the endpoint change should race (docs/kubernetes.md E12)")
		}
		var signals []time.Time
		for _, e := range c.EventLog().Events() {
			if e.Kind == cluster.SignalSent {
				signals = append(signals, e.Time)
			}
		}
		// Each failure starts at most a request's time before an old
		// pod's SIGTERM and at most the propagation delay, with slack,
		// after it.
		for _, f := range tl.failedAt {
			near := false
			for _, s := range signals {
				near = near || (f.After(s.Add(-200*time.Millisecond)) && f.Before(s.Add(1500*time.Millisecond)))
			}
			if !near {
				t.Errorf("a request failed at %v, away from every SIGTERM (%v)", f, signals)
			}
		}
	})
	t.Run("readiness preStop graceful", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		d, svc := webDeployment(3, 10, "--shutdown=graceful", "--drain-timeout=2s", "--work=20ms")
		d.Spec.Strategy = rollingUpdate("1", "0")
		ctr := &d.Spec.Template.Spec.Containers[0]
		ctr.ReadinessProbe = httpProbe("/ready", 3)
		// Four times the longest propagation delay, so that a loaded
		// machine's late timers cannot make it race.
		ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 4}}}
		tl := underLoad(t, c, "node-2", []runtime.Object{d, svc}, 20*time.Millisecond, 3, 0)
		if tl.ok == 0 || tl.refused+tl.other != 0 {
			t.Errorf("ok %d, failed %d (refused %d), want no failure", tl.ok, tl.refused+tl.other, tl.refused)
			logEventsNear(t, c, tl.failedAt)
		}
	})
}

// logEventsNear logs the cluster's events within a second of each of
// times, to tell why requests failed then.
func logEventsNear(t *testing.T, c *Cluster, times []time.Time) {
	t.Helper()
	for _, f := range times {
		t.Logf("failure at %s; events around it:", f.Format("15:04:05.000"))
		for _, e := range c.EventLog().Events() {
			if d := e.Time.Sub(f); d > -time.Second && d < time.Second {
				t.Logf("  %+6dms %s %s %s %s %v", d.Milliseconds(), e.Kind, e.Node, e.Pod, e.Object, e.Fields)
			}
		}
	}
}

// underLoad applies objects and waits for their pods to serve, then drives
// load through node's routing view during rollouts and for after more.
func underLoad(t *testing.T, c *Cluster, node string, objects []runtime.Object, interval time.Duration, rollouts int, after time.Duration) *tally {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	// Let the first pods open their ports and the load's node's view take
	// them in: the load measures the rollouts, not the start.
	dial := c.Dialer(node)
	if err := waitServingThrough(ctx, dial); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(context.Background())
	var tl *tally
	done := make(chan struct{})
	go func() {
		defer close(done)
		tl = drive(lctx, dial, interval)
	}()
	rollout(t, c, objects, rollouts)
	time.Sleep(after)
	stop()
	<-done
	t.Logf("ok %d refused %d other %d (first other: %v)", tl.ok, tl.refused, tl.other, tl.firstOther)
	return tl
}

// waitServing waits until 10 requests in a row through the cluster's
// dialer succeed.
func waitServing(ctx context.Context, c *Cluster) error {
	return waitServingThrough(ctx, c.DialContext)
}

// waitServingThrough waits until 10 requests in a row through dial
// succeed.
func waitServingThrough(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error)) error {
	// One request per round; the loop ends with success or ctx.
	for good := 0; good < 10; {
		if err := request(dial); err != nil {
			good = 0
			select {
			case <-ctx.Done():
				return err
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		good++
	}
	return nil
}

// failedStretch reports whether some span of d holds at least 5 failed
// requests and no successful one.
func failedStretch(tl *tally, d time.Duration) bool {
	for _, from := range tl.failedAt {
		failed := 0
		for _, f := range tl.failedAt {
			if !f.Before(from) && f.Before(from.Add(d)) {
				failed++
			}
		}
		ok := false
		for _, o := range tl.okAt {
			ok = ok || (!o.Before(from) && o.Before(from.Add(d)))
		}
		if failed >= 5 && !ok {
			return true
		}
	}
	return false
}

// TestClusterMinReadySeconds: a new pod counts as available only after it
// has been Ready for minReadySeconds, so each step of a 1/0 rollout waits
// that long before an old pod goes (D6).
func TestClusterMinReadySeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout of several seconds")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(3, 2, "--shutdown=exit")
	d.Spec.Strategy = rollingUpdate("1", "0")
	d.Spec.MinReadySeconds = 1
	start := rollout(t, c, []runtime.Object{d, svc}, 1)
	var restart, completed time.Time
	for _, e := range c.EventLog().Events()[start:] {
		if restart.IsZero() {
			restart = e.Time
		}
		if e.Kind == cluster.PodDeleted {
			completed = e.Time
		}
	}
	// Three old pods, each deleted at least minReadySeconds after its
	// replacement turned Ready.
	if d := completed.Sub(restart); d < 3*time.Second-100*time.Millisecond {
		t.Errorf("the last old pod went %v after the restart, want at least 3 × minReadySeconds", d)
	}
}

// TestClusterRecreateAndScale: Recreate removes every old pod before it
// creates a new one; Scale changes the number of pods.
func TestClusterRecreateAndScale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(3, 2, "--shutdown=exit")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	start := rollout(t, c, []runtime.Object{d, svc}, 1)
	var lastGone, firstCreated time.Time
	for _, e := range c.EventLog().Events()[start:] {
		switch e.Kind {
		case cluster.PodTerminated:
			lastGone = e.Time
		case cluster.PodCreated:
			if firstCreated.IsZero() {
				firstCreated = e.Time
			}
		}
	}
	if firstCreated.Before(lastGone) {
		t.Errorf("a new pod was created at %v, before the last old one was gone at %v", firstCreated, lastGone)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Scale(ctx, "default", "web", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if n := len(activePods(c)); n != 1 {
		t.Errorf("%d active pods after scaling to 1", n)
	}
}

// TestClusterDrain: draining a node under a budget of maxUnavailable 1
// evicts its pods, and their replacements go to the other node (X6).
func TestClusterDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods through eviction")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(2, 2, "--shutdown=exit")
	pdb := budget("web", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))})
	rollout(t, c, []runtime.Object{d, svc, pdb}, 0)
	nodes := map[string]bool{}
	for _, p := range activePods(c) {
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("pods on %v, want them spread over both nodes", nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Drain(ctx, "node-1", cluster.DrainOptions{RetryDelay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	for _, p := range activePods(c) {
		if p.Spec.NodeName != "node-2" {
			t.Errorf("pod %s on %s after draining node-1", p.Name, p.Spec.NodeName)
		}
	}
	evicted := 0
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.PodEvicted && e.Node == "node-1" {
			evicted++
		}
	}
	if evicted != 1 {
		t.Errorf("%d pods evicted from node-1, want 1", evicted)
	}
}
