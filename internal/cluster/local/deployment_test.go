package local

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestProportionalSizes checks the shares of a scaling event in the middle
// of a rollout against sizes worked out by hand from sync.go scale and
// GetReplicaSetProportion.
func TestProportionalSizes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	rs := func(name string, created time.Duration) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(created))}}
	}
	old, cur := rs("old", 0), rs("new", time.Minute)
	tests := []struct {
		name                           string
		sizes                          []rsSize
		replicas, surge, statusReplica int32
		want                           map[string]int32
	}{
		// 10 replicas, surge 3: old 8 + new 5 = 13, sized for 13.
		// To 20 (surge 3): 23 − 13 = 10 to add; old round(8×23/13) = 14
		// (+6), new round(5×23/13) = 9 (+4).
		{name: "grow", sizes: []rsSize{{rs: old, replicas: 8, maxReplicas: 13}, {rs: cur, replicas: 5, maxReplicas: 13}},
			replicas: 20, surge: 3, want: map[string]int32{"old": 14, "new": 9}},
		// To 5 (surge 3): 8 − 13 = −5; old round(8×8/13) = 5 (−3), new
		// round(5×8/13) = 3 (−2).
		{name: "shrink", sizes: []rsSize{{rs: old, replicas: 8, maxReplicas: 13}, {rs: cur, replicas: 5, maxReplicas: 13}},
			replicas: 5, surge: 3, want: map[string]int32{"old": 5, "new": 3}},
		// Equal sizes growing: the newer one first takes its share, and the
		// rounding leftover goes to the first.
		{name: "equal sizes grow newer first", sizes: []rsSize{{rs: old, replicas: 1, maxReplicas: 2}, {rs: cur, replicas: 1, maxReplicas: 2}},
			replicas: 2, surge: 1, want: map[string]int32{"old": 1, "new": 2}},
		// To zero: every ReplicaSet goes.
		{name: "to zero", sizes: []rsSize{{rs: old, replicas: 2, maxReplicas: 3}, {rs: cur, replicas: 1, maxReplicas: 3}},
			replicas: 0, surge: 1, want: map[string]int32{"old": 0, "new": 0}},
		// No annotation: status.replicas is the base.
		{name: "no annotation", sizes: []rsSize{{rs: old, replicas: 2}, {rs: cur, replicas: 1}},
			replicas: 4, surge: 1, statusReplica: 3, want: map[string]int32{"old": 3, "new": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]int32{}
			var total int32
			for _, s := range proportionalSizes(tt.sizes, tt.replicas, tt.surge, tt.statusReplica) {
				got[s.rs.Name] = s.replicas
				total += s.replicas
			}
			for name, want := range tt.want {
				if got[name] != want {
					t.Errorf("sizes = %v, want %v", got, tt.want)
					break
				}
			}
			if allowed := tt.replicas + tt.surge; tt.replicas > 0 && total != allowed {
				t.Errorf("sizes add up to %d, want replicas + surge = %d", total, allowed)
			}
		})
	}
}

