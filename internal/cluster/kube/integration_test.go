package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// binary is the closingtime command, the pods' program on the local
// cluster.
var binary string

func TestMain(m *testing.M) { os.Exit(controlplanetest.Main(m, &binary)) }

// realCluster returns a Cluster on the shared control plane in a namespace
// of its own, nodes named nodes (created schedulable unless listed in
// cordoned), and a kubelet for them; everything ends with the test.
func realCluster(t *testing.T, nodes []string, cordoned ...string) (*Cluster, kubernetes.Interface) {
	t.Helper()
	cp := controlplanetest.Shared(t)
	rest, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	ctx := context.Background()
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: corev1.NodeSpec{Unschedulable: slices.Contains(cordoned, n)}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Config{Kubeconfig: cp.Kubeconfig, CreateNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	k := &kubelet{t: t, client: client, namespace: c.Namespace(), nodes: nodes, handled: map[string]bool{}}
	done := k.run(kctx)
	t.Cleanup(func() {
		stop()
		<-done
		k.wg.Wait()
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
		for _, n := range nodes {
			client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	return c, client
}

// kubelet plays the node agent for nodes: with no scheduler and no
// kubelet in the control plane, it binds each new pod of namespace to the
// schedulable node with the fewest pods and reports it running, then
// ready; it reports a deleted pod still ready for terminatingReady (the
// time its container takes to stop), then its container's exit and the
// pod unready, then the pod Succeeded, and removes it (a delete with grace 0, as the kubelet does once a pod's
// containers have stopped).
type kubelet struct {
	t         *testing.T
	client    kubernetes.Interface
	namespace string
	nodes     []string
	ips       atomic.Int32
	wg        sync.WaitGroup

	mu      sync.Mutex
	handled map[string]bool // by pod UID and phase of its life
}

// terminatingReady is how long a deleted pod stays ready, so that its
// endpoint is seen serving while terminating.
const terminatingReady = 2500 * time.Millisecond

func (k *kubelet) run(ctx context.Context) <-chan struct{} {
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithNamespace(k.namespace))
	pods := factory.Core().V1().Pods().Informer()
	act := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		step := "start"
		if p.DeletionTimestamp != nil {
			step = "stop"
		} else if p.Spec.NodeName != "" {
			return
		}
		k.mu.Lock()
		first := !k.handled[string(p.UID)+step]
		k.handled[string(p.UID)+step] = true
		k.mu.Unlock()
		if first {
			k.wg.Go(func() {
				var err error
				if step == "start" {
					err = k.start(ctx, p)
				} else {
					err = k.stop(ctx, p)
				}
				if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
					k.t.Errorf("kubelet: %s pod %s: %v", step, p.Name, err)
				}
			})
		}
	}
	pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: act, UpdateFunc: func(_, obj any) { act(obj) }})
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		close(done)
	}()
	return done
}

// start binds pod and reports it running, then ready.
func (k *kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	node, err := k.schedule(ctx)
	if err != nil {
		return err
	}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := k.client.CoreV1().Pods(k.namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind to %s: %w", node, err)
	}
	n := k.ips.Add(1)
	ip := fmt.Sprintf("10.244.%d.%d", n/250, n%250+1)
	now := metav1.Now()
	if err := k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase, s.PodIP, s.PodIPs, s.StartTime = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}, &now
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			ImageID: "closingtime", ContainerID: "test://" + string(pod.UID), Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	}); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // a readiness probe's first success
	return k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		s.ContainerStatuses[0].Ready = true
	})
}

// schedule returns the schedulable node with the fewest pods.
func (k *kubelet) schedule(ctx context.Context) (string, error) {
	pods, err := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	best, bestCount := "", 0
	for _, n := range k.nodes {
		node, err := k.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if node.Spec.Unschedulable {
			continue
		}
		count := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == n {
				count++
			}
		}
		if best == "" || count < bestCount {
			best, bestCount = n, count
		}
	}
	if best == "" {
		return "", errors.New("no schedulable node")
	}
	return best, nil
}

