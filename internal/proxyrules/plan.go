package proxyrules

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// Names of the table's base objects, kube-proxy's.
const (
	servicesChain          = "services"
	masqueradingChain      = "masquerading"
	markMasqChain          = "mark-for-masquerade"
	serviceEndpointsCheck  = "service-endpoints-check"
	nodePortEndpointsCheck = "nodeport-endpoints-check"
	clusterIPsCheck        = "cluster-ips-check"
	rejectChain            = "reject-chain"

	serviceIPsMap          = "service-ips"
	serviceNodePortsMap    = "service-nodeports"
	noEndpointServicesMap  = "no-endpoint-services"
	noEndpointNodePortsMap = "no-endpoint-nodeports"
	clusterIPsSet          = "cluster-ips"
)

// Prefixes of the names of the per-Service chains and sets.
const (
	servicePrefix  = "service-"
	externalPrefix = "external-"
	endpointPrefix = "endpoint-"
	affinityPrefix = "affinity-"
)

// state is what the table holds for the Services beyond its base: what
// Sync plans and diffs.
type state struct {
	chains   map[string][]rule        // the per-Service chains, by name
	sets     map[string]time.Duration // the affinity sets, by name, with their timeout
	elements map[element]verdict      // the elements of the base maps and sets
}

// ruleKind is what a rule of a per-Service chain does.
type ruleKind uint8

const (
	// markOutside marks for masquerading a packet whose source is
	// outside prefix: ip saddr != prefix jump mark-for-masquerade.
	markOutside ruleKind = iota
	// markAll marks every packet: jump mark-for-masquerade.
	markAll
	// markFrom marks a packet from prefix's single address, an
	// endpoint's connection to itself: ip saddr addr jump
	// mark-for-masquerade.
	markFrom
	// stick sends a client remembered in set to chains[0]: ip saddr
	// @set goto chains[0].
	stick
	// goTo sends every packet to chains[0]: goto chains[0].
	goTo
	// spread sends a packet to one of chains at random: numgen random
	// mod len(chains) vmap { 0 : goto chains[0], … }.
	spread
	// remember adds the client to set, or renews its timeout: update
	// @set { ip saddr }.
	remember
	// dnat sends the packet to to: meta l4proto tcp dnat to to.
	dnat
)

// rule is one rule of a per-Service chain, as a value that the rule a
// Sync wants is compared with.
type rule struct {
	kind   ruleKind
	prefix netip.Prefix   // markOutside, markFrom
	set    string         // stick, remember
	chains []string       // stick, goTo, spread
	to     netip.AddrPort // dnat
}

func (a rule) equal(b rule) bool {
	return a.kind == b.kind && a.prefix == b.prefix && a.set == b.set && a.to == b.to && slices.Equal(a.chains, b.chains)
}

// element is an element of one of the base maps or sets.
type element struct {
	set  string     // the map or set
	ip   netip.Addr // the destination address; zero in the node-port maps
	port uint16     // the destination TCP port; zero in cluster-ips
}

// verdict is the value of an element of a verdict map: goto chain, or
// drop. The elements of cluster-ips, a set, have the zero verdict.
type verdict struct {
	chain string
	drop  bool
}

// planned is the part of the table that one Service makes, with the
// Service it was planned from.
type planned struct {
	svc Service // a copy, which shares no slice with the caller's
	state
}

// plan returns the parts of the table that route services, by
// namespace/name, or an error naming the Service whose input the table
// can't hold. A Service equal to the one last planned keeps its part of
// last, so that a Sync plans and compares only the Services that changed,
// as kube-proxy's partial syncs do.
func plan(services []Service, podCIDR netip.Prefix, last map[string]*planned) (map[string]*planned, error) {
	parts := make(map[string]*planned, len(services))
	owners := map[destination]owner{}
	for _, svc := range services {
		id := svc.Namespace + "/" + svc.Name
		switch {
		case svc.Namespace == "" || svc.Name == "":
			return nil, fmt.Errorf("Service %q: want a namespace and a name", id)
		case parts[id] != nil:
			return nil, fmt.Errorf("Service %s listed twice", id)
		case svc.ClusterIP.IsValid() && !svc.ClusterIP.Is4():
			return nil, fmt.Errorf("Service %s: ClusterIP %s is not IPv4", id, svc.ClusterIP)
		}
		if err := claim(owners, id, svc); err != nil {
			return nil, err
		}
		if p := last[id]; p != nil && p.svc.equal(svc) {
			parts[id] = p
			continue
		}
		p, err := planService(svc, podCIDR)
		if err != nil {
			return nil, err
		}
		parts[id] = p
	}
	return parts, nil
}

// destination is a ClusterIP (port 0), a ClusterIP port, or a node port
// (the zero ip).
type destination struct {
	ip   netip.Addr
	port uint16
}

func (d destination) String() string {
	switch {
	case d.port == 0:
		return "ClusterIP " + d.ip.String()
	case !d.ip.IsValid():
		return fmt.Sprintf("node port %d", d.port)
	}
	return fmt.Sprintf("ClusterIP %s port %d", d.ip, d.port)
}

