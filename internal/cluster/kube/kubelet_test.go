package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// kubeletEventOf returns the Event that a kubelet on node-1 posts about
// container of pod in namespace ns ("" for the pod), counted once, stamped
// long ago: the backend times an event by its own clock.
func kubeletEventOf(ns, name, pod, container, reason, message string) *corev1.Event {
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning, Count: 1,
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: metav1.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), LastTimestamp: metav1.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if container != "" {
		e.InvolvedObject.FieldPath = "spec.containers{" + container + "}"
	}
	return e
}

// refused is what the kubelet's HTTP prober says of a port nobody listens
// on.
const refused = `Get "http://10.1.0.5:8081/healthz": dial tcp 10.1.0.5:8081: connect: connection refused`

func TestKubeletEvent(t *testing.T) {
	ev := func(kind cluster.EventKind, container string, fields map[string]string) *cluster.Event {
		return &cluster.Event{Kind: kind, Namespace: "ns", Pod: "web-1", Container: container, Node: "node-1", Fields: fields}
	}
	fromScheduler := kubeletEventOf("ns", "e", "web-1", "", "FailedScheduling", "0/3 nodes are available")
	fromScheduler.Source = corev1.EventSource{Component: "default-scheduler"}
	ofNode := kubeletEventOf("ns", "e", "node-1", "", "Unhealthy", "Readiness probe failed: x")
	ofNode.InvolvedObject.Kind = "Node"
	newRecorder := kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500")
	newRecorder.Source, newRecorder.ReportingController = corev1.EventSource{}, "kubelet"
	for _, tc := range []struct {
		name string
		e    *corev1.Event
		want *cluster.Event
	}{
		{"liveness kill", kubeletEventOf("ns", "e", "web-1", "app", "Killing", "Container app failed liveness probe, will be restarted"),
			ev(cluster.LivenessKill, "app", map[string]string{"probe": "liveness"})},
		{"startup kill", kubeletEventOf("ns", "e", "web-1", "app", "Killing", "Container app failed startup probe, will be restarted"),
			ev(cluster.LivenessKill, "app", map[string]string{"probe": "startup"})},
		{"kill without restart", kubeletEventOf("ns", "e", "web-1", "app", "Killing", "Container app failed liveness probe"),
			ev(cluster.LivenessKill, "app", map[string]string{"probe": "liveness"})},
		{"kill of a sidecar", kubeletEventOf("ns", "e", "web-1", "", "Killing", "Init container proxy failed startup probe"),
			ev(cluster.LivenessKill, "proxy", map[string]string{"probe": "startup"})},
		{"container named as the message", kubeletEventOf("ns", "e", "web-1", "", "Killing", "Container failed liveness probe failed liveness probe, will be restarted"),
			ev(cluster.LivenessKill, "failed liveness probe", map[string]string{"probe": "liveness"})},
		{"stop", kubeletEventOf("ns", "e", "web-1", "app", "Killing", "Stopping container app"), nil},
		{"definition changed", kubeletEventOf("ns", "e", "web-1", "app", "Killing", "Container app definition changed, will be restarted"), nil},
		{"readiness failure", kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "Readiness probe failed: "+refused),
			ev(cluster.ProbeFailed, "app", map[string]string{"probe": "readiness", "output": refused})},
		{"failure without output", kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "Startup probe failed:"),
			ev(cluster.ProbeFailed, "app", map[string]string{"probe": "startup", "output": ""})},
		{"probe error", kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "Liveness probe errored and resulted in unknown state: rpc error: code = DeadlineExceeded"),
			ev(cluster.ProbeFailed, "app", map[string]string{"probe": "liveness", "output": "rpc error: code = DeadlineExceeded"})},
		{"combined", kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "(combined from similar events): Readiness probe failed: HTTP probe failed with statuscode: 503"),
			ev(cluster.ProbeFailed, "app", map[string]string{"probe": "readiness", "output": "HTTP probe failed with statuscode: 503"})},
		{"events.k8s.io recorder", newRecorder,
			&cluster.Event{Kind: cluster.ProbeFailed, Namespace: "ns", Pod: "web-1", Container: "app",
				Fields: map[string]string{"probe": "liveness", "output": "HTTP probe failed with statuscode: 500"}}},
		{"another probe's words", kubeletEventOf("ns", "e", "web-1", "app", "Unhealthy", "Network probe failed: x"), nil},
		{"probe warning", kubeletEventOf("ns", "e", "web-1", "app", "ProbeWarning", "Readiness probe warning: redirect"), nil},
		{"prestop failure", kubeletEventOf("ns", "e", "web-1", "app", "FailedPreStopHook", "PreStopHook failed"),
			ev(cluster.PreStopFinished, "app", map[string]string{"error": "PreStopHook failed"})},
		{"prestop failure with its error", kubeletEventOf("ns", "e", "web-1", "app", "FailedPreStopHook", "PreStopHook failed: exec: exit status 1: no"),
			ev(cluster.PreStopFinished, "app", map[string]string{"error": "exec: exit status 1: no"})},
		{"started", kubeletEventOf("ns", "e", "web-1", "app", "Started", "Started container app"), nil},
		{"pulled", kubeletEventOf("ns", "e", "web-1", "app", "Pulled", `Container image "closingtime:dev" already present on machine`), nil},
		{"back-off", kubeletEventOf("ns", "e", "web-1", "app", "BackOff", "Back-off restarting failed container app in pod web-1_ns"), nil},
		{"another source", fromScheduler, nil},
		{"another object", ofNode, nil},
	} {
		got, ok := kubeletEvent(tc.e)
		switch {
		case tc.want == nil && ok:
			t.Errorf("%s: %+v, want none", tc.name, got)
		case tc.want != nil && !ok:
			t.Errorf("%s: none, want %+v", tc.name, *tc.want)
		case tc.want != nil:
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.name, diff)
			}
		}
	}
}

