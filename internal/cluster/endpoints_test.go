package cluster

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// TestEndpointsOf: unset conditions read as the API defines them, an
// endpoint without an address is left out, and the slices' order is kept.
func TestEndpointsOf(t *testing.T) {
	t.Parallel()
	a := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To("node-1")},
		{Addresses: nil, NodeName: ptr.To("node-1")},
		{Addresses: []string{"10.0.0.2", "10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}},
	}}
	b := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.4"}, Conditions: discoveryv1.EndpointConditions{Serving: ptr.To(false)}},
	}}
	got := EndpointsOf(a, b)
	want := []Endpoint{
		{Address: "10.0.0.1", Ready: true, Serving: true, Node: "node-1"},
		{Address: "10.0.0.2", Serving: true, Terminating: true},
		{Address: "10.0.0.4", Ready: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("EndpointsOf() = %v, want %v", got, want)
	}
}

// TestEndpointsRoute pins which endpoints a node's new connection may go
// to (E6, E8): the Ready ones, else the serving and terminating ones; with
// NodeLocal, of the node only, and dropped when only other nodes have
// usable ones.
func TestEndpointsRoute(t *testing.T) {
	t.Parallel()
	ready := func(addr, node string) Endpoint {
		return Endpoint{Address: addr, Ready: true, Serving: true, Node: node}
	}
	draining := func(addr, node string) Endpoint {
		return Endpoint{Address: addr, Serving: true, Terminating: true, Node: node}
	}
	gone := func(addr, node string) Endpoint { return Endpoint{Address: addr, Terminating: true, Node: node} }
	unready := func(addr, node string) Endpoint { return Endpoint{Address: addr, Node: node} }
	tests := []struct {
		name        string
		eps         Endpoints
		want        []string
		wantDropped bool
	}{
		{name: "ready ones only",
			eps:  Endpoints{List: []Endpoint{ready("a", "n1"), draining("b", "n1"), unready("c", "n1"), ready("d", "n2")}},
			want: []string{"a", "d"}},
		{name: "serving terminating when none is ready",
			eps:  Endpoints{List: []Endpoint{draining("a", "n1"), gone("b", "n1"), unready("c", "n2"), draining("d", "n2")}},
			want: []string{"a", "d"}},
		{name: "none usable",
			eps: Endpoints{List: []Endpoint{gone("a", "n1"), unready("b", "n2")}}},
		{name: "no endpoints"},
		{name: "local: the node's ready ones",
			eps:  Endpoints{NodeLocal: true, List: []Endpoint{ready("a", "n1"), ready("b", "n2"), draining("c", "n1")}},
			want: []string{"a"}},
		{name: "local: the node's serving terminating ones, though others are ready elsewhere",
			eps:  Endpoints{NodeLocal: true, List: []Endpoint{draining("a", "n1"), ready("b", "n2")}},
			want: []string{"a"}},
		{name: "local: none on the node, some elsewhere",
			eps:         Endpoints{NodeLocal: true, List: []Endpoint{unready("a", "n1"), draining("b", "n2")}},
			wantDropped: true},
		{name: "local: none usable anywhere",
			eps: Endpoints{NodeLocal: true, List: []Endpoint{unready("a", "n1"), gone("b", "n2")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			to, dropped := tt.eps.Route("n1")
			var got []string
			for _, i := range to {
				got = append(got, tt.eps.List[i].Address)
			}
			if !slices.Equal(got, tt.want) || dropped != tt.wantDropped {
				t.Errorf("Route(n1) of %s = %v, dropped %v; want %v, dropped %v", tt.eps, got, dropped, tt.want, tt.wantDropped)
			}
		})
	}
}

// TestEndpointString: the rendering that tests and failure messages
// compare endpoints by.
func TestEndpointString(t *testing.T) {
	t.Parallel()
	eps := Endpoints{NodeLocal: true, List: []Endpoint{
		{Address: "10.0.0.1", Ready: true, Serving: true},
		{Address: "10.0.0.2", Serving: true, Terminating: true, Node: "node-2"},
	}}
	if got, want := eps.String(), "10.0.0.1=1/1/0,10.0.0.2=0/1/1@node-2 (node-local)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
