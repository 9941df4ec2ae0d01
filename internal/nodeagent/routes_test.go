package nodeagent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// routesWait bounds every wait of the routes tests; reaching it is a
// failure, so it is far longer than a watch takes.
const routesWait = 30 * time.Second

// TestRoutes drives a node's routing view through a real API server: a
// Service and EndpointSlices written by the test, whose endpoints are
// listeners of the test, known to the API by their PodIPInAPI addresses. Ready endpoints share the connections; each change
// of a slice reaches the view, with an EndpointsApplied event; serving
// terminating endpoints are the fallback when none is Ready; with no
// usable endpoint the connect is refused; a deleted Service is unknown. A
// second view with an extra delay applies the same change later.
func TestRoutes(t *testing.T) {
	client := controlplanetest.Client(t)
	ctx := context.Background()
	ns := createNamespace(t, client, "routes-")
	a, b := newNamedBackend(t, "127.76.0.1", "a"), newNamedBackend(t, "127.76.0.2", "b")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	for _, s := range []*discoveryv1.EndpointSlice{endpointSlice(ns, "web-a", a, ready), endpointSlice(ns, "web-b", b, ready)} {
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	log := &cluster.EventLog{}
	r := startRoutes(t, RoutesConfig{Client: client, NodeName: "routes-node-1", Recorder: log})
	const delay = 500 * time.Millisecond
	slowLog := &cluster.EventLog{}
	startRoutes(t, RoutesConfig{Client: client, NodeName: "routes-node-2", MinDelay: delay, MaxDelay: delay, Recorder: slowLog})
	object := "Service/" + ns + "/web"

	// The view holds what was there when StartRoutes returned.
	for _, host := range []string{"web." + ns, "web." + ns + ".svc", "web." + ns + ".svc.cluster.local"} {
		if seen := reached(t, r.DialContext, "http://"+host+"/", 40); seen["a"] == 0 || seen["b"] == 0 {
			t.Errorf("connections to %s reached %v, want both Ready endpoints", host, seen)
		}
	}

	// A pod's dialer takes the view for Service hosts, and dials other
	// addresses directly, which the view does not.
	if seen := reached(t, r.DialFromPod, "http://web."+ns+".svc:80/", 20); seen["a"] == 0 || seen["b"] == 0 {
		t.Errorf("a pod's connections to Service web reached %v, want both Ready endpoints", seen)
	}
	other := newNamedBackend(t, "127.76.0.3", "other")
	otherURL := "http://" + net.JoinHostPort(other.ip, strconv.Itoa(int(other.port))) + "/"
	if seen := reached(t, r.DialFromPod, otherURL, 2); seen["other"] != 2 {
		t.Errorf("a pod's connections to %s reached %v, want it directly", otherURL, seen)
	}
	if c, err := r.DialContext(ctx, "tcp", strings.TrimSuffix(strings.TrimPrefix(otherURL, "http://"), "/")); err == nil {
		c.Close()
		t.Errorf("the view dialed %s, which is no Service", otherURL)
	}

	// A Ready endpoint starts terminating, still serving: the other one
	// takes every connection, in both views, the slow one later.
	from, slowFrom := len(log.Events()), len(slowLog.Events())
	changed := time.Now()
	updateSlice(t, client, endpointSlice(ns, "web-a", a, discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}))
	e := waitApplied(t, log, from, object, "127.76.0.1=0/1/1,127.76.0.2=1/1/0")
	slowE := waitApplied(t, slowLog, slowFrom, object, "127.76.0.1=0/1/1,127.76.0.2=1/1/0")
	t.Logf("update to view: %v through the watch, %v with %v more", e.Time.Sub(changed), slowE.Time.Sub(changed), delay)
	if lag := slowE.Time.Sub(changed); lag < delay {
		t.Errorf("the view with a %v delay applied the change %v after it was made", delay, lag)
	}
	if seen := reached(t, r.DialContext, "http://web."+ns+"/", 20); seen["a"] != 0 || seen["b"] != 20 {
		t.Errorf("with a terminating: connections reached %v, want b only", seen)
	}

	// The Ready endpoint's slice goes: the serving terminating endpoint is
	// the fallback.
	from = len(log.Events())
	if err := client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, log, from, object, "127.76.0.1=0/1/1")
	if seen := reached(t, r.DialContext, "http://web."+ns+"/", 20); seen["a"] != 20 {
		t.Errorf("with only a serving terminating endpoint: connections reached %v, want a only", seen)
	}
	// A connection names its pod by the address the API knows it by.
	if c, err := r.DialContext(ctx, "tcp", "web."+ns+":80"); err != nil {
		t.Errorf("dial with a serving terminating endpoint: %v", err)
	} else {
		if got, want := c.RemoteAddr().String(), PodIPInAPI(netip.MustParseAddr("127.76.0.1")).String()+":"; !strings.HasPrefix(got, want) {
			t.Errorf("connection's remote address %s, want %s…", got, want)
		}
		// A keep-alive client checks an idle connection on its socket.
		if _, ok := c.(syscall.Conn); !ok {
			t.Errorf("the connection (%T) does not expose its socket", c)
		}
		c.Close()
	}
	// No endpoint serves: the connect is refused.
	from = len(log.Events())
	updateSlice(t, client, endpointSlice(ns, "web-a", a, discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}))
	waitApplied(t, log, from, object, "127.76.0.1=0/0/1")
	if _, err := r.DialContext(ctx, "tcp", "web."+ns+":80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no usable endpoint: %v, want connection refused", err)
	}

	// The Service goes: the name is unknown.
	if err := client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(routesWait)
	var dnsErr *net.DNSError
	// One dial per round, until the removal reached the view.
	for _, err := r.DialContext(ctx, "tcp", "web."+ns+":80"); !errors.As(err, &dnsErr); _, err = r.DialContext(ctx, "tcp", "web."+ns+":80") {
		if time.Now().After(deadline) {
			t.Fatalf("dial after the Service was deleted: %v, want a lookup failure", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPodIP: a loopback address and the API's address of the same pod
// turn into each other; other addresses stay as they are.
func TestPodIP(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ node, api string }{
		{"127.101.2.7", "10.101.2.7"},
		{"127.0.0.1", "10.0.0.1"},
	} {
		node, api := netip.MustParseAddr(tt.node), netip.MustParseAddr(tt.api)
		if got := PodIPInAPI(node); got != api {
			t.Errorf("PodIPInAPI(%s) = %s, want %s", node, got, api)
		}
		if got := PodIPOnNode(api); got != node {
			t.Errorf("PodIPOnNode(%s) = %s, want %s", api, got, node)
		}
	}
	for _, s := range []string{"192.168.1.1", "::1", "fd00::10:1"} {
		a := netip.MustParseAddr(s)
		if PodIPInAPI(a) != a || PodIPOnNode(a) != a {
			t.Errorf("PodIPInAPI(%s) = %s, PodIPOnNode(%s) = %s; want it unchanged", a, PodIPInAPI(a), a, PodIPOnNode(a))
		}
	}
}

// TestRoutesDialErrorAddr: a refused connect to a pod names, in its
// *net.OpError, the pod's address as the API knows it, as the connection's
// RemoteAddr would have; a Service with no endpoint refuses with no
// address. The view is loaded by hand: no API server is needed.
func TestRoutesDialErrorAddr(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	proxy, err := local.NewProxy(local.ProxyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	r := &Routes{proxy: proxy}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	endpoint := []*discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(port))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
	}}
	for _, tt := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   string
	}{
		{"pod not listening", endpoint, "10.0.0.1:" + strconv.Itoa(port)},
		{"no endpoint", nil, ""},
	} {
		proxy.Load(svc, tt.slices)
		c, err := r.DialContext(context.Background(), "tcp", "web.shop:80")
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected to %v, want refused", tt.name, c.RemoteAddr())
		}
		var oe *net.OpError
		if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) {
			t.Fatalf("%s: %v, want a refused connect (*net.OpError)", tt.name, err)
		}
		got := ""
		if oe.Addr != nil {
			got = oe.Addr.String()
		}
		if got != tt.want {
			t.Errorf("%s: error %v names address %q, want %q", tt.name, err, got, tt.want)
		}
	}
}

