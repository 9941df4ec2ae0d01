package proxyrules

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// services returns n Services of eps endpoints each, with a node port,
// and affinity if affinity is set.
func services(n, eps int, affinity bool) []Service {
	svcs := make([]Service, n)
	for i := range svcs {
		port := Port{Name: "http", Port: 80, NodePort: uint16(30000 + i)}
		for j := range eps {
			port.Endpoints = append(port.Endpoints, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), byte(j + 2)}), 8080))
		}
		port.NodePortEndpoints = port.Endpoints
		svcs[i] = Service{Namespace: "default", Name: fmt.Sprintf("svc-%d", i),
			ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}), Ports: []Port{port}}
		if affinity {
			svcs[i].Affinity = affinityTimeout
		}
	}
	return svcs
}

// BenchmarkSync measures a Sync: of one changed endpoint of a Service of
// 100 (its service chain rewritten, one endpoint chain gone and one new),
// alone and among 99 other Services of 10 endpoints; and the first Sync of
// 100 Services of 10 endpoints each.
func BenchmarkSync(b *testing.B) {
	ns := newNetns(b)
	for _, others := range []int{0, 99} {
		for _, affinity := range []bool{false, true} {
			b.Run(fmt.Sprintf("one-endpoint-of-100/others=%d/affinity=%v", others, affinity), func(b *testing.B) {
				oneEndpoint(b, ns, others, affinity)
			})
		}
	}
	for _, affinity := range []bool{false, true} {
		b.Run(fmt.Sprintf("first-of-100x10/affinity=%v", affinity), func(b *testing.B) {
			firstSync(b, ns, services(100, 10, affinity))
		})
	}
}

// oneEndpoint measures Syncs that change one endpoint of a Service of 100,
// with others Services of 10 endpoints beside it.
func oneEndpoint(b *testing.B, ns *podnet.Netns, others int, affinity bool) {
	r := newRules(b, ns, podCIDR)
	var views [2][]Service
	for i := range views {
		big := services(1, 100, affinity)
		big[0].Name = "big"
		big[0].ClusterIP = netip.MustParseAddr("10.96.200.1")
		big[0].Ports[0].NodePort = 32000
		views[i] = append(services(others, 10, affinity), big...)
	}
	views[1][others].Ports[0].Endpoints[0] = netip.MustParseAddrPort("10.244.250.1:8080")
	if err := r.Sync(views[1]); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if err := r.Sync(views[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// firstSync measures the first Sync of view after New.
func firstSync(b *testing.B, ns *podnet.Netns, view []Service) {
	for b.Loop() {
		b.StopTimer()
		r, err := New(Config{NetNS: ns.FD(), PodCIDR: netip.MustParsePrefix(podCIDR)})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := r.Sync(view); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
