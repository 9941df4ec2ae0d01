package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
)

// expect receives events from ch until it has one of each of want, in
// order, skipping others, and returns them; it fails the test after 10 s
// without one.
func expect(t *testing.T, ch <-chan cluster.Event, want ...cluster.EventKind) []cluster.Event {
	t.Helper()
	var got []cluster.Event
	var seen []string
	for len(got) < len(want) {
		select {
		case e := <-ch:
			seen = append(seen, string(e.Kind))
			if e.Kind == want[len(got)] {
				got = append(got, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got events %v; still waiting for %v", seen, want[len(got):])
		}
	}
	return got
}

// only returns the kinds of events, leaving out those not in keep.
func only(events []cluster.Event, keep ...cluster.EventKind) []cluster.EventKind {
	var out []cluster.EventKind
	for _, e := range events {
		for _, k := range keep {
			if e.Kind == k {
				out = append(out, e.Kind)
			}
		}
	}
	return out
}

func TestPodEvents(t *testing.T) {
	existing := pod("old", "node-1")
	c, cs := newFake(t, existing)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Events(ctx)
	pods := cs.CoreV1().Pods("ns")

	p := pod("a", "")
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: ptr.To(true)}}
	p, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := expect(t, ch, cluster.PodCreated)
	if e[0].Pod != "a" || e[0].Object != "ReplicaSet/web-1" {
		t.Errorf("pod_created %+v, want pod a of ReplicaSet/web-1", e[0])
	}
	p.Spec.NodeName = "node-1"
	p, _ = pods.Update(ctx, p, metav1.UpdateOptions{})
	if e := expect(t, ch, cluster.PodScheduled); e[0].Node != "node-1" {
		t.Errorf("pod_scheduled on %q, want node-1", e[0].Node)
	}
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}}
	p, _ = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	e = expect(t, ch, cluster.PodStarted, cluster.ContainerStarted, cluster.PodReady)
	if e[0].Fields["ip"] != "10.1.0.5" || e[1].Container != "app" || e[1].Fields["restart"] != "0" {
		t.Errorf("start events %+v", e)
	}
	// The API marks the deletion; the pod goes unready, its container
	// exits, the kubelet reports the terminal phase and removes it.
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.Now()), ptr.To[int64](30)
	p, _ = pods.Update(ctx, p, metav1.UpdateOptions{})
	e = expect(t, ch, cluster.PodDeleted, cluster.PodTerminating)
	if e[0].Fields["grace"] != "30s" || e[1].Fields["grace"] != "30s" || e[1].Node != "node-1" {
		t.Errorf("deletion events %+v, want grace 30s on node-1", e)
	}
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	p, _ = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	expect(t, ch, cluster.PodUnready)
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 143, Reason: "Error", ContainerID: "containerd://1", StartedAt: started, FinishedAt: metav1.Now()}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e = expect(t, ch, cluster.ContainerExited, cluster.PodTerminated)
	if e[0].Fields["code"] != "143" || e[0].Fields["reason"] != "Error" || e[1].Fields["phase"] != "Failed" {
		t.Errorf("exit events %+v", e)
	}
	// A pod that no node ran goes at once when deleted.
	pending, _ := pods.Create(ctx, pod("pending", ""), metav1.CreateOptions{})
	expect(t, ch, cluster.PodCreated)
	pods.Delete(ctx, pending.Name, metav1.DeleteOptions{})
	if e := expect(t, ch, cluster.PodDeleted); e[0].Pod != "pending" || e[0].Node != "" || e[0].Fields["grace"] != "0s" {
		t.Errorf("deletion of a pending pod %+v, want pod pending, no node, grace 0s", e[0])
	}
	// A running pod removed at once (grace 0) is deleted, terminating and
	// terminated at its removal: the API shows nothing after.
	pods.Delete(ctx, existing.Name, metav1.DeleteOptions{})
	e = expect(t, ch, cluster.PodDeleted, cluster.PodTerminating, cluster.PodTerminated)
	if e[0].Pod != "old" || e[2].Pod != "old" {
		t.Errorf("removal events %+v, want pod old", e)
	}
	for _, ev := range c.EventLog().Events() {
		if ev.Pod == "old" && ev.Kind == cluster.PodCreated {
			t.Errorf("pod_created for a pod that existed before New: %+v", ev)
		}
	}
}