// TestStartRoutesErrors: a config without a client or node, or with a
// delay range that is not one, is an error that names the fields; a
// context that ends before the informers synced is an error.
func TestStartRoutesErrors(t *testing.T) {
	client := controlplanetest.Client(t)
	for _, tt := range []struct {
		name string
		cfg  RoutesConfig
		want string
	}{
		{"no client", RoutesConfig{NodeName: "n"}, "RoutesConfig.Client"},
		{"no node", RoutesConfig{Client: client}, "RoutesConfig.NodeName"},
		{"bad delay", RoutesConfig{Client: client, NodeName: "n", MinDelay: time.Second, MaxDelay: time.Millisecond}, "MinDelay"},
	} {
		if r, err := StartRoutes(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			if r != nil {
				r.Close()
			}
			t.Errorf("%s: StartRoutes() error = %v, want one naming %s", tt.name, err, tt.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := StartRoutes(ctx, RoutesConfig{Client: client, NodeName: "n"}); !errors.Is(err, context.Canceled) {
		if r != nil {
			r.Close()
		}
		t.Errorf("StartRoutes() with an ended context: %v, want context.Canceled", err)
	}
}

// createNamespace creates a namespace of its own for the test, named from
// prefix, and deletes it when the test ends.
func createNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// startRoutes starts routes of cfg and closes them when the test ends.
func startRoutes(t *testing.T, cfg RoutesConfig) *Routes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), routesWait)
	defer cancel()
	r, err := StartRoutes(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// namedBackend is an HTTP server standing for a pod's port, which answers
// every request with its name.
type namedBackend struct {
	ip   string
	port int32
}

// newNamedBackend serves on an ephemeral port of ip until the test ends.
func newNamedBackend(t *testing.T, ip, name string) *namedBackend {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &namedBackend{ip: ip, port: int32(ln.Addr().(*net.TCPAddr).Port)}
}

// endpointSlice returns EndpointSlice name of Service web in ns, as an
// EndpointSlice controller of the test's own writes it: one endpoint, b
// by its address in the API, with conditions c, on port "http".
func endpointSlice(ns, name string, b *namedBackend, c discoveryv1.EndpointConditions) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "closingtime-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(b.port), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{PodIPInAPI(netip.MustParseAddr(b.ip)).String()}, Conditions: c}},
	}
}