// stop terminates pod as the kubelet would, and removes it.
func (k *kubelet) stop(ctx context.Context, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		return nil // the API server removes a pod no node runs
	}
	time.Sleep(terminatingReady)
	// The container exits; with it the pod is no longer ready.
	if err := k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		for i := range s.ContainerStatuses {
			started := metav1.Now()
			if r := s.ContainerStatuses[i].State.Running; r != nil {
				started = r.StartedAt
			}
			s.ContainerStatuses[i].Ready = false
			s.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: metav1.Now(), ContainerID: s.ContainerStatuses[i].ContainerID}}
		}
	}); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	if err := k.status(ctx, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded }); err != nil {
		return err
	}
	return k.client.CoreV1().Pods(k.namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
		Preconditions: &metav1.Preconditions{UID: &pod.UID}})
}

// status changes the status of pod's latest version with change.
func (k *kubelet) status(ctx context.Context, pod *corev1.Pod, change func(*corev1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.client.CoreV1().Pods(k.namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		change(&p.Status)
		_, err = k.client.CoreV1().Pods(k.namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// workload returns Deployment web of replicas pods that run closingtime
// serve (on the local cluster; on the control plane nothing runs them),
// ready by an HTTP probe, its Service, and its PodDisruptionBudget with
// minAvailable.
func workload(replicas int32, minAvailable intstr.IntOrString) []runtime.Object {
	d := web(replicas)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	spec := &d.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
	spec.Containers[0].Command = []string{binary, "serve", "--listen=$(POD_IP):8080", "--shutdown=exit"}
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}}
	svc := webService()
	svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
	pdb := webBudget()
	pdb.Spec.MinAvailable = &minAvailable
	return []runtime.Object{d, svc, pdb}
}

// restart applies objects to c, waits for the first rollout, restarts
// Deployment web and waits for that rollout, and returns the events from
// the restart on.
func restart(t *testing.T, c cluster.Backend, namespace string, objects []runtime.Object, log *cluster.EventLog) []cluster.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, namespace, "web"); err != nil {
		t.Fatalf("first rollout: %v", err)
	}
	from := len(log.Events())
	if err := c.RolloutRestart(ctx, namespace, "web"); err != nil {
		t.Fatal(err)
	}
	st, err := c.RolloutStatus(ctx, namespace, "web")
	if err != nil {
		t.Fatalf("rollout after the restart: %v", err)
	}
	if st.OldPodsGoneAt.Before(st.CompletedAt) {
		t.Errorf("old pods gone at %v, before the rollout completed at %v", st.OldPodsGoneAt, st.CompletedAt)
	}
	// The last endpoints change follows the last old pod's removal.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if events := log.Events()[from:]; settled(events) {
			return events
		}
	}
	t.Fatalf("the restart's events did not settle within 30 s:\n%s", describe(log.Events()[from:]))
	return nil
}

// settled reports whether the last endpoints of events are all ready and
// every pod deleted from a node has terminated. The two come from separate
// watches, so a real cluster's endpoints may lose an old pod before its
// terminal phase is seen. A pod that no node ran has no terminal phase.
func settled(events []cluster.Event) bool {
	deleted := map[string]bool{}
	for _, e := range events {
		switch e.Kind {
		case cluster.PodTerminating:
			deleted[e.Pod] = true
		case cluster.PodTerminated:
			delete(deleted, e.Pod)
		}
	}
	if len(deleted) > 0 {
		return false
	}
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == cluster.EndpointsPublished {
			eps := events[i].Endpoints.String()
			return eps != "" && !strings.Contains(eps, "=0")
		}
	}
	return false
}

