package local

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestProxyPropagation drives a proxy's propagation delay with a fake
// clock: a change is invisible until its delay has passed, then new
// connections follow it.
func TestProxyPropagation(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	p, fc, log := newFakeProxy(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}}}}
	slice := func(ready bool) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{{
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)}}},
		}}
	}
	dial := func() error {
		conn, err := p.DialContext(context.Background(), "tcp", "web.default.svc:"+strconv.Itoa(80))
		if err == nil {
			conn.Close()
		}
		return err
	}
	// step advances the clock once the proxy waits on it, and waits for
	// the n-th EndpointsApplied event when want is true.
	step := func(d time.Duration, n int, want bool) {
		t.Helper()
		deadline := time.Now().Add(waitLimit)
		for !fc.HasWaiters() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		fc.Step(d)
		if !want {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := log.Next(ctx, n-1); err != nil {
			t.Fatalf("change %d never applied", n)
		}
	}

	p.Publish(svc, slice(true))
	step(999*time.Millisecond, 1, false)
	var dnsErr *net.DNSError
	if err := dial(); !errors.As(err, &dnsErr) {
		t.Errorf("dial before the Service reached the view: %v, want a lookup failure", err)
	}
	step(time.Millisecond, 1, true)
	if err := dial(); err != nil {
		t.Errorf("dial once the change applied: %v", err)
	}

	p.Publish(svc, slice(false))
	step(500*time.Millisecond, 2, false)
	if err := dial(); err != nil {
		t.Errorf("dial before the removal reached the view: %v", err)
	}
	step(500*time.Millisecond, 2, true)
	if err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no usable endpoint: %v, want connection refused", err)
	}
}

// TestProxyLoadRemove: Load sets a Service's view at once, Remove takes it
// out after the propagation delay, and a proxy with no delay applies a
// change without the clock moving (zero means zero, not a default).
func TestProxyLoadRemove(t *testing.T) {
	t.Parallel()
	backends := newBackends(t, 1, "node")
	svc := webService()
	ready := func(int) (bool, bool, bool) { return true, true, false }
	dial := func(p *Proxy) error {
		conn, err := p.DialContext(context.Background(), "tcp", "web.default:80")
		if err == nil {
			conn.Close()
		}
		return err
	}

	p, fc, log := newFakeProxy(t)
	p.Load(svc, slicesOf(backends, ready))
	if err := dial(p); err != nil {
		t.Fatalf("dial after Load: %v", err)
	}
	if events := log.Events(); len(events) != 1 || events[0].Kind != cluster.EndpointsApplied {
		t.Errorf("events after Load: %v, want one EndpointsApplied", events)
	}
	p.Remove("default", "web")
	deadline := time.Now().Add(waitLimit)
	for !fc.HasWaiters() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := dial(p); err != nil {
		t.Errorf("dial before the removal's delay: %v", err)
	}
	fc.Step(time.Second)
	var dnsErr *net.DNSError
	// One dial per round, until the queue has applied the removal.
	for err := dial(p); !errors.As(err, &dnsErr); err = dial(p) {
		if time.Now().After(deadline) {
			t.Fatalf("dial after the removal: %v, want a lookup failure", err)
		}
		time.Sleep(time.Millisecond)
	}

	zc := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	zlog := &cluster.EventLog{}
	zero, err := NewProxy(ProxyConfig{Clock: zc, Recorder: zlog})
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	zero.Publish(svc, slicesOf(backends, ready))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if e, err := zlog.Next(ctx, 0); err != nil || !e.Time.Equal(zc.Now()) {
		t.Fatalf("zero-delay proxy: event %v, %v; want one stamped %v, with the clock never moved", e, err, zc.Now())
	}
	if err := dial(zero); err != nil {
		t.Errorf("dial through the zero-delay proxy: %v", err)
	}
}

// backend is a listener standing for a pod's port: its port tells it
// apart.
type backend struct {
	ip   string
	port int32
	node string
}

// newBackends listens on n ports of 127.0.0.1 for the test, as pods on the
// nodes given in turn; each writes its port on every connection it
// accepts, and closes it.
func newBackends(t *testing.T, n int, nodes ...string) []*backend {
	t.Helper()
	var out []*backend
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			// One connection per round; the loop ends with the listener.
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(conn, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
				conn.Close()
			}
		}()
		addr := ln.Addr().(*net.TCPAddr)
		out = append(out, &backend{ip: addr.IP.String(), port: int32(addr.Port), node: nodes[i%len(nodes)]})
	}
	return out
}