func TestContainerRestartEvents(t *testing.T) {
	c, cs := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Events(ctx)
	pods := cs.CoreV1().Pods("ns")
	p := pod("a", "node-1")
	t0 := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}}
	p, _ = pods.Create(ctx, p, metav1.CreateOptions{})
	expect(t, ch, cluster.PodCreated, cluster.ContainerStarted)
	// The instance crashed and was restarted between two updates: its end
	// is seen only as the last state of the next.
	t1 := metav1.NewTime(t0.Add(10 * time.Second))
	p.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "app", RestartCount: 1,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", ContainerID: "c1", FinishedAt: t1}},
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}}}
	pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	e := expect(t, ch, cluster.ContainerExited, cluster.ContainerStarted)
	if e[0].Fields["code"] != "1" || e[1].Fields["restart"] != "1" {
		t.Errorf("restart events %+v, want exit code 1 then restart 1", e)
	}
	// The next instance crashes at once; the kubelet waits out its
	// back-off, which the container's waiting state says.
	t2 := metav1.NewTime(t1.Add(time.Second))
	p.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "app", RestartCount: 1,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", ContainerID: "c2", StartedAt: t1, FinishedAt: t2}},
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off 10s restarting failed container=app pod=a_ns(uid-a)"}}}
	pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	e = expect(t, ch, cluster.ContainerExited, cluster.BackOff)
	if d, err := time.ParseDuration(e[1].Fields["delay"]); e[1].Pod != "a" || e[1].Container != "app" || err != nil || d > 10*time.Second || d < 9*time.Second {
		t.Errorf("back_off %+v, want pod a, container app, a delay of nearly 10s", e[1])
	}
}

func slice(name string, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints,
	}
}

func endpoint(ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
}

func TestEndpointEvents(t *testing.T) {
	c, cs := newFake(t, slice("web-old", endpoint("10.1.0.9", true, true, false)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Events(ctx)
	slices := cs.DiscoveryV1().EndpointSlices("ns")
	s, _ := slices.Create(ctx, slice("web-abc", endpoint("10.1.0.5", true, true, false)), metav1.CreateOptions{})
	e := expect(t, ch, cluster.EndpointsPublished)
	if e[0].Object != "Service/ns/web" || e[0].Endpoints.String() != "10.1.0.5=1/1/0,10.1.0.9=1/1/0" {
		t.Errorf("endpoints %+v, want Service/ns/web with both slices' endpoints", e[0])
	}
	s.Endpoints[0] = endpoint("10.1.0.5", false, true, true)
	slices.Update(ctx, s, metav1.UpdateOptions{})
	if e := expect(t, ch, cluster.EndpointsPublished); e[0].Endpoints.String() != "10.1.0.5=0/1/1,10.1.0.9=1/1/0" {
		t.Errorf("terminating endpoint: %s, want 10.1.0.5=0/1/1 first", e[0].Endpoints.String())
	}
	// A change of nothing the endpoints show raises no event.
	s.Labels["other"] = "x"
	slices.Update(ctx, s, metav1.UpdateOptions{})
	slices.Delete(ctx, "web-old", metav1.DeleteOptions{})
	if e := expect(t, ch, cluster.EndpointsPublished); e[0].Endpoints.String() != "10.1.0.5=0/1/1" {
		t.Errorf("after a slice's deletion: %s, want 10.1.0.5=0/1/1", e[0].Endpoints.String())
	}
}

func TestReplicaSetEvents(t *testing.T) {
	c, cs := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Events(ctx)
	rss := cs.AppsV1().ReplicaSets("ns")
	rs, _ := rss.Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
	rs.Spec.Replicas = ptr.To[int32](3)
	rss.Update(ctx, rs, metav1.UpdateOptions{})
	e := expect(t, ch, cluster.ReplicaSetScaled, cluster.ReplicaSetScaled)
	for i, want := range [][2]string{{"0", "1"}, {"1", "3"}} {
		if e[i].Object != "ReplicaSet/web-1" || e[i].Fields["from"] != want[0] || e[i].Fields["to"] != want[1] {
			t.Errorf("event %d: %+v, want ReplicaSet/web-1 from %s to %s", i, e[i], want[0], want[1])
		}
	}
}

func TestLogs(t *testing.T) {
	c, cs := newFake(t)
	ctx := context.Background()
	p := pod("a", "node-1")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 2,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{})
	// The fake API's log of every container is "fake logs".
	var lines []cluster.LogLine
	for deadline := time.Now().Add(10 * time.Second); len(lines) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		lines, _ = c.Logs(ctx, "ns", "a", "app")
	}
	if len(lines) != 1 || lines[0].Text != "fake logs" || lines[0].Restart != 2 {
		t.Fatalf("logs %+v, want the one line of the fake API, restart 2", lines)
	}
	cs.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{})
	expect(t, c.Events(ctx), cluster.PodTerminated)
	if got, err := c.Logs(ctx, "ns", "a", "app"); err != nil || len(got) != 1 {
		t.Errorf("logs after the pod is gone: %v, %v; want them kept", got, err)
	}
	if _, err := c.Logs(ctx, "ns", "a", "other"); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("logs of a container never seen: %v, want ErrNotFound", err)
	}
}