// shape reduces a rollout's events to what both backends must agree on:
// for each pod, the kinds of its events that a real cluster's API shows,
// in order; for each pod address, how its endpoint went; and how each
// ReplicaSet ended. Names and addresses differ between runs, so each list
// is sorted.
func shape(events []cluster.Event) []string {
	observable := []cluster.EventKind{cluster.PodCreated, cluster.PodScheduled, cluster.PodStarted, cluster.ContainerStarted,
		cluster.PodReady, cluster.PodUnready, cluster.PodDeleted, cluster.PodTerminating, cluster.ContainerExited, cluster.PodTerminated}
	pods := map[string][]string{}
	endpoints := map[string][]string{} // by address: its states, then "gone"
	rs := map[string]string{}
	for _, e := range events {
		switch {
		case slices.Contains(observable, e.Kind):
			pods[e.Pod] = append(pods[e.Pod], string(e.Kind))
		case e.Kind == cluster.ReplicaSetScaled:
			rs[e.Object] = e.Fields["to"]
		case e.Kind == cluster.EndpointsPublished:
			now := map[string]string{}
			for _, ep := range e.Endpoints.List {
				ep.Node = "" // the backends' node names differ
				_, now[ep.Address], _ = strings.Cut(ep.String(), "=")
			}
			for ip, h := range endpoints {
				if _, ok := now[ip]; !ok && h[len(h)-1] != "gone" {
					endpoints[ip] = append(h, "gone")
				}
			}
			for ip, state := range now {
				if h := endpoints[ip]; len(h) == 0 || h[len(h)-1] != state {
					endpoints[ip] = append(h, state)
				}
			}
		}
	}
	var out []string
	for _, kinds := range pods {
		out = append(out, "pod: "+strings.Join(kinds, " "))
	}
	for _, h := range endpoints {
		// A new pod's endpoint may first be published not ready or, when
		// the controller syncs once for two changes, ready at once; an old
		// one must be seen serving while terminating before it goes.
		switch {
		case h[len(h)-1] == "1/1/0":
			out = append(out, "endpoint: becomes ready")
		case h[len(h)-1] == "gone" && slices.Contains(h, "0/1/1"):
			out = append(out, "endpoint: serving while terminating, then gone")
		default:
			out = append(out, "endpoint: "+strings.Join(h, " "))
		}
	}
	ends := map[string]int{}
	for _, to := range rs {
		ends[to]++
	}
	for to, n := range ends {
		out = append(out, fmt.Sprintf("replicasets scaled last to %s: %d", to, n))
	}
	sort.Strings(out)
	return out
}

// TestRealClusterTimeline runs one rollout restart on the control plane,
// with the test playing the kubelet, and on the local cluster, and
// compares the timelines that each backend's events make of it.
func TestRealClusterTimeline(t *testing.T) {
	c, client := realCluster(t, []string{"timeline-1", "timeline-2"})
	objects := workload(2, intstr.FromInt32(1))
	real := restart(t, c, c.Namespace(), objects, c.EventLog())

	// A new ReplicaSet took over.
	rss, err := client.AppsV1().ReplicaSets(c.Namespace()).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rss.Items) != 2 {
		t.Fatalf("%d ReplicaSets after the restart, want 2", len(rss.Items))
	}

	lc, err := local.New(local.Config{PodCIDR: netip.MustParsePrefix("127.99.0.0/16"),
		MinPropagationDelay: 50 * time.Millisecond, MaxPropagationDelay: 200 * time.Millisecond,
		Kubelet: local.KubeletConfig{WorkingDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lc.Close(ctx)
	}()
	embedded := restart(t, lc, "default", objects, lc.EventLog())

	if diff := cmp.Diff(shape(embedded), shape(real)); diff != "" {
		t.Errorf("timeline shapes differ (-local +kube):\n%s\nkube events:\n%s", diff, describe(real))
	}
	// The shape has the old pods' and the new pods' sequences.
	want := []string{
		"pod: pod_created pod_scheduled pod_started container_started pod_ready",
		"pod: pod_deleted pod_terminating container_exited pod_unready pod_terminated",
		"endpoint: serving while terminating, then gone",
		"endpoint: becomes ready",
	}
	for _, w := range want {
		if !slices.Contains(shape(real), w) {
			t.Errorf("kube timeline lacks %q; shape:\n%s", w, strings.Join(shape(real), "\n"))
		}
	}
}

func describe(events []cluster.Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s %s %s %s %s %v\n", e.Time.Format("15:04:05.000"), e.Kind, e.Pod, e.Container, e.Object, e.Fields)
	}
	return b.String()
}