// slicesOf returns EndpointSlices of the backends, one slice each since
// their ports differ, with cond giving each one's conditions.
func slicesOf(backends []*backend, cond func(i int) (ready, serving, terminating bool)) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for i, b := range backends {
		r, s, term := cond(i)
		out = append(out, &discoveryv1.EndpointSlice{
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(b.port)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{b.ip}, NodeName: ptr.To(b.node),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r), Serving: ptr.To(s), Terminating: ptr.To(term)}}},
		})
	}
	return out
}

// publishNow publishes slices to p, whose delay is 1 ms, and waits until
// they are applied.
func publishNow(t *testing.T, p *Proxy, log *cluster.EventLog, svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	t.Helper()
	n := 0
	for _, e := range log.Events() {
		if e.Kind == cluster.EndpointsApplied && e.Node == p.cfg.NodeName {
			n++
		}
	}
	p.Publish(svc, slices)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// One event per round; the loop ends when the change applied.
	for i := 0; ; i++ {
		e, err := log.Next(ctx, i)
		if err != nil {
			t.Fatalf("node %s never applied the change", p.cfg.NodeName)
		}
		if e.Kind == cluster.EndpointsApplied && e.Node == p.cfg.NodeName {
			if n--; n < 0 {
				return
			}
		}
	}
}

// targets dials the Service through p n times from client and counts the
// backends that the connections reached, by port.
func targets(t *testing.T, p *Proxy, client string, n int) map[int32]int {
	t.Helper()
	seen := map[int32]int{}
	for range n {
		conn, err := p.dial(context.Background(), "tcp", "web.default:80", client, false)
		if err != nil {
			t.Fatalf("dial from %s: %v", client, err)
		}
		seen[int32(conn.RemoteAddr().(*net.TCPAddr).Port)]++
		conn.Close()
	}
	return seen
}

func webService() *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
}