// owner is the Service, and its port (0 for its ClusterIP), that a
// destination is of.
type owner struct {
	id   string
	port uint16
}

func (o owner) String() string {
	if o.port == 0 {
		return "Service " + o.id
	}
	return fmt.Sprintf("Service %s port %d", o.id, o.port)
}

// claim records in owners the destinations of svc, named id: its ClusterIP
// and each port's ClusterIP port and node port, unless another Service or
// port has one of them.
func claim(owners map[destination]owner, id string, svc Service) error {
	if !svc.ClusterIP.IsValid() {
		return nil
	}
	take := func(d destination, o owner) error {
		if other, ok := owners[d]; ok {
			return fmt.Errorf("%s: %s is %s's too", o, d, other)
		}
		owners[d] = o
		return nil
	}
	if err := take(destination{ip: svc.ClusterIP}, owner{id: id}); err != nil {
		return err
	}
	for _, port := range svc.Ports {
		if port.Port == 0 {
			return fmt.Errorf("Service %s port 0: want a port number", id)
		}
		o := owner{id: id, port: port.Port}
		if err := take(destination{ip: svc.ClusterIP, port: port.Port}, o); err != nil {
			return err
		}
		if port.NodePort != 0 {
			if err := take(destination{port: port.NodePort}, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// planService returns the part of the table that svc makes.
func planService(svc Service, podCIDR netip.Prefix) (*planned, error) {
	id := svc.Namespace + "/" + svc.Name
	if svc.Affinity < 0 || svc.Affinity > 0 && svc.Affinity < time.Millisecond {
		return nil, fmt.Errorf("Service %s: affinity timeout %s: want 0 or at least 1ms", id, svc.Affinity)
	}
	p := &planner{planned: planned{svc: svc.clone(), state: newState()}, podCIDR: podCIDR}
	if !svc.ClusterIP.IsValid() {
		return &p.planned, nil
	}
	// A port's name names its chains.
	names := map[string]bool{}
	for _, port := range svc.Ports {
		if names[port.Name] {
			return nil, fmt.Errorf("Service %s: port name %q used twice", id, port.Name)
		}
		names[port.Name] = true
		if err := p.port(svc, port); err != nil {
			return nil, fmt.Errorf("Service %s port %d: %w", id, port.Port, err)
		}
	}
	return &p.planned, nil
}

func newState() state {
	return state{chains: map[string][]rule{}, sets: map[string]time.Duration{}, elements: map[element]verdict{}}
}

// add adds the chains, sets and elements of o to s.
func (s *state) add(o state) {
	maps.Copy(s.chains, o.chains)
	maps.Copy(s.sets, o.sets)
	maps.Copy(s.elements, o.elements)
}

// equal reports whether s and o are the same input.
func (s Service) equal(o Service) bool {
	return s.Namespace == o.Namespace && s.Name == o.Name && s.ClusterIP == o.ClusterIP && s.Affinity == o.Affinity &&
		slices.EqualFunc(s.Ports, o.Ports, Port.equal)
}

func (p Port) equal(o Port) bool {
	return p.Name == o.Name && p.Port == o.Port && p.NodePort == o.NodePort && p.NoEndpoints == o.NoEndpoints &&
		slices.Equal(p.Endpoints, o.Endpoints) && slices.Equal(p.NodePortEndpoints, o.NodePortEndpoints)
}

// clone returns a copy of s that shares no slice with it.
func (s Service) clone() Service {
	s.Ports = slices.Clone(s.Ports)
	for i := range s.Ports {
		s.Ports[i].Endpoints = slices.Clone(s.Ports[i].Endpoints)
		s.Ports[i].NodePortEndpoints = slices.Clone(s.Ports[i].NodePortEndpoints)
	}
	return s
}

// planner builds the part of the table of one Service, a port at a time.
type planner struct {
	planned
	podCIDR netip.Prefix
}

// endpointNames are the names of an endpoint's chain and affinity set.
type endpointNames struct{ chain, set string }

// port adds the rules of one port of svc.
func (p *planner) port(svc Service, port Port) error {
	if port.NoEndpoints != Reject && port.NoEndpoints != Drop {
		return fmt.Errorf("no-endpoints verdict %s: want Reject or Drop", port.NoEndpoints)
	}
	base := svc.Namespace + "/" + svc.Name + "/tcp/" + port.Name
	eps, err := distinct(port.Endpoints)
	if err != nil {
		return err
	}
	nodeEps, err := distinct(port.NodePortEndpoints)
	if err != nil {
		return err
	}
	// The endpoint chains that either dispatch chain picks from.
	names := make(map[netip.AddrPort]endpointNames, len(eps))
	for _, ep := range slices.Concat(eps, nodeEps) {
		if _, ok := names[ep]; ok {
			continue
		}
		epBase := base + "__" + ep.Addr().String() + "/" + strconv.Itoa(int(ep.Port()))
		n := endpointNames{chain: objectName(endpointPrefix, epBase)}
		rules := []rule{{kind: markFrom, prefix: netip.PrefixFrom(ep.Addr(), 32)}}
		if svc.Affinity > 0 {
			n.set = objectName(affinityPrefix, epBase)
			p.sets[n.set] = svc.Affinity
			rules = append(rules, rule{kind: remember, set: n.set})
		}
		names[ep] = n
		p.chains[n.chain] = append(rules, rule{kind: dnat, to: ep})
	}

	p.elements[element{set: clusterIPsSet, ip: svc.ClusterIP}] = verdict{}
	clusterIPPort := element{set: serviceIPsMap, ip: svc.ClusterIP, port: port.Port}
	if len(eps) > 0 {
		var lead []rule
		if p.podCIDR.IsValid() {
			lead = []rule{{kind: markOutside, prefix: p.podCIDR}}
		}
		chain := objectName(servicePrefix, base)
		p.chains[chain] = dispatch(lead, eps, names)
		p.elements[clusterIPPort] = verdict{chain: chain}
	} else {
		clusterIPPort.set = noEndpointServicesMap
		p.elements[clusterIPPort] = verdict{chain: rejectChain}
		if port.NoEndpoints == Drop {
			p.elements[clusterIPPort] = verdict{drop: true}
		}
	}

	if port.NodePort == 0 {
		return nil
	}
	nodePort := element{set: serviceNodePortsMap, port: port.NodePort}
	if len(nodeEps) == 0 {
		nodePort.set = noEndpointNodePortsMap
		p.elements[nodePort] = verdict{chain: rejectChain}
		return nil
	}
	chain := objectName(externalPrefix, base)
	if sameEndpoints(eps, nodeEps) {
		// As kube-proxy's external chain for externalTrafficPolicy
		// Cluster: the ClusterIP's chain picks among the same endpoints.
		p.chains[chain] = []rule{{kind: markAll}, {kind: goTo, chains: []string{objectName(servicePrefix, base)}}}
	} else {
		p.chains[chain] = dispatch([]rule{{kind: markAll}}, nodeEps, names)
	}
	p.elements[nodePort] = verdict{chain: chain}
	return nil
}

// sameEndpoints reports whether a and b, each without repeats, hold the
// same endpoints.
func sameEndpoints(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	inA := make(map[netip.AddrPort]bool, len(a))
	for _, ep := range a {
		inA[ep] = true
	}
	return !slices.ContainsFunc(b, func(ep netip.AddrPort) bool { return !inA[ep] })
}

// dispatch returns the rules of a chain that sends a connection to one of
// eps: lead, then a rule per endpoint for a client it is remembered for
// (with affinity), then a random pick; to a single endpoint, a goto its
// chain, without a map (kube-proxy, since kubernetes/kubernetes#140723,
// DNATs to the only endpoint of a Service without affinity in the service
// chain itself).
//
// After a random pick comes a goto the first endpoint, which no packet
// reaches but one that a transaction overtakes: the kernel reads a chain's
// rules at the generation the packet began with, and a set's elements at
// the current one, so that a packet between the two finds none in the
// pick's map, which the transaction deleted with its rule, and would leave
// the chain without a DNAT, for cluster-ips-check to reject (one connect
// in about 90,000, with the endpoints changing every 5 ms). The goto sends
// it where its generation's rules would have.
func dispatch(lead []rule, eps []netip.AddrPort, names map[netip.AddrPort]endpointNames) []rule {
	rules := lead
	chains := make([]string, len(eps))
	for i, ep := range eps {
		n := names[ep]
		chains[i] = n.chain
		if n.set != "" {
			rules = append(rules, rule{kind: stick, set: n.set, chains: []string{n.chain}})
		}
	}
	if len(chains) == 1 {
		return append(rules, rule{kind: goTo, chains: chains})
	}
	return append(rules, rule{kind: spread, chains: chains}, rule{kind: goTo, chains: chains[:1]})
}

// distinct returns eps without repeats, in their order, or an error for
// an endpoint the table can't route to.
func distinct(eps []netip.AddrPort) ([]netip.AddrPort, error) {
	out := make([]netip.AddrPort, 0, len(eps))
	seen := make(map[netip.AddrPort]bool, len(eps))
	for _, ep := range eps {
		if !ep.Addr().Is4() || ep.Port() == 0 {
			return nil, fmt.Errorf("endpoint %s: want an IPv4 address and a port", ep)
		}
		if !seen[ep] {
			seen[ep] = true
			out = append(out, ep)
		}
	}
	return out, nil
}

// maxNameLen is the longest name the kernel takes for a chain or a set
// (NFT_NAME_MAXLEN, less its NUL).
const maxNameLen = 255

// objectName returns the name of a per-Service chain or set, as kube-proxy
// makes it (servicePortChainNameBase, hashAndTruncate): prefix, eight
// characters of base's hash, which keep the name unique if it must be cut
// and tell apart names that differ in a digit, a dash, and base, cut to
// the kernel's limit.
func objectName(prefix, base string) string {
	sum := sha256.Sum256([]byte(base))
	// Base32 turns each 5 bytes into 8 characters.
	name := prefix + base32.StdEncoding.EncodeToString(sum[:5]) + "-" + base
	if len(name) > maxNameLen {
		name = name[:maxNameLen-3] + "..."
	}
	return name
}