// TestReadLog: readLog keeps the lines read before the log stream broke,
// with no stream name (the API merges stdout and stderr) and the restart
// count, and then a line that says why it ended.
func TestReadLog(t *testing.T) {
	c, _ := newFake(t)
	b := cluster.NewLogBuffer(0)
	c.readLog(b, io.MultiReader(strings.NewReader("one\ntwo\n"), iotest.ErrReader(errors.New("connection reset"))), 4)
	var got []string
	for _, l := range b.Lines() {
		if l.Restart != 4 || l.Stream != "" {
			t.Errorf("line %+v: want restart 4, no stream", l)
		}
		got = append(got, l.Text)
	}
	want := []string{"one", "two", "closingtime: read log: connection reset"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

func TestRolloutStatus(t *testing.T) {
	d := web(1)
	d.Namespace, d.UID, d.Generation = "ns", "dep", 2
	d.Annotations = map[string]string{revisionAnnotation: "2"}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1}
	rs := func(name, rev string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
			Annotations:     map[string]string{revisionAnnotation: rev},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep", Controller: ptr.To(true)}}}}
	}
	podOf := func(name, rs string) *corev1.Pod {
		p := pod(name, "node-1")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(rs), Controller: ptr.To(true)}}
		return p
	}
	c, cs := newFake(t, d, rs("web-1", "1"), rs("web-2", "2"), podOf("old", "web-1"), podOf("new", "web-2"))
	ctx := context.Background()
	done := make(chan error, 1)
	var st cluster.RolloutStatus
	go func() {
		var err error
		st, err = c.RolloutStatus(ctx, "ns", "web")
		done <- err
	}()
	// The controller observes the generation and completes it; the old pod
	// is still there.
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
	cs.AppsV1().Deployments("ns").UpdateStatus(ctx, d, metav1.UpdateOptions{})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		r := c.rollouts["ns/web"]
		complete := r != nil && !r.completedAt.IsZero()
		c.mu.Unlock()
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rollout was never seen complete")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("RolloutStatus returned (%v) while an old pod was left", err)
	default:
	}
	cs.CoreV1().Pods("ns").Delete(ctx, "old", metav1.DeleteOptions{})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RolloutStatus did not return after the old pod was gone")
	}
	if !st.Complete || st.CompletedAt.IsZero() || st.OldPodsGoneAt.Before(st.CompletedAt) {
		t.Errorf("status %+v: want complete, and old pods gone after completion", st)
	}
	if _, err := c.RolloutStatus(ctx, "ns", "missing"); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("status of a missing deployment: %v, want ErrNotFound", err)
	}
	if _, err := c.RolloutStatus(ctx, "elsewhere", "web"); err == nil {
		t.Error("status in a namespace the backend does not observe succeeded")
	}
}