// kubeletEventStep is a change of the namespace's Events, and the cluster
// events it raises.
type kubeletEventStep struct {
	what   string
	change func(ctx context.Context, events eventClient) error
	want   []cluster.Event // Kind, Pod, Container and Fields
}

// eventClient is the Events of a namespace.
type eventClient interface {
	Create(context.Context, *corev1.Event, metav1.CreateOptions) (*corev1.Event, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.Event, error)
	Update(context.Context, *corev1.Event, metav1.UpdateOptions) (*corev1.Event, error)
}

// loadPodName is the name of the load pod of kubeletEventSteps.
const loadPodName = "closingtime-load-r-0"

// kubeletEventSteps are the changes of the Events of namespace ns, where
// pods web-1 and loadPodName exist and Event "old" (oldKill) existed
// before the backend started: counts that grow, new Events of each
// reason, Events the backend leaves out, and a series. The last step
// raises an event, so that every step before has been seen when it has.
func kubeletEventSteps(ns string) []kubeletEventStep {
	count := func(name string, n int32) func(context.Context, eventClient) error {
		return func(ctx context.Context, events eventClient) error {
			e, err := events.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			e.Count = n
			_, err = events.Update(ctx, e, metav1.UpdateOptions{})
			return err
		}
	}
	create := func(es ...*corev1.Event) func(context.Context, eventClient) error {
		return func(ctx context.Context, events eventClient) error {
			for _, e := range es {
				if _, err := events.Create(ctx, e, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	kill := cluster.Event{Kind: cluster.LivenessKill, Pod: "web-1", Container: "app", Fields: map[string]string{"probe": "liveness"}}
	scheduler := kubeletEventOf(ns, "scheduler", "web-1", "", "Unhealthy", "Readiness probe failed: x")
	scheduler.Source = corev1.EventSource{Component: "default-scheduler"}
	series := kubeletEventOf(ns, "series", "web-1", "app", "Unhealthy", "Startup probe failed: HTTP probe failed with statuscode: 500")
	series.Source, series.Count, series.FirstTimestamp, series.LastTimestamp = corev1.EventSource{}, 0, metav1.Time{}, metav1.Time{}
	series.ReportingController, series.ReportingInstance, series.Action = "kubelet", "node-1", "Probe"
	series.EventTime = metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	startup := cluster.Event{Kind: cluster.ProbeFailed, Pod: "web-1", Container: "app",
		Fields: map[string]string{"probe": "startup", "output": "HTTP probe failed with statuscode: 500"}}
	return []kubeletEventStep{
		{"a repeat of the Event of before", count("old", 2), []cluster.Event{kill}},
		{"two repeats seen at once", count("old", 4), []cluster.Event{kill, kill}},
		{"a failed readiness probe", create(kubeletEventOf(ns, "unready", "web-1", "app", "Unhealthy", "Readiness probe failed: "+refused)),
			[]cluster.Event{{Kind: cluster.ProbeFailed, Pod: "web-1", Container: "app", Fields: map[string]string{"probe": "readiness", "output": refused}}}},
		{"Events left out", create(
			kubeletEventOf(ns, "load", loadPodName, "load", "Unhealthy", "Readiness probe failed: x"),
			scheduler,
			kubeletEventOf(ns, "started", "web-1", "app", "Started", "Started container app"),
			kubeletEventOf(ns, "stopping", "web-1", "app", "Killing", "Stopping container app"),
		), nil},
		{"a series of the events.k8s.io recorder", create(series), []cluster.Event{startup}},
		{"its next occurrence", func(ctx context.Context, events eventClient) error {
			e, err := events.Get(ctx, "series", metav1.GetOptions{})
			if err != nil {
				return err
			}
			e.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 1, 0, time.UTC))}
			_, err = events.Update(ctx, e, metav1.UpdateOptions{})
			return err
		}, []cluster.Event{startup}},
		{"a failed preStop hook", create(kubeletEventOf(ns, "prestop", "web-1", "app", "FailedPreStopHook", "PreStopHook failed")),
			[]cluster.Event{{Kind: cluster.PreStopFinished, Pod: "web-1", Container: "app", Fields: map[string]string{"error": "PreStopHook failed"}}}},
	}
}

// kubeletEventPods are the pods of kubeletEventSteps: web-1 of the
// workload, and a load pod.
func kubeletEventPods(ns string) []*corev1.Pod {
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "closingtime"}}}}
	load := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: loadPodName, Namespace: ns, Labels: map[string]string{LoadLabel: "r"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "load", Image: "closingtime"}}}}
	return []*corev1.Pod{web, load}
}

