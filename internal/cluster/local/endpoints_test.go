package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

func TestEndpointSlices(t *testing.T) {
	t.Parallel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	now := metav1.Now()
	pod := func(name, ip string, conds []corev1.PodCondition, phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := servePod(name, 1)
		p.Labels = map[string]string{"app": "web"}
		p.Status = corev1.PodStatus{PodIP: ip, Phase: phase, Conditions: conds}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	other := pod("other", "127.77.0.9", ready, corev1.PodRunning, false)
	other.Labels = map[string]string{"app": "db"}
	pods := []*corev1.Pod{
		pod("ready", "127.77.0.1", ready, corev1.PodRunning, false),
		pod("unready", "127.77.0.2", nil, corev1.PodRunning, false),
		pod("terminating", "127.77.0.3", ready, corev1.PodRunning, true),
		pod("terminating-unready", "127.77.0.4", nil, corev1.PodRunning, true),
		pod("no-ip", "", ready, corev1.PodPending, false),
		pod("failed", "127.77.0.6", nil, corev1.PodFailed, false),
		other,
	}
	got := cluster.Endpoints{List: cluster.EndpointsOf(EndpointSlices(svc, pods)...)}.String()
	want := "127.77.0.1=1/1/0@node,127.77.0.2=0/0/0@node,127.77.0.3=0/1/1@node,127.77.0.4=0/0/1@node"
	if got != want {
		t.Errorf("EndpointSlices() = %s, want %s", got, want)
	}
	if slices := EndpointSlices(svc, pods); len(slices) != 1 || *slices[0].Ports[0].Port != 8080 {
		t.Errorf("EndpointSlices() ports = %v, want the named port resolved to 8080", slices)
	}
	svc.Spec.PublishNotReadyAddresses = true
	got = cluster.Endpoints{List: cluster.EndpointsOf(EndpointSlices(svc, pods)...)}.String()
	want = "127.77.0.1=1/1/0@node,127.77.0.2=1/0/0@node,127.77.0.3=1/1/1@node,127.77.0.4=1/0/1@node"
	if got != want {
		t.Errorf("EndpointSlices() with publishNotReadyAddresses = %s, want %s", got, want)
	}
}

// miniCluster is the least of an API server that the routing test needs:
// it keeps pods, hands them to the kubelets, and syncs one Service's
// endpoints whenever a pod changes.
type miniCluster struct {
	t         *testing.T
	svc       *corev1.Service
	endpoints *Endpoints
	log       *cluster.EventLog
	kubelets  map[string]*Kubelet

	mu   sync.Mutex
	pods map[string]*corev1.Pod
}

func newMiniCluster(t *testing.T, nodes ...string) *miniCluster {
	m := &miniCluster{t: t, log: &cluster.EventLog{}, kubelets: map[string]*Kubelet{}, pods: map[string]*corev1.Pod{}}
	m.svc = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	var proxies []*Proxy
	for _, node := range nodes {
		p, err := NewProxy(ProxyConfig{NodeName: node, MinPropagationDelay: 100 * time.Millisecond, MaxPropagationDelay: 300 * time.Millisecond, Recorder: m.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
	}
	var err error
	m.endpoints, err = NewEndpoints(EndpointsConfig{Proxies: proxies, Recorder: m.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.endpoints.Close)
	for _, node := range nodes {
		k, _ := newKubelet(t, KubeletConfig{NodeName: node, StatusUpdated: m.statusUpdated, Recorder: m.log})
		m.kubelets[node] = k
	}
	return m
}

func (m *miniCluster) statusUpdated(pod *corev1.Pod) {
	m.mu.Lock()
	stored := m.pods[pod.Name]
	if stored == nil || stored.UID != pod.UID {
		m.mu.Unlock()
		return
	}
	stored.Status = pod.Status
	// A terminal pod that is being deleted is removed (T16).
	if stored.DeletionTimestamp != nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
		delete(m.pods, pod.Name)
	}
	m.mu.Unlock()
	m.syncEndpoints()
}

func (m *miniCluster) syncEndpoints() {
	m.mu.Lock()
	var pods []*corev1.Pod
	for _, p := range m.pods {
		pods = append(pods, p.DeepCopy())
	}
	m.mu.Unlock()
	m.endpoints.Sync(m.svc, pods)
}

// run creates pod on node.
func (m *miniCluster) run(pod *corev1.Pod, node string) {
	pod.Spec.NodeName = node
	pod.Labels = map[string]string{"app": "web"}
	m.mu.Lock()
	m.pods[pod.Name] = pod.DeepCopy()
	m.mu.Unlock()
	if err := m.kubelets[node].SyncPod(pod); err != nil {
		m.t.Fatal(err)
	}
}

// delete deletes pod gracefully.
func (m *miniCluster) delete(name string) {
	m.mu.Lock()
	d := deleting(m.pods[name])
	m.pods[name] = d
	m.mu.Unlock()
	m.syncEndpoints()
	if err := m.kubelets[d.Spec.NodeName].SyncPod(d); err != nil {
		m.t.Fatal(err)
	}
}

// ip returns pod name's address.
func (m *miniCluster) ip(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pods[name].Status.PodIP
}

// waitApplied waits until node's view of the Service has applied endpoints
// for which ok holds, and returns the index after that event.
func (m *miniCluster) waitApplied(from int, node string, ok func(endpoints string) bool) int {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for i := from; ; i++ {
		e, err := m.log.Next(ctx, i)
		if err != nil {
			m.t.Fatalf("node %s never applied the endpoints awaited; events: %s", node, describe(m.log.Events()))
		}
		if e.Kind == cluster.EndpointsApplied && e.Node == node && ok(e.Endpoints.String()) {
			return i + 1
		}
	}
}

// get sends GET /work on conn and returns the serving pod's name.
func get(t *testing.T, conn net.Conn, br *bufio.Reader) string {
	t.Helper()
	conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, "GET /work HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("X-Pod-Name")
}

// dialGet dials the Service through proxy and returns the pod that served
// one request on the new connection.
func dialGet(t *testing.T, p *Proxy) string {
	t.Helper()
	conn, err := p.DialContext(context.Background(), "tcp", "web.default:80")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return get(t, conn, bufio.NewReader(conn))
}

// TestRouting follows two pods on two nodes through their deletion, as
// the client on node-a sees them (E2, E6, E8–E10): new connections
// spread over Ready endpoints; a deleted pod stops getting new connections
// once the change reaches the node, while a connection made before stays
// on it; with every endpoint terminating, serving ones still get
// connections; with none, connections are refused.
func TestRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods through preStop and termination")
	}
	t.Parallel()
	m := newMiniCluster(t, "node-a", "node-b")
	proxy := m.endpoints.cfg.Proxies[0]
	for _, name := range []string{"web-a", "web-b"} {
		pod := servePod(name, 8, "--shutdown=graceful", "--drain-timeout=1s", "--work=10ms")
		pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
		pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 4}}}
		m.run(pod, map[string]string{"web-a": "node-a", "web-b": "node-b"}[name])
	}
	i := m.waitApplied(0, "node-a", func(eps string) bool { return strings.Count(eps, "=1/1/0") == 2 })

	// The Service's listener for clients outside the cluster.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- proxy.Serve(ctx, ln, "web.default:80") }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	})
	outside := func() (string, error) {
		return podVia(func(context.Context, string, string) (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) })
	}
	if pod, err := outside(); err != nil || (pod != "web-a" && pod != "web-b") {
		t.Errorf("request through the Service's listener: pod %q, %v", pod, err)
	}

	seen := map[string]int{}
	for range 30 {
		seen[dialGet(t, proxy)]++
	}
	if seen["web-a"] == 0 || seen["web-b"] == 0 {
		t.Errorf("30 connections went to %v, want both pods; events: %s", seen, describe(m.log.Events()))
	}

	// A keep-alive connection to web-a, made before its deletion.
	var kept net.Conn
	var keptReader *bufio.Reader
	for range 100 {
		conn, err := proxy.DialContext(context.Background(), "tcp", "web.default:80")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		if get(t, conn, br) == "web-a" {
			kept, keptReader = conn, br
			break
		}
		conn.Close()
	}
	if kept == nil {
		t.Fatal("100 connections never reached web-a")
	}
	defer kept.Close()

	ipA := m.ip("web-a")
	m.delete("web-a")
	i = m.waitApplied(i, "node-a", func(eps string) bool { return strings.Contains(eps, ipA+"=0/1/1") })
	for range 20 {
		if pod := dialGet(t, proxy); pod != "web-b" {
			t.Fatalf("a new connection went to %s after web-a's removal reached the node", pod)
		}
	}
	if pod := get(t, kept, keptReader); pod != "web-a" {
		t.Errorf("the established connection was served by %s, want web-a (conntrack)", pod)
	}

	// Both terminating and still serving (their preStop sleeps): the
	// proxy falls back to them.
	ipB := m.ip("web-b")
	m.delete("web-b")
	i = m.waitApplied(i, "node-a", func(eps string) bool { return strings.Contains(eps, ipB+"=0/1/1") })
	if pod := dialGet(t, proxy); pod != "web-a" && pod != "web-b" {
		t.Errorf("fallback connection served by %q", pod)
	}

	m.waitApplied(i, "node-a", func(eps string) bool { return eps == "" })
	_, err = proxy.DialContext(context.Background(), "tcp", "web.default:80")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no endpoints: %v, want connection refused", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("dial error %T is not a *net.OpError", err)
	}
	if _, err := outside(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("request through the listener with no endpoints: %v, want a reset", err)
	}
	if _, err := proxy.DialContext(context.Background(), "tcp", "nothing.default:80"); err == nil {
		t.Error("dial of an unknown Service succeeded")
	}
}

