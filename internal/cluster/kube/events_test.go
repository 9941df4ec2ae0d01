package kube

import (
	"context"
	"errors"
	"io"
	"strings"
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
	// The kubelet's BackOff event is a back_off of its container.
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "a.1", Namespace: "ns"}, Reason: "BackOff", Count: 1,
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "a", FieldPath: "spec.containers{app}"}}
	ev, _ = cs.CoreV1().Events("ns").Create(ctx, ev, metav1.CreateOptions{})
	if e := expect(t, ch, cluster.BackOff); e[0].Pod != "a" || e[0].Container != "app" {
		t.Errorf("back_off %+v, want pod a, container app", e[0])
	}
	ev.Count = 2
	cs.CoreV1().Events("ns").Update(ctx, ev, metav1.UpdateOptions{})
	expect(t, ch, cluster.BackOff)
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
	if e[0].Object != "Service/ns/web" || e[0].Fields["endpoints"] != "10.1.0.5=1/1/0,10.1.0.9=1/1/0" {
		t.Errorf("endpoints %+v, want Service/ns/web with both slices' endpoints", e[0])
	}
	s.Endpoints[0] = endpoint("10.1.0.5", false, true, true)
	slices.Update(ctx, s, metav1.UpdateOptions{})
	if e := expect(t, ch, cluster.EndpointsPublished); e[0].Fields["endpoints"] != "10.1.0.5=0/1/1,10.1.0.9=1/1/0" {
		t.Errorf("terminating endpoint: %s, want 10.1.0.5=0/1/1 first", e[0].Fields["endpoints"])
	}
	// A change of nothing the endpoints show raises no event.
	s.Labels["other"] = "x"
	slices.Update(ctx, s, metav1.UpdateOptions{})
	slices.Delete(ctx, "web-old", metav1.DeleteOptions{})
	if e := expect(t, ch, cluster.EndpointsPublished); e[0].Fields["endpoints"] != "10.1.0.5=0/1/1" {
		t.Errorf("after a slice's deletion: %s, want 10.1.0.5=0/1/1", e[0].Fields["endpoints"])
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
	if !equal(got, want) {
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