// oldKill is the Event of a liveness kill that exists before the backend
// starts.
func oldKill(ns string) *corev1.Event {
	e := kubeletEventOf(ns, "old", "web-1", "app", "Killing", "Container app failed liveness probe, will be restarted")
	e.Type = corev1.EventTypeNormal
	return e
}

// runKubeletEventSteps makes each change of kubeletEventSteps through
// client, with clk one second on, and checks that c records the events it
// raises, at that time on c's clock, and no others.
func runKubeletEventSteps(t *testing.T, c *Cluster, client kubernetes.Interface, clk *clocktesting.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Events(ctx)
	events := client.CoreV1().Events(c.Namespace())
	var want []cluster.Event
	for _, step := range kubeletEventSteps(c.Namespace()) {
		clk.Step(time.Second)
		at := clk.Now()
		if err := step.change(ctx, events); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		kinds := make([]cluster.EventKind, len(step.want))
		for i, e := range step.want {
			kinds[i] = e.Kind
		}
		got := expect(t, ch, kinds...)
		for i, e := range got {
			w := step.want[i]
			if e.Pod != w.Pod || e.Container != w.Container || e.Namespace != c.Namespace() || !cmp.Equal(e.Fields, w.Fields) || !e.Time.Equal(at) {
				t.Errorf("%s: %s of pod %s/%s container %q, fields %v at %v; want pod %s container %q, fields %v at %v",
					step.what, e.Kind, e.Namespace, e.Pod, e.Container, e.Fields, e.Time, w.Pod, w.Container, w.Fields, at)
			}
		}
		want = append(want, step.want...)
	}
	kubeletKinds := []cluster.EventKind{cluster.LivenessKill, cluster.ProbeFailed, cluster.PreStopFinished}
	var wantKinds []cluster.EventKind
	for _, e := range want {
		wantKinds = append(wantKinds, e.Kind)
	}
	if got := only(c.EventLog().Events(), kubeletKinds...); !slices.Equal(got, wantKinds) {
		t.Errorf("the kubelet's events %v, want %v: one per occurrence, none of the Event of before, none of those left out", got, wantKinds)
	}
}

// TestKubeletEvents feeds the backend the kubelet's Events on the fake
// clientset. The fake does not apply field selectors, so the backend's own
// filter is what leaves out the scheduler's Event.
func TestKubeletEvents(t *testing.T) {
	pods := kubeletEventPods("ns")
	cs := fake.NewClientset(pods[0], pods[1], oldKill("ns"))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	c, err := New(Config{Client: cs, Namespace: "ns", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	runKubeletEventSteps(t, c, cs, clk)
}

// testNamespace creates a namespace of the shared control plane for the
// test, deleted after it, and waits for its default service account,
// without which the API refuses pods.
func testNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	// The service account controller makes it within moments.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return ns.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default service account in %s after 30 s: %v", ns.Name, err)
		}
	}
}

