package cluster

import (
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoint is one endpoint of a Service as an EndpointSlice lists it
// (k8s.io/api discovery/v1 types.go, Endpoint), typed once for every
// reader: the backends' endpoints events carry it, the results'
// timeline keeps it, the report draws it.
type Endpoint struct {
	// Address is the endpoint's first address, the one a proxy routes
	// to.
	Address string `json:"address"`
	// Ready, Serving and Terminating are its conditions. An unset
	// condition reads as the API defines it: ready and serving true,
	// terminating false (EndpointConditions).
	Ready       bool `json:"ready"`
	Serving     bool `json:"serving"`
	Terminating bool `json:"terminating"`
	// Node is the node it is on (nodeName); empty if unset.
	Node string `json:"node,omitempty"`
}

// Endpoints are a Service's endpoints as a view of them holds them: the
// value of an [EndpointsPublished] or [EndpointsApplied] event.
type Endpoints struct {
	// List holds the endpoints of the Service's EndpointSlices, in the
	// slices' order.
	List []Endpoint `json:"list"`
	// NodeLocal is the Service's internalTrafficPolicy Local, by which a
	// node routes its clients' connections only to endpoints on it. Only
	// a node's view ([EndpointsApplied]) sets it.
	NodeLocal bool `json:"nodeLocal,omitempty"`
}

// String renders e as address=ready/serving/terminating, each condition 1
// or 0, followed by @node when e has a node: 10.0.0.5=0/1/1@node-1.
func (e Endpoint) String() string {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	s := e.Address + "=" + flag(e.Ready) + "/" + flag(e.Serving) + "/" + flag(e.Terminating)
	if e.Node != "" {
		s += "@" + e.Node
	}
	return s
}

// String renders e's endpoints as [Endpoint.String] does, comma separated,
// followed by " (node-local)" for NodeLocal.
func (e Endpoints) String() string {
	parts := make([]string, len(e.List))
	for i, ep := range e.List {
		parts[i] = ep.String()
	}
	s := strings.Join(parts, ",")
	if e.NodeLocal {
		s += " (node-local)"
	}
	return s
}

// EndpointsOf returns the endpoints of slices, in order, leaving out
// those without an address.
func EndpointsOf(slices ...*discoveryv1.EndpointSlice) []Endpoint {
	var out []Endpoint
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			c := ep.Conditions
			e := Endpoint{Address: ep.Addresses[0], Ready: c.Ready == nil || *c.Ready,
				Serving: c.Serving == nil || *c.Serving, Terminating: c.Terminating != nil && *c.Terminating}
			if ep.NodeName != nil {
				e.Node = *ep.NodeName
			}
			out = append(out, e)
		}
	}
	return out
}

// Route returns the indices in List of the endpoints that a new
// connection from a client on node may go to, in order, as kube-proxy's
// rules send it (docs/kubernetes.md E6, E8; k8s.io/kubernetes
// pkg/proxy/topology.go, CategorizeEndpoints): the Ready ones; when none
// is Ready, the serving and terminating ones. With NodeLocal only the
// endpoints on node count, and dropped reports that none of them is
// usable while some elsewhere are: kube-proxy then drops the connection
// instead of refusing it. An empty result without dropped is a Service
// with no usable endpoint, whose connections are refused.
func (e Endpoints) Route(node string) (to []int, dropped bool) {
	var ready, terminating []int
	anywhere := false // a usable endpoint on any node
	for i, ep := range e.List {
		servingTerminating := ep.Serving && ep.Terminating
		anywhere = anywhere || ep.Ready || servingTerminating
		if e.NodeLocal && ep.Node != node {
			continue
		}
		switch {
		case ep.Ready:
			ready = append(ready, i)
		case servingTerminating:
			terminating = append(terminating, i)
		}
	}
	to = ready
	if len(to) == 0 {
		to = terminating
	}
	return to, len(to) == 0 && anywhere
}