func TestRolloutStatusDeadline(t *testing.T) {
	d := web(2)
	d.Namespace, d.UID, d.Generation = "ns", "dep", 1
	d.Annotations = map[string]string{revisionAnnotation: "2"}
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](30)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: cluster.TimedOutReason, Message: `ReplicaSet "web-2" has timed out progressing.`}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "ns", UID: "rs2",
		Annotations:     map[string]string{revisionAnnotation: "2"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "dep", Controller: ptr.To(true)}}}}
	c, cs := newFake(t, rs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := c.Events(ctx)
	if _, err := cs.AppsV1().Deployments("ns").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := expect(t, ch, cluster.ProgressDeadlineExceeded)
	if e[0].Object != "Deployment/web" || e[0].Fields["deadline"] != "30s" || e[0].Fields["replicaset"] != "web-2" {
		t.Errorf("event %+v, want Deployment/web, deadline 30s, replicaset web-2", e[0])
	}
	_, err := c.RolloutStatus(ctx, "ns", "web")
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "progress deadline") {
		t.Errorf("status past the progress deadline: %v, want an error saying so", err)
	}
}

// statuses builds the container statuses a kubelet reports, one
// instance at a time.
type statuses struct {
	pod   *corev1.Pod
	start time.Time // the first instance's start
}

// running is instance n running, instance n-1 as its last state.
func (s statuses) running(n int32) *corev1.Pod {
	return s.with(corev1.ContainerStatus{Name: "app", RestartCount: n, LastTerminationState: s.last(n - 1),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: s.at(n)}}})
}

// terminated is instance n ended, instance n-1 as its last state.
func (s statuses) terminated(n int32) *corev1.Pod {
	return s.with(corev1.ContainerStatus{Name: "app", RestartCount: n, LastTerminationState: s.last(n - 1),
		State: corev1.ContainerState{Terminated: s.end(n)}})
}