// updateSlice replaces the EndpointSlice s names with s.
func updateSlice(t *testing.T, client kubernetes.Interface, s *discoveryv1.EndpointSlice) {
	t.Helper()
	cur, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Get(context.Background(), s.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.ResourceVersion = cur.ResourceVersion
	if _, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitApplied returns the first EndpointsApplied event of object at or
// after index from whose endpoints are endpoints (as
// cluster.Endpoints.String renders them); it fails the test after
// routesWait.
func waitApplied(t *testing.T, log *cluster.EventLog, from int, object, endpoints string) cluster.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), routesWait)
	defer cancel()
	// One event per round; bounded by ctx.
	for i := from; ; i++ {
		e, err := log.Next(ctx, i)
		if err != nil {
			t.Fatalf("no EndpointsApplied %s of %s within %v; events: %v", endpoints, object, routesWait, log.Events()[from:])
		}
		if e.Kind == cluster.EndpointsApplied && e.Object == object && e.Endpoints.String() == endpoints {
			return e
		}
	}
}

// reached sends n GET requests for url, each on a new connection made by
// dial, and counts them by the name of the backend that answered.
func reached(t *testing.T, dial func(ctx context.Context, network, address string) (net.Conn, error), url string, n int) map[string]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: routesWait}
	seen := map[string]int{}
	for range n {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		name, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen[string(name)]++
	}
	return seen
}

func TestParsePropagationDelay(t *testing.T) {
	for _, tt := range []struct {
		in       string
		min, max time.Duration
		ok       bool
	}{
		{"", 0, 0, true},
		{"100ms-1s", 100 * time.Millisecond, time.Second, true},
		{"0s-0s", 0, 0, true},
		{"1s", 0, 0, false},
		{"1s-100ms", 0, 0, false},
		{"-1s-1s", 0, 0, false},
		{"1x-2s", 0, 0, false},
	} {
		min, max, err := ParsePropagationDelay(tt.in)
		if (err == nil) != tt.ok || min != tt.min || max != tt.max {
			t.Errorf("ParsePropagationDelay(%q) = %v, %v, %v; want %v, %v, ok %v", tt.in, min, max, err, tt.min, tt.max, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), PropagationDelayEnv) {
			t.Errorf("error %q does not name %s", err, PropagationDelayEnv)
		}
	}
	// What RoutingEnv writes parses back.
	for _, v := range RoutingEnv("k", "n", 100*time.Millisecond, time.Second) {
		if v.Name == PropagationDelayEnv {
			if min, max, err := ParsePropagationDelay(v.Value); err != nil || min != 100*time.Millisecond || max != time.Second {
				t.Errorf("RoutingEnv's %s=%q parses to %v, %v, %v", v.Name, v.Value, min, max, err)
			}
		}
	}
}