// TestRealClusterKubeletEvents posts the kubelet's Events with the client
// of a real API server, which selects them by field for the backend's
// informer: the same steps, the same cluster events, as on the fake.
func TestRealClusterKubeletEvents(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := testNamespace(t, client, "kubelet-events")
	ctx := context.Background()
	for _, p := range kubeletEventPods(ns) {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.CoreV1().Events(ns).Create(ctx, oldKill(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	c, err := New(Config{Client: client, Namespace: ns, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	runKubeletEventSteps(t, c, client, clk)
}

// TestRealClusterKubeletEventsFromNodeAgent runs a pod whose liveness
// probe and preStop hook fail on closingtime's own kubelet (the node agent
// of `closingtime cluster`) on a real API server: the backend, which sees
// only the API, records the probe failures, liveness kills and failed
// hooks that the kubelet recorded, in the kubelet's order, each once, with
// the same container, probe, output and error.
func TestRealClusterKubeletEventsFromNodeAgent(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := testNamespace(t, client, "kubelet-agent")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cidr, claim, err := local.ClaimFreeRange()
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Close()
	var kubeletLog cluster.EventLog
	node := ns + "-node"
	agent, err := nodeagent.Start(ctx, nodeagent.Config{Client: client, NodeName: node, Recorder: &kubeletLog,
		Kubelet: local.KubeletConfig{PodCIDR: podnet.NodePodCIDR(cidr, 1), WorkingDir: t.TempDir(),
			CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: 100 * time.Millisecond, Max: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := agent.Close(ctx); err != nil {
			t.Errorf("close the node agent: %v", err)
		}
		client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
		client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), node, metav1.DeleteOptions{})
	}()
	c, err := New(Config{Client: client, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	// Nothing listens on 8081: the liveness probe fails at its first run
	// and kills the container, whose preStop hook fails as well.
	nowhere := &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8081)}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](2),
		Containers: []corev1.Container{{Name: "app", Image: "closingtime", Command: []string{binary, "serve", "--listen=$(POD_IP):8080"},
			Env:           []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: nowhere}, PeriodSeconds: 1, FailureThreshold: 1},
			Lifecycle:     &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: nowhere}},
		}},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// told lists, in order, the events of pod web that the kubelet posts
	// an Event for and the backend reads, as the backend records them: a
	// preStop hook's end only when it failed, a probe failure without its
	// target and failures in a row.
	told := func(events []cluster.Event) []string {
		var out []string
		for _, e := range events {
			switch {
			case e.Pod != "web":
			case e.Kind == cluster.LivenessKill:
				out = append(out, fmt.Sprintf("%s %s %s", e.Kind, e.Container, e.Fields["probe"]))
			case e.Kind == cluster.ProbeFailed:
				out = append(out, fmt.Sprintf("%s %s %s: %s", e.Kind, e.Container, e.Fields["probe"], e.Fields["output"]))
			case e.Kind == cluster.PreStopFinished && e.Fields["error"] != "":
				out = append(out, fmt.Sprintf("%s %s: %s", e.Kind, e.Container, e.Fields["error"]))
			}
		}
		return out
	}
	// Two kills: the second repeats the Events of the first, which the
	// kubelet's recorder counts into them.
	events := c.Events(ctx)
	expect(t, events, cluster.ProbeFailed, cluster.LivenessKill, cluster.PreStopFinished,
		cluster.ProbeFailed, cluster.LivenessKill, cluster.PreStopFinished)
	// The kubelet records each before it posts its Event: what it
	// recorded, read after, holds all that the backend saw.
	got, want := told(c.EventLog().Events()), told(kubeletLog.Events())
	if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
		t.Errorf("the backend's events:\n  %s\nwant the start of the kubelet's:\n  %s\nthe backend's log:\n%s",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "), describe(c.EventLog().Events()))
	}
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.ProbeFailed && e.Fields["failures"] != "" {
			t.Errorf("%s with failures %s: the Event does not tell the failed runs in a row", e.Kind, e.Fields["failures"])
		}
	}
}
