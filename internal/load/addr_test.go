package load

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// TestEventAddr routes each new connection to one of two servers that set
// no X-Pod-Name header, as a routing dialer picks a Service's endpoint, and
// checks that every answered request's event names, in addr, the server
// that counted it, for both kinds of client.
func TestEventAddr(t *testing.T) {
	for _, kind := range []Kind{NewConn, KeepAlive} {
		t.Run(kind.String(), func(t *testing.T) {
			var counts [2]atomic.Int64
			var addrs [2]string
			for i := range counts {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					counts[i].Add(1)
				}))
				t.Cleanup(srv.Close)
				addrs[i] = srv.Listener.Addr().String()
			}
			var mu sync.Mutex
			dials := 0
			var d net.Dialer
			dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
				mu.Lock()
				target := addrs[dials%2]
				dials++
				mu.Unlock()
				return d.DialContext(ctx, network, target)
			}
			var lines bytes.Buffer
			gen, err := New(Config{URL: "http://app.default/", Clients: []Client{{Kind: kind, Rate: 100, Connections: 2}},
				Duration: 500 * time.Millisecond, Dial: dial, Events: &lines})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gen.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			events, _, err := ReadStream(&lines)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, e := range events {
				if e.Class != OK {
					t.Fatalf("request %s: %s (%v); want ok", e.ID, e.Class, e.Err)
				}
				if e.Pod != "" {
					t.Errorf("request %s: pod %q from a server that sets no %s", e.ID, e.Pod, PodHeader)
				}
				got[e.Addr.String()]++
			}
			for i, addr := range addrs {
				if got[addr] != counts[i].Load() || got[addr] == 0 {
					t.Errorf("%d events with addr %s; the server there counted %d requests (events by addr: %v)", got[addr], addr, counts[i].Load(), got)
				}
			}
		})
	}
}

// TestAddrPort checks that the address kept for a connection spells, in an
// event, as net.TCPAddr.String does (IPv4 not mapped into IPv6, zones
// kept), that another kind of IP address is parsed, and that an address
// with no IP and port gives none.
func TestAddrPort(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.77.0.2"), Port: 8080}, "127.77.0.2:8080"},
		{&net.TCPAddr{IP: net.IPv4(10, 96, 0, 10).To4(), Port: 80}, "10.96.0.10:80"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 443}, "[::1]:443"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"}, "[fe80::1%eth0]:80"},
		{&net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: 53}, "127.0.0.1:53"},
		{&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := EventOf(&Result{Addr: addrPort(tt.addr)}).Addr; got != tt.want {
			t.Errorf("connection to %v: event addr %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// TestRefusedAddr: a refused connect records the address it tried, in both
// connection modes, and so, through the embedded cluster's routing view,
// the endpoint that refused it; a Service with no endpoint refuses with no
// address, as there is none to name.
func TestRefusedAddr(t *testing.T) {
	address := testbinary.ClosedAddr(t)
	want := netip.MustParseAddrPort(address)
	for _, connections := range []int{0, 1} {
		c := testClient(address, connections)
		if a := roundTrip(t, c, address, "r1")[0]; a.class != Refused || a.addr != want {
			t.Errorf("%d connections: %s (%v) with addr %v, want refused with addr %v", connections, a.class, a.err, a.addr, want)
		}
		c.close()
	}

	proxy, err := local.NewProxy(local.ProxyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	endpoint := []*discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(want.Port()))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{want.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
	}}
	for _, tt := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   netip.AddrPort
	}{
		{"endpoint not listening", endpoint, want},
		{"no endpoint", nil, netip.AddrPort{}},
	} {
		proxy.Load(svc, tt.slices)
		var results []Result
		run(t, Config{URL: "http://web.shop/", Clients: []Client{{Kind: NewConn, Rate: 100}}, Duration: 30 * time.Millisecond,
			Dial: proxy.DialContext, OnResult: func(r Result) { results = append(results, r) }})
		if len(results) == 0 {
			t.Fatalf("%s: no request", tt.name)
		}
		for _, r := range results {
			if r.Class != Refused || r.Addr != tt.want {
				t.Errorf("%s: request %s %s (%v) with addr %v, want refused with addr %v", tt.name, r.ID, r.Class, r.Err, r.Addr, tt.want)
			}
		}
	}
}