// TestVictims checks each rule of the order in which a ReplicaSet deletes
// its pods (D8): the first of each pair goes first.
func TestVictims(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	// pod is a scheduled, Running, Ready pod on node-1, created and Ready
	// an hour ago, with uid.
	pod := func(uid string, edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec:       corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{
				Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
		}
		edit(p)
		return p
	}
	cost := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.PodDeletionCost: v} }
	}
	readyAgo := func(d time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-d)) }
	}
	createdAgo := func(d time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(now.Add(-d)) }
	}
	tests := []struct {
		name         string
		first, other *corev1.Pod
		related      []*corev1.Pod // beyond first and other
	}{
		{name: "unscheduled first", first: pod("b", func(p *corev1.Pod) { p.Spec.NodeName = "" }), other: pod("a", func(*corev1.Pod) {})},
		{name: "pending first", first: pod("b", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), other: pod("a", func(*corev1.Pod) {})},
		{name: "unknown before running", first: pod("b", func(p *corev1.Pod) { p.Status.Phase = corev1.PodUnknown }), other: pod("a", func(*corev1.Pod) {})},
		{name: "not ready first", first: pod("b", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }), other: pod("a", func(*corev1.Pod) {})},
		{name: "lower deletion cost first", first: pod("b", cost("-5")), other: pod("a", cost("10"))},
		{name: "deletion cost beats readiness time", first: pod("b", func(p *corev1.Pod) { cost("1")(p); readyAgo(time.Hour)(p) }),
			other: pod("a", func(p *corev1.Pod) { cost("2")(p); readyAgo(time.Second)(p) })},
		{name: "invalid deletion cost is zero", first: pod("b", cost("+5")), other: pod("a", cost("1"))},
		{name: "leading zero deletion cost is zero", first: pod("b", cost("007")), other: pod("a", cost("1"))},
		{name: "more related pods on its node first", first: pod("b", func(*corev1.Pod) {}), other: pod("a", func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }),
			related: []*corev1.Pod{pod("c", func(*corev1.Pod) {})}},
		// Were c counted, b would go first; without it the newer a does.
		{name: "terminating related pods do not count", first: pod("a", createdAgo(time.Second)), other: pod("b", func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }),
			related: []*corev1.Pod{pod("c", func(p *corev1.Pod) { p.Spec.NodeName = "node-2"; p.DeletionTimestamp = &metav1.Time{Time: now} })}},
		{name: "ready more recently first", first: pod("b", readyAgo(time.Second)), other: pod("a", readyAgo(time.Hour))},
		// 1.1 s and 1.2 s are both 2^30 ns old: the same bucket, so the
		// UID decides, and the older pod may go first.
		{name: "ready times in one power of two", first: pod("a", readyAgo(1200*time.Millisecond)), other: pod("b", readyAgo(1100*time.Millisecond))},
		{name: "more restarts first, by the most of one container",
			first: pod("b", func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 2}} }),
			other: pod("a", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 1}, {RestartCount: 1}, {RestartCount: 1}}
			})},
		{name: "newer first", first: pod("b", createdAgo(time.Second)), other: pod("a", createdAgo(time.Hour))},
		{name: "creation times in one power of two", first: pod("a", createdAgo(1200*time.Millisecond)), other: pod("b", createdAgo(1100*time.Millisecond))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			related := append([]*corev1.Pod{tt.first, tt.other}, tt.related...)
			for _, order := range [][]*corev1.Pod{{tt.first, tt.other}, {tt.other, tt.first}} {
				if got := victims(order, related, now); got[0] != tt.first {
					t.Errorf("victims(%s, %s) starts with %s, want %s", order[0].Name, order[1].Name, got[0].Name, tt.first.Name)
				}
			}
		})
	}
}

// replicaSetSizes returns the replicas of web's ReplicaSets: of the
// current template, and of the older ones, oldest first.
func replicaSetSizes(c *Cluster) (newSize int32, old []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return replicaSetSizesLocked(c)
}

func replicaSetSizesLocked(c *Cluster) (newSize int32, old []int32) {
	newRS, oldRSs := c.replicaSetsLocked(c.deployments[key("default", "web")].d)
	if newRS != nil {
		newSize = *newRS.Spec.Replicas
	}
	for _, rs := range oldRSs {
		old = append(old, *rs.Spec.Replicas)
	}
	return newSize, old
}

// waitSizes waits until web's new ReplicaSet has newSize replicas and the
// latest old one oldSize, and checks that they stay so for a while.
func waitSizes(t *testing.T, c *Cluster, newSize, oldSize int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	match := func() bool {
		n, old := replicaSetSizesLocked(c)
		return n == newSize && len(old) > 0 && old[len(old)-1] == oldSize
	}
	c.mu.Lock()
	err := c.waitLocked(ctx, match)
	c.mu.Unlock()
	if err != nil {
		n, old := replicaSetSizes(c)
		t.Fatalf("ReplicaSets new %d, old %v; want new %d, latest old %d", n, old, newSize, oldSize)
	}
	time.Sleep(500 * time.Millisecond)
	if n, old := replicaSetSizes(c); n != newSize || old[len(old)-1] != oldSize {
		t.Errorf("ReplicaSets moved on to new %d, old %v; want them to stay at new %d, old %d", n, old, newSize, oldSize)
	}
}

// stuckRollout applies web with replicas and a 1/0 strategy, waits for it,
// then applies a template whose pods never turn Ready, which starts a
// rollout that cannot finish. It returns the cluster and the new Deployment.
func stuckRollout(t *testing.T, replicas int32, progressDeadline int32) (*Cluster, *appsv1.Deployment) {
	t.Helper()
	c := newCluster(t)
	d, svc := webDeployment(replicas, 2, "--shutdown=exit")
	d.Spec.Strategy = rollingUpdate("1", "0")
	d.Spec.ProgressDeadlineSeconds = &progressDeadline
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 1)
	rollout(t, c, []runtime.Object{d, svc}, 0)
	bad := d.DeepCopy()
	bad.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/no-such-path", 1)
	if err := c.Apply(context.Background(), []runtime.Object{bad}); err != nil {
		t.Fatal(err)
	}
	return c, d
}