// TestEndpointsDelayAndBatch: the controller publishes a change after its
// sync delay; with a batch period, the changes made within it, from the
// first one, go out once, as the latest (§10, E11).
func TestEndpointsDelayAndBatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	pod := func(ip string, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ip, Namespace: "default", Labels: map[string]string{"app": "web"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	}
	a := []*corev1.Pod{pod("127.77.0.1", false)}
	b := []*corev1.Pod{pod("127.77.0.1", true)}
	c := []*corev1.Pod{pod("127.77.0.1", true), pod("127.77.0.2", true)}
	tests := []struct {
		name         string
		delay, batch time.Duration
		// script: pod changes (a, b, c), clock steps (seconds) and waits
		// for the n-th publication ("=n").
		script []string
		want   []string // the publications: endpoints@seconds after t0
	}{
		{name: "delay", delay: 500 * time.Millisecond,
			script: []string{"a", "0.5", "=1", "0.5", "b", "b", "0.5", "=2", "c", "0.5", "=3"},
			want:   []string{"127.77.0.1=0/0/0@0.5", "127.77.0.1=1/1/0@1.5", "127.77.0.1=1/1/0,127.77.0.2=1/1/0@2"}},
		{name: "delay and batch", delay: 500 * time.Millisecond, batch: time.Second,
			script: []string{"a", "1", "b", "b", "0.5", "=1", "c", "1.5", "=2"},
			want:   []string{"127.77.0.1=1/1/0@1.5", "127.77.0.1=1/1/0,127.77.0.2=1/1/0@3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := clocktesting.NewFakeClock(t0)
			log := &cluster.EventLog{}
			e, err := NewEndpoints(EndpointsConfig{SyncDelay: tt.delay, BatchPeriod: tt.batch, Clock: fc, Recorder: log})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			// A publication is stamped when the queue runs it; the clock
			// stays put until the test has seen it.
			for _, step := range tt.script {
				switch {
				case step == "a" || step == "b" || step == "c":
					e.Sync(svc, map[string][]*corev1.Pod{"a": a, "b": b, "c": c}[step])
				case strings.HasPrefix(step, "="):
					n, _ := strconv.Atoi(step[1:])
					if _, err := log.Next(ctx, n-1); err != nil {
						t.Fatalf("publication %d never came; events: %s", n, describe(log.Events()))
					}
				default:
					// Let the queue set the timer of what it holds first: a
					// step between its reading of the clock and its timer's
					// setting would move that timer late. With nothing
					// held, no timer comes and the step goes after a while.
					for wait := time.Now().Add(time.Second); !fc.HasWaiters() && time.Now().Before(wait); {
						time.Sleep(time.Millisecond)
					}
					d, _ := strconv.ParseFloat(step, 64)
					fc.Step(time.Duration(d * float64(time.Second)))
				}
			}
			var got []string
			for _, ev := range log.Events() {
				got = append(got, fmt.Sprintf("%s@%g", ev.Endpoints, ev.Time.Sub(t0).Seconds()))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("publications %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNamedPort resolves a Service's named target port as Kubernetes'
// FindPort does: an app container's first, then a native sidecar's, never
// an init container's that runs to completion.
func TestNamedPort(t *testing.T) {
	port := func(name string, n int32) []corev1.ContainerPort {
		return []corev1.ContainerPort{{Name: name, ContainerPort: n}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "setup", Ports: port("setup", 7000)},
			{Name: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: slices.Concat(port("proxy", 5000), port("http", 5001))},
		},
		Containers: []corev1.Container{{Name: "app", Ports: port("http", 8080)}, {Name: "other", Ports: port("http", 8081)}},
	}}
	for name, want := range map[string]int32{"http": 8080, "proxy": 5000, "setup": 0, "none": 0} {
		if got := namedPort(pod, name); got != want {
			t.Errorf("namedPort(%q) = %d, want %d", name, got, want)
		}
	}
}