// waitBudget waits until the disruption controller has counted healthy
// pods of budget web.
func waitBudget(t *testing.T, client kubernetes.Interface, namespace string, healthy int32) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		b, err := client.PolicyV1().PodDisruptionBudgets(namespace).Get(context.Background(), "web", metav1.GetOptions{})
		if err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == healthy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget web: %+v, %v; want %d healthy pods observed", b.Status, err, healthy)
		}
	}
}

// TestRealClusterEvict evicts a pod that a real PodDisruptionBudget
// protects: the API refuses with 429 and names the budget.
func TestRealClusterEvict(t *testing.T) {
	c, client := realCluster(t, []string{"evict-1", "evict-2"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Apply(ctx, workload(2, intstr.FromInt32(2))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, c.Namespace(), "web"); err != nil {
		t.Fatal(err)
	}
	waitBudget(t, client, c.Namespace(), 2)
	pods, err := client.CoreV1().Pods(c.Namespace()).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods %v, %v; want 2", pods, err)
	}
	victim := pods.Items[0].Name
	err = c.Evict(ctx, c.Namespace(), victim)
	var refused *cluster.EvictionError
	if !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests || refused.Budget != "web" || refused.Pod != victim {
		t.Fatalf("evict %s: %v, want a 429 refusal by budget web", victim, err)
	}
	if p, err := client.CoreV1().Pods(c.Namespace()).Get(ctx, victim, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("pod %s after a refused eviction: %v, %v; want it untouched", victim, p.DeletionTimestamp, err)
	}
	expect(t, c.Events(ctx), cluster.EvictionRefused)
}

// TestRealClusterDrain drains a node with both pods of a Deployment whose
// budget lets one go at a time: the drain cordons the node, one eviction
// is refused until the first pod's replacement is ready on the other node,
// and the drain ends when both are gone.
func TestRealClusterDrain(t *testing.T) {
	c, client := realCluster(t, []string{"drain-1", "drain-2"}, "drain-2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pdb := intstr.FromInt32(1)
	if err := c.Apply(ctx, workload(2, pdb)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, c.Namespace(), "web"); err != nil {
		t.Fatal(err)
	}
	waitBudget(t, client, c.Namespace(), 2)
	if err := c.Cordon(ctx, "drain-2", false); err != nil {
		t.Fatal(err)
	}
	if err := c.Drain(ctx, "drain-1", cluster.DrainOptions{RetryDelay: 200 * time.Millisecond, Timeout: time.Minute}); err != nil {
		t.Fatalf("drain: %v\nevents:\n%s", err, describe(c.EventLog().Events()))
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "drain-1", metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		t.Errorf("drain-1 after the drain: %v, %v; want it cordoned", node.Spec, err)
	}
	pods, _ := client.CoreV1().Pods(c.Namespace()).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if p.Spec.NodeName == "drain-1" {
			t.Errorf("pod %s still on drain-1", p.Name)
		}
	}
	var kinds []cluster.EventKind
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.NodeCordoned || e.Kind == cluster.PodEvicted || e.Kind == cluster.EvictionRefused {
			kinds = append(kinds, e.Kind)
		}
	}
	if len(kinds) == 0 || kinds[0] != cluster.NodeCordoned || !slices.Contains(kinds, cluster.EvictionRefused) ||
		len(only(c.EventLog().Events(), cluster.PodEvicted)) != 2 {
		t.Errorf("drain events %v: want the cordon first, a refusal, and two evictions", kinds)
	}
}

// TestRealClusterNamespace creates a namespace of its own and deletes it
// on Close.
func TestRealClusterNamespace(t *testing.T) {
	cp := controlplanetest.Shared(t)
	c, err := New(Config{Kubeconfig: cp.Kubeconfig, CreateNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	ctx := context.Background()
	name := c.Namespace()
	if !strings.HasPrefix(name, "closingtime-") {
		t.Errorf("namespace %q, want closingtime-XXXXX", name)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace after New: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace %s after Close: not being deleted", name)
	}
}