// TestDeploymentProgressDeadline: a rollout whose new pod never turns Ready
// makes no progress; after progressDeadlineSeconds its Progressing
// condition turns False with ProgressDeadlineExceeded, RolloutStatus fails
// as `kubectl rollout status` does, the old pod keeps serving, and the
// controller goes on reconciling: going back to the old template completes
// (D10).
func TestDeploymentProgressDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a progress deadline")
	}
	t.Parallel()
	const deadline = 2 * time.Second
	start := time.Now()
	c, good := stuckRollout(t, 1, int32(deadline/time.Second))
	applied := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	st, err := c.RolloutStatus(ctx, "default", "web")
	failed := time.Now()
	if err == nil || !strings.Contains(err.Error(), `deployment "web" exceeded its progress deadline`) {
		t.Fatalf("RolloutStatus() = %+v, %v; want the progress deadline error", st, err)
	}
	if st.Complete {
		t.Errorf("RolloutStatus() = %+v, want an incomplete rollout", st)
	}
	// The new ReplicaSet was created at the Apply; the deadline counts
	// from there, and the controller rechecks a second after it.
	if d := failed.Sub(applied); d < deadline {
		t.Errorf("RolloutStatus failed %v after the Apply, before the %v deadline", d, deadline)
	}
	c.mu.Lock()
	cond := deploymentCondition(c.deployments[key("default", "web")].d.Status, appsv1.DeploymentProgressing)
	c.mu.Unlock()
	if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != "ProgressDeadlineExceeded" {
		t.Errorf("Progressing condition %+v, want False, ProgressDeadlineExceeded", cond)
	}
	exceeded := 0
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.ProgressDeadlineExceeded && e.Object == "Deployment/web" && e.Fields["deadline"] == deadline.String() {
			exceeded++
		}
	}
	if exceeded != 1 {
		t.Errorf("%d progress_deadline_exceeded events, want 1; events: %s", exceeded, describe(c.EventLog().Events()))
	}
	// No rollback: both ReplicaSets keep their pods.
	if n, old := replicaSetSizes(c); n != 1 || len(old) != 1 || old[0] != 1 {
		t.Errorf("ReplicaSets new %d, old %v after the deadline; want both at 1", n, old)
	}
	if err := waitServing(ctx, c); err != nil {
		t.Errorf("the old pod stopped serving: %v", err)
	}

	// The old template again: its ReplicaSet is the new one, and the
	// rollout completes.
	if err := c.Apply(ctx, []runtime.Object{good}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatalf("RolloutStatus() after going back = %v; events: %s", err, describe(c.EventLog().Events()))
	}
	t.Logf("deadline reported %v after the Apply (%v in all)", failed.Sub(applied), time.Since(start))
}

// TestDeploymentScaleMidRollout: scaling a Deployment whose rollout is
// stuck resizes both ReplicaSets in proportion, as the deployment
// controller's scale does, instead of giving the change to the new one
// (sync.go scale). With 2 replicas and surge 1 the rollout stops at old 2,
// new 1, sized for 3; scaling to 4 (room for 5) makes old round(2×5/3) = 3
// and new 2; scaling to 1 (room for 2) makes both 1.
func TestDeploymentScaleMidRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c, _ := stuckRollout(t, 2, 600)
	waitSizes(t, c, 1, 2)
	ctx := context.Background()
	if err := c.Scale(ctx, "default", "web", 4); err != nil {
		t.Fatal(err)
	}
	waitSizes(t, c, 2, 3)
	if err := c.Scale(ctx, "default", "web", 1); err != nil {
		t.Fatal(err)
	}
	waitSizes(t, c, 1, 1)
}

// TestDeploymentGeneration: a change of spec raises the generation, which
// the status observes; the same spec again does not.
func TestDeploymentGeneration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(1, 2, "--shutdown=exit")
	rollout(t, c, []runtime.Object{d, svc}, 0)
	generation := func() (int64, int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		dep := c.deployments[key("default", "web")].d
		return dep.Generation, dep.Status.ObservedGeneration
	}
	if g, o := generation(); g != 1 || o != 1 {
		t.Errorf("generation %d, observed %d; want 1 and 1", g, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Apply(ctx, []runtime.Object{d}); err != nil {
		t.Fatal(err)
	}
	if g, _ := generation(); g != 1 {
		t.Errorf("generation %d after applying the same spec, want 1", g)
	}
	if err := c.Scale(ctx, "default", "web", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if g, o := generation(); g != 2 || o != 2 {
		t.Errorf("generation %d, observed %d after Scale; want 2 and 2", g, o)
	}
}