// newFakeProxy returns a proxy of node "node" whose changes arrive a
// second after Publish on the fake clock it returns, recording into the
// log it returns; it is closed when the test ends.
func newFakeProxy(t *testing.T) (*Proxy, *clocktesting.FakeClock, *cluster.EventLog) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	log := &cluster.EventLog{}
	p, err := NewProxy(ProxyConfig{MinPropagationDelay: time.Second, MaxPropagationDelay: time.Second, Clock: fc, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, fc, log
}

// TestProxyInternalTrafficPolicyLocal: with internalTrafficPolicy Local, a
// node's connections go to its own Ready endpoints, else its own serving
// terminating ones; with usable endpoints on other nodes only, the DROP
// rule makes a connect time out; with none anywhere, it is refused
// (E6, E8).
func TestProxyInternalTrafficPolicyLocal(t *testing.T) {
	t.Parallel()
	log := &cluster.EventLog{}
	proxies := map[string]*Proxy{}
	for _, node := range []string{"node-a", "node-b"} {
		p, err := NewProxy(ProxyConfig{NodeName: node, MinPropagationDelay: time.Millisecond, MaxPropagationDelay: time.Millisecond, Recorder: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[node] = p
	}
	backends := newBackends(t, 4, "node-a", "node-b") // 0, 2 on node-a; 1, 3 on node-b
	svc := webService()
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	publish := func(cond func(i int) (bool, bool, bool)) {
		for _, p := range proxies {
			publishNow(t, p, log, svc, slicesOf(backends, cond))
		}
	}
	ready := func(i int) (bool, bool, bool) { return true, true, false }
	publish(ready)
	for node, want := range map[string][]int{"node-a": {0, 2}, "node-b": {1, 3}} {
		seen := targets(t, proxies[node], nodeClient, 40)
		if len(seen) != 2 || seen[backends[want[0]].port] == 0 || seen[backends[want[1]].port] == 0 {
			t.Errorf("%s's connections reached ports %v, want both of its own endpoints (%d, %d)", node, seen, backends[want[0]].port, backends[want[1]].port)
		}
	}

	// node-a: 0 serving and terminating, 2 not serving; node-b: ready.
	// node-a keeps to its own serving terminating endpoint.
	publish(func(i int) (bool, bool, bool) {
		switch i {
		case 0:
			return false, true, true
		case 2:
			return false, false, true
		}
		return true, true, false
	})
	if seen := targets(t, proxies["node-a"], nodeClient, 20); len(seen) != 1 || seen[backends[0].port] != 20 {
		t.Errorf("node-a's connections reached ports %v, want its serving terminating endpoint %d only", seen, backends[0].port)
	}

	// Nothing usable on node-a, node-b's still ready: DROP.
	publish(func(i int) (bool, bool, bool) {
		if i%2 == 0 {
			return false, false, true
		}
		return true, true, false
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := proxies["node-a"].DialContext(ctx, "tcp", "web.default:80")
	var opErr *net.OpError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &opErr) || !opErr.Timeout() {
		t.Errorf("dial with no local endpoint: %v, want a connect timeout", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("dial with no local endpoint gave up after %v, before its context's deadline", waited)
	}
	if seen := targets(t, proxies["node-b"], nodeClient, 10); seen[backends[1].port]+seen[backends[3].port] != 10 {
		t.Errorf("node-b's connections reached ports %v, want its own endpoints", seen)
	}

	// Nothing usable anywhere: REJECT.
	publish(func(i int) (bool, bool, bool) { return false, false, i%2 == 0 })
	if _, err := proxies["node-a"].DialContext(context.Background(), "tcp", "web.default:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no usable endpoint anywhere: %v, want connection refused", err)
	}
}

// TestProxySessionAffinity: with sessionAffinity ClientIP, a client's new
// connections go to the endpoint it used last while that one is usable
// and the client came back within the timeout; other clients choose for
// themselves (E9).
func TestProxySessionAffinity(t *testing.T) {
	t.Parallel()
	p, fc, log := newFakeProxy(t)
	backends := newBackends(t, 3, "node")
	svc := webService()
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	applied := 0
	publish := func(svc *corev1.Service, cond func(i int) (bool, bool, bool)) {
		t.Helper()
		// The change is due a second from now, whenever the proxy
		// looks at the clock.
		p.Publish(svc, slicesOf(backends, cond))
		fc.Step(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := log.Next(ctx, applied); err != nil {
			t.Fatal("change never applied")
		}
		applied++
	}
	ready := func(i int) (bool, bool, bool) { return true, true, false }
	publish(svc, ready)
	pinned := func(client string) int32 {
		t.Helper()
		seen := targets(t, p, client, 20)
		if len(seen) != 1 {
			t.Fatalf("client %s's connections reached ports %v, want one endpoint", client, seen)
		}
		for port := range seen {
			return port
		}
		return 0
	}
	first := pinned(nodeClient)
	// Every client stays where it went first; with 20 clients, not all go
	// to the same endpoint.
	chosen := map[int32]bool{}
	for i := range 20 {
		chosen[pinned("127.0.9."+strconv.Itoa(i))] = true
	}
	if len(chosen) < 2 {
		t.Errorf("20 clients all pinned to %v, want a random first choice each", chosen)
	}
	// Coming back within the default timeout (3 h) keeps the endpoint.
	fc.Step(cluster.DefaultSessionAffinityTimeout - time.Second)
	if got := pinned(nodeClient); got != first {
		t.Errorf("after %v the client went to %d, want still %d", cluster.DefaultSessionAffinityTimeout-time.Second, got, first)
	}

	// The pinned endpoint stops being ready: the client moves, and stays.
	publish(svc, func(i int) (bool, bool, bool) { return backends[i].port != first, backends[i].port != first, false })
	moved := pinned(nodeClient)
	if moved == first {
		t.Errorf("the client still went to %d once it was not ready", first)
	}

	// A timeout of 10 s: each connection restarts it; a client that
	// stays away longer chooses again.
	svc = svc.DeepCopy()
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(10))}}
	publish(svc, ready)
	kept := pinned(nodeClient)
	for range 5 {
		fc.Step(9 * time.Second)
		if got := pinned(nodeClient); got != kept {
			t.Fatalf("a client back within the timeout went to %d, want %d", got, kept)
		}
	}
	after := map[int32]bool{}
	for range 20 {
		fc.Step(11 * time.Second)
		after[pinned(nodeClient)] = true
	}
	if len(after) < 2 {
		t.Errorf("a client back after the timeout 20 times went to %v only, want a new choice each time", after)
	}
}

// TestProxyViewsDiffer: two nodes whose propagation delays differ get the
// same change; until the slower one applies it, the two nodes route the
// Service differently (E11).
func TestProxyViewsDiffer(t *testing.T) {
	t.Parallel()
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	log := &cluster.EventLog{}
	fast, err := NewProxy(ProxyConfig{NodeName: "node-a", MinPropagationDelay: time.Second, MaxPropagationDelay: time.Second, Clock: fc, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := NewProxy(ProxyConfig{NodeName: "node-b", MinPropagationDelay: 3 * time.Second, MaxPropagationDelay: 3 * time.Second, Clock: fc, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	backends := newBackends(t, 1, "node-a")
	svc := webService()
	// As the endpoints controller publishes a change: to every node.
	for _, p := range []*Proxy{fast, slow} {
		p.Publish(svc, slicesOf(backends, func(int) (bool, bool, bool) { return true, true, false }))
	}
	// waitEvents waits until the log holds n events.
	waitEvents := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := log.Next(ctx, n-1); err != nil {
			t.Fatalf("event %d never came; events: %s", n, describe(log.Events()))
		}
	}
	dial := func(p *Proxy) error {
		conn, err := p.DialContext(context.Background(), "tcp", "web.default:80")
		if err == nil {
			conn.Close()
		}
		return err
	}
	fc.Step(time.Second)
	waitEvents(1) // applied on node-a
	var dnsErr *net.DNSError
	if err := dial(fast); err != nil {
		t.Errorf("dial through node-a, which applied the change: %v", err)
	}
	if err := dial(slow); !errors.As(err, &dnsErr) {
		t.Errorf("dial through node-b before it applied the change: %v, want a lookup failure", err)
	}
	fc.Step(2 * time.Second)
	waitEvents(2) // applied on node-b
	if err := dial(slow); err != nil {
		t.Errorf("dial through node-b once it applied the change: %v", err)
	}
	events := log.Events()
	if events[0].Node != "node-a" || events[1].Node != "node-b" || events[1].Time.Sub(events[0].Time) != 2*time.Second {
		t.Errorf("applied on %s at %v, then on %s at %v; want node-a, then node-b 2 s later",
			events[0].Node, events[0].Time, events[1].Node, events[1].Time)
	}
}

// TestProxyServeAffinity: the Service's listener takes each client's
// address as its source for sessionAffinity ClientIP, so that clients
// outside the cluster stick to endpoints of their own (E9).
func TestProxyServeAffinity(t *testing.T) {
	t.Parallel()
	log := &cluster.EventLog{}
	p, err := NewProxy(ProxyConfig{MinPropagationDelay: time.Millisecond, MaxPropagationDelay: time.Millisecond, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	backends := newBackends(t, 3, "node")
	svc := webService()
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	publishNow(t, p, log, svc, slicesOf(backends, func(int) (bool, bool, bool) { return true, true, false }))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, ln, "web.default:80") }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	}()
	// via returns the port of the backend that answered a connection
	// from source.
	via := func(source string) string {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: waitLimit}
		conn, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(waitLimit))
		b, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	chosen := map[string]bool{}
	for i := range 20 {
		source := "127.0.8." + strconv.Itoa(i+1)
		first := via(source)
		for range 4 {
			if got := via(source); got != first {
				t.Fatalf("client %s reached %s, then %s; want one endpoint", source, first, got)
			}
		}
		chosen[first] = true
	}
	if len(chosen) < 2 {
		t.Errorf("20 clients all reached %v, want each its own random choice", chosen)
	}
}

// TestSplitServiceHost: a Service's name, with or without the cluster
// domain, splits into name and namespace; other hosts do not.
func TestSplitServiceHost(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"web.shop", "web.shop.svc", "web.shop.svc.cluster.local", "web.shop.svc.cluster.local."} {
		if name, namespace, ok := SplitServiceHost(host); !ok || name != "web" || namespace != "shop" {
			t.Errorf("SplitServiceHost(%q) = %q, %q, %v; want web, shop, true", host, name, namespace, ok)
		}
	}
	for _, host := range []string{"web", "127.0.0.1", "::1", "a.b.c", "web.shop.svc.example.com", ".shop", "web."} {
		if name, namespace, ok := SplitServiceHost(host); ok {
			t.Errorf("SplitServiceHost(%q) = %q, %q, true; want not a Service", host, name, namespace)
		}
	}
}