// backingOff is the wait after instance n ended, as the kubelet reports
// it: instance n as the last state, the back-off in the message.
func (s statuses) backingOff(n int32, backOff string) *corev1.Pod {
	return s.with(corev1.ContainerStatus{Name: "app", RestartCount: n, LastTerminationState: s.last(n),
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off " + backOff + " restarting failed container=app pod=a_ns(uid-a)"}}})
}

func (s statuses) with(cs corev1.ContainerStatus) *corev1.Pod {
	p := s.pod.DeepCopy()
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

func (s statuses) at(n int32) metav1.Time {
	return metav1.NewTime(s.start.Add(time.Duration(n) * time.Minute))
}

func (s statuses) end(n int32) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", ContainerID: fmt.Sprintf("c%d", n),
		StartedAt: s.at(n), FinishedAt: metav1.NewTime(s.at(n).Add(time.Second))}
}

func (s statuses) last(n int32) corev1.ContainerState {
	if n < 0 {
		return corev1.ContainerState{}
	}
	return corev1.ContainerState{Terminated: s.end(n)}
}

// describeEvents renders the container events as kind(restart|delay).
func describeEvents(events []cluster.Event) []string {
	var out []string
	for _, e := range events {
		switch e.Kind {
		case cluster.ContainerStarted:
			out = append(out, "started("+e.Fields["restart"]+")")
		case cluster.ContainerExited:
			out = append(out, "exited")
		case cluster.BackOff:
			out = append(out, "back_off("+e.Fields["delay"]+")")
		}
	}
	return out
}

// TestPodEventsCrashLoop feeds podEvents the statuses of a container that
// crashes at start, in the order the kubelet reports them, once each
// (every update seen) and coalesced (updates merged by the watch or the
// kubelet's status manager). Each instance is one container_started with
// its restart count, each ended instance seen is one container_exited,
// and each wait is one back_off whose delay is the back-off less the time
// since the exit was seen.
func TestPodEventsCrashLoop(t *testing.T) {
	s := statuses{pod: pod("a", "node-1"), start: time.Now().Truncate(time.Second)}
	type update struct {
		pod  *corev1.Pod
		seen time.Duration // after the first update
		want []string
	}
	for _, tc := range []struct {
		name     string
		updates  []update
		restarts int // container_started events with a restart count above 0
	}{{
		name:     "every update",
		restarts: 3,
		updates: []update{
			{s.running(0), 0, []string{"started(0)"}},
			{s.terminated(0), time.Second, []string{"exited"}},
			// The first exit restarts at once.
			{s.running(1), time.Second, []string{"started(1)"}},
			{s.terminated(1), 2 * time.Second, []string{"exited"}},
			// The kubelet's next sync says the wait: 10s from the exit,
			// seen 1.5 s after it.
			{s.backingOff(1, "10s"), 3500 * time.Millisecond, []string{"back_off(8.5s)"}},
			// The same wait again at each sync is not a new one.
			{s.backingOff(1, "10s"), 5 * time.Second, nil},
			{s.running(2), 12 * time.Second, []string{"started(2)"}},
			{s.terminated(2), 13 * time.Second, []string{"exited"}},
			{s.backingOff(2, "20s"), 13 * time.Second, []string{"back_off(20s)"}},
			{s.running(3), 33 * time.Second, []string{"started(3)"}},
		},
	}, {
		name:     "coalesced",
		restarts: 5,
		updates: []update{
			// The first instance is seen only ended.
			{s.terminated(0), 0, []string{"started(0)", "exited"}},
			// Instance 1 ran and ended unseen: its start is counted, its
			// exit cannot be told; instance 2 is waiting to restart.
			{s.backingOff(2, "10s"), 11 * time.Second, []string{"started(1)", "started(2)", "exited", "back_off(10s)"}},
			// Instance 3 ran unseen; the next status already shows 4
			// running, with 3 as its last state.
			{s.running(4), 40 * time.Second, []string{"started(3)", "exited", "started(4)"}},
			{s.terminated(4), 41 * time.Second, []string{"exited"}},
			{s.running(5), 122 * time.Second, []string{"started(5)"}},
			// An update of something else shows nothing new.
			{s.running(5), 123 * time.Second, nil},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			prev := &podState{containers: map[string]containerState{}}
			restarts := 0
			for i, u := range tc.updates {
				events, _ := podEvents(prev, u.pod, false, s.start.Add(u.seen))
				got := describeEvents(events)
				if !slices.Equal(got, u.want) {
					t.Errorf("update %d: events %q, want %q", i, got, u.want)
				}
				for _, e := range events {
					if e.Kind == cluster.ContainerStarted && e.Fields["restart"] != "0" {
						restarts++
					}
				}
			}
			if restarts != tc.restarts {
				t.Errorf("%d restarts counted, want %d", restarts, tc.restarts)
			}
		})
	}
}

// TestPodEventsStartError: an instance whose start failed (StartError)
// never ran, so it is no container_started, as in the embedded cluster;
// the next instance is.
func TestPodEventsStartError(t *testing.T) {
	s := statuses{pod: pod("a", "node-1"), start: time.Now()}
	prev := &podState{containers: map[string]containerState{}}
	podEvents(prev, s.running(0), false, s.start)
	failed := s.terminated(1)
	failed.Status.ContainerStatuses[0].State.Terminated.Reason = "StartError"
	failed.Status.ContainerStatuses[0].State.Terminated.ExitCode = 128
	events, _ := podEvents(prev, failed, false, s.start.Add(time.Second))
	if got := describeEvents(events); !slices.Equal(got, []string{"exited", "exited"}) {
		t.Errorf("a failed start: events %q, want the two exits and no start", got)
	}
	events, started := podEvents(prev, s.running(2), false, s.start.Add(2*time.Second))
	if got := describeEvents(events); !slices.Equal(got, []string{"started(2)"}) || !slices.Equal(started, []string{"app"}) {
		t.Errorf("the next instance: events %q, running %q; want started(2) and its log followed", got, started)
	}
}

// TestPodEventsInitContainers: the statuses of init containers and
// sidecars are events too, their starts before the app container's, a
// sidecar's exit after it, and say which they are, as the embedded
// kubelet's do (cluster.ContainerFields).
func TestPodEventsInitContainers(t *testing.T) {
	p := pod("a", "node-1")
	p.Spec.InitContainers = []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	now := metav1.Now()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	prev := &podState{containers: map[string]containerState{}}
	var got []string
	for _, st := range [][3]corev1.ContainerState{
		{running, waiting, waiting},
		{{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}, running, waiting},
		{{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}, running, running},
		// Seen at once, the app's exit and then its sidecar's.
		{{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}},
			{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error", StartedAt: now, FinishedAt: now}},
			{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error", StartedAt: now, FinishedAt: now}}},
	} {
		q := p.DeepCopy()
		q.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", State: st[0]}, {Name: "proxy", State: st[1]}}
		q.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: st[2]}}
		events, _ := podEvents(prev, q, false, now.Time)
		for _, e := range events {
			if e.Container != "" {
				got = append(got, fmt.Sprintf("%s %s init=%s sidecar=%s", e.Kind, e.Container, e.Fields["init"], e.Fields["sidecar"]))
			}
		}
	}
	want := []string{
		"container_started setup init=1/2 sidecar=",
		"container_exited setup init=1/2 sidecar=",
		"container_started proxy init= sidecar=true",
		"container_started app init= sidecar=",
		"container_exited app init= sidecar=",
		"container_exited proxy init= sidecar=true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBackOffDelay reads the back-off from the kubelet's message, as
// k8s.io/kubernetes doBackOff writes it (a Go duration: 5m0s at the
// maximum), and nothing from another message.
func TestBackOffDelay(t *testing.T) {
	for msg, want := range map[string]time.Duration{
		"back-off 10s restarting failed container=app pod=web-1_ns(0b5c)":   10 * time.Second,
		"back-off 2m40s restarting failed container=app pod=web-1_ns(0b5c)": 160 * time.Second,
		"back-off 5m0s restarting failed container=app pod=web-1_ns(0b5c)":  5 * time.Minute,
		"Back-off restarting failed container app in pod web-1_ns(0b5c)":    0,
		"back-off soon": 0,
		"":              0,
	} {
		got, ok := backOffDelay(msg)
		if got != want || ok != (want > 0) {
			t.Errorf("backOffDelay(%q) = %v, %v; want %v", msg, got, ok, want)
		}
	}
}

// TestPodEventsFromKubelet runs a container that crashes at start on
// closingtime's own kubelet (the node agent of `closingtime cluster`), and
// feeds podEvents the statuses that kubelet reports, in order, with the
// times they came: every one, and only the waits (the most coalesced the
// updates can be). Both give the restarts the kubelet recorded, and
// back-offs whose delays are the kubelet's within the noise of the moment
// each status was reported.
func TestPodEventsFromKubelet(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out several back-offs")
	}
	type seen struct {
		pod *corev1.Pod
		at  time.Time
	}
	var mu sync.Mutex
	var reported []seen
	var log cluster.EventLog
	const initial = time.Second
	cidr, claim, err := local.ClaimFreeRange()
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Close()
	k, err := local.NewKubelet(local.KubeletConfig{
		PodCIDR:          cidr,
		WorkingDir:       t.TempDir(),
		CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: initial, Max: 10 * initial},
		Recorder:         &log,
		StatusUpdated: func(p *corev1.Pod) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, seen{p, time.Now()})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := pod("crash", "node")
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	p.Spec.Containers[0] = corev1.Container{Name: "app", Image: "closingtime",
		Command: []string{binary, "serve", "--listen=$(POD_IP):8080", "--crash-code=1", "--crash-after=0"},
		Env:     []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}}
	if err := k.SyncPod(p); err != nil {
		t.Fatal(err)
	}
	// Three waits, of 1, 2 and 4 times initial: until the status reports
	// the third.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(reported)
		var last corev1.ContainerStatus
		if n > 0 && len(reported[n-1].pod.Status.ContainerStatuses) > 0 {
			last = reported[n-1].pod.Status.ContainerStatuses[0]
		}
		mu.Unlock()
		if w := last.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" && last.RestartCount == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no third back-off within a minute; kubelet events: %s", describe(log.Events()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()

	// What the kubelet itself recorded.
	restarts := func(events []cluster.Event) (n int) {
		for _, e := range events {
			if e.Kind == cluster.ContainerStarted && e.Fields["restart"] != "0" {
				n++
			}
		}
		return n
	}
	delays := func(events []cluster.Event) []time.Duration {
		var out []time.Duration
		for _, e := range events {
			if e.Kind == cluster.BackOff {
				d, err := time.ParseDuration(e.Fields["delay"])
				if err != nil {
					t.Fatalf("back_off %+v: %v", e, err)
				}
				out = append(out, d)
			}
		}
		return out
	}
	want, wantDelays := restarts(log.Events()), delays(log.Events())
	if want != 3 || len(wantDelays) != 3 {
		t.Fatalf("the kubelet recorded %d restarts and back-offs %v, want 3 and 3: %s", want, wantDelays, describe(log.Events()))
	}
	// Its waiting state says the whole back-off of each wait, as the
	// kubelet of Kubernetes does.
	var backOffs []time.Duration
	for _, r := range reported {
		if w := r.pod.Status.ContainerStatuses[0].State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			d, ok := backOffDelay(w.Message)
			if !ok {
				t.Fatalf("waiting message %q: no back-off", w.Message)
			}
			if len(backOffs) == 0 || backOffs[len(backOffs)-1] != d {
				backOffs = append(backOffs, d)
			}
		}
	}
	if !slices.Equal(backOffs, []time.Duration{initial, 2 * initial, 4 * initial}) {
		t.Errorf("back-offs in the waiting messages %v, want %v, %v, %v", backOffs, initial, 2*initial, 4*initial)
	}
	for _, tc := range []struct {
		name string
		keep func(corev1.ContainerStatus) bool
	}{
		{"every status", func(corev1.ContainerStatus) bool { return true }},
		{"only the waits", func(s corev1.ContainerStatus) bool {
			return s.State.Waiting != nil && s.State.Waiting.Reason == "CrashLoopBackOff"
		}},
	} {
		prev := &podState{containers: map[string]containerState{}}
		var events []cluster.Event
		for _, r := range reported {
			if len(r.pod.Status.ContainerStatuses) > 0 && tc.keep(r.pod.Status.ContainerStatuses[0]) {
				e, _ := podEvents(prev, r.pod, false, r.at)
				events = append(events, e...)
			}
		}
		if got := restarts(events); got != want {
			t.Errorf("%s: %d restarts, want the kubelet's %d; events %q", tc.name, got, want, describeEvents(events))
		}
		got := delays(events)
		if len(got) != len(wantDelays) {
			t.Errorf("%s: back-offs %v, want the kubelet's %v", tc.name, got, wantDelays)
			continue
		}
		for i := range got {
			// The statuses' times lag the kubelet's by goroutine
			// scheduling; a tolerance of 0.7 initial still tells 1, 2 and
			// 4 times initial apart.
			if d := got[i] - wantDelays[i]; d < -initial*7/10 || d > initial*7/10 {
				t.Errorf("%s: back-off %d of %v, want the kubelet's %v", tc.name, i, got[i], wantDelays[i])
			}
		}
	}
}
