package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/proxyrules"
)

// ProxyConfig configures a [Proxy]. The zero value is a proxy of node
// "node" that applies every change as soon as it is given.
type ProxyConfig struct {
	// NodeName is the node whose routing view it is; "node" if empty. With
	// internalTrafficPolicy Local, it picks the endpoints whose nodeName
	// it is.
	NodeName string
	// MinPropagationDelay and MaxPropagationDelay bound the delay from a
	// call of Publish to the change in the view, chosen uniformly for each
	// change; equal values give a fixed delay, and zero none. (A
	// [Cluster] gives its proxies cluster.DefaultMinPropagationDelay and
	// cluster.DefaultMaxPropagationDelay unless told otherwise.)
	MinPropagationDelay, MaxPropagationDelay time.Duration
	// Clock times the delays and stamps events; the real clock if nil.
	Clock clock.Clock
	// Recorder receives an EndpointsApplied event for each change; events
	// are dropped if nil.
	Recorder cluster.Recorder
	// Dial makes the connections of DialContext, from the node's client:
	// a net.Dialer's if nil.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Rules, if not nil, are the node's Service rules in the kernel, as
	// kube-proxy's nftables mode writes them: each change of the view is
	// written there, and DialContext dials a Service's cluster IP, whose
	// rules pick the endpoint (see DialContext).
	Rules *proxyrules.Rules
	// Backend, with Rules, returns where the node's rules sent a
	// connection from an address to a cluster IP (conntrack's reply
	// tuple), so that DialContext can say which endpoint a connection, or
	// a failed connect, reached.
	Backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool)
}

// Proxy is one node's routing view of Services, like that node's
// kube-proxy in iptables mode: endpoint changes reach it after a
// propagation delay, and DialContext picks an endpoint per new connection
// from what it has (E6–E10). It takes Services and EndpointSlices as
// k8s.io/api objects and knows nothing of the controllers that make them.
// It is safe for concurrent use.
type Proxy struct {
	cfg    ProxyConfig
	clock  clock.Clock
	queue  *delayQueue
	client podnet.Sandbox // the client NewNodeProxy made, if it did

	rulesMu  sync.Mutex // held while the view is written into Rules
	mu       sync.Mutex
	view     map[string]*routes // by namespace/name
	randSrc  *rand.Rand
	affinity map[affinityKey]affinity
}

// routes is a Service and its endpoints, as a node's rules hold them.
type routes struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
}

// affinityKey names a client of a Service port, as the iptables recent
// lists of sessionAffinity ClientIP do: by source address.
type affinityKey struct {
	service string // namespace/name
	port    int32
	client  string
}

// affinity is the endpoint a client used last, and when.
type affinity struct {
	endpoint endpointPort
	at       time.Time
}

// endpointPort is an endpoint's address and target port; pick joins the
// two only for the endpoint it chooses.
type endpointPort struct {
	addr string
	port int32
}

// NewProxy returns a proxy configured by cfg and starts applying the
// changes it is given; Close stops it.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.NodeName == "" {
		cfg.NodeName = "node"
	}
	if cfg.MinPropagationDelay < 0 || cfg.MaxPropagationDelay < cfg.MinPropagationDelay {
		return nil, fmt.Errorf("propagation delay range %s–%s is not a range of non-negative durations", cfg.MinPropagationDelay, cfg.MaxPropagationDelay)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	return &Proxy{cfg: cfg, clock: cfg.Clock, queue: newDelayQueue(cfg.Clock),
		view: map[string]*routes{}, affinity: map[affinityKey]affinity{},
		randSrc: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
}

// Close stops applying changes; changes still in flight are dropped. The
// view stays as it is, and dialing goes on working, except for a proxy of
// NewNodeProxy, whose rules and client go with it.
func (p *Proxy) Close() {
	p.queue.close()
	if p.client == nil {
		return
	}
	p.rulesMu.Lock()
	defer p.rulesMu.Unlock()
	if p.cfg.Rules != nil {
		p.cfg.Rules.Close()
	}
	p.client.Close()
}

// Publish hands the proxy the current EndpointSlices of svc. The view
// changes after the propagation delay; changes apply in the order
// published.
func (p *Proxy) Publish(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	p.mu.Lock()
	delay := p.delayLocked()
	p.mu.Unlock()
	p.queue.push(delay, func() { p.Load(svc, slices) })
}

// Load sets the view of svc to slices at once, without the propagation
// delay: the state a node's rules start from, as kube-proxy writes its
// first rules from what its informers listed. A change that Publish has
// queued for svc still applies after it; call Load before publishing svc.
// Like every change of the view, it records an EndpointsApplied event.
func (p *Proxy) Load(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	key := svc.Namespace + "/" + svc.Name
	p.mu.Lock()
	p.view[key] = &routes{svc: svc, slices: slices}
	err := p.writeRulesLocked()
	if p.cfg.Recorder != nil {
		e := cluster.Event{Time: p.clock.Now(), Kind: cluster.EndpointsApplied, Node: p.cfg.NodeName,
			Object: "Service/" + key, Endpoints: cluster.Endpoints{List: cluster.EndpointsOf(slices...), NodeLocal: nodeLocal(svc)}}
		if err != nil {
			e.Fields = map[string]string{"error": err.Error()}
		}
		p.cfg.Recorder.Record(e)
	}
}

// Remove takes the Service namespace/name out of the view after the
// propagation delay, in order with the changes published before it: its
// rules go, and dialing it fails as for a Service that never existed.
// It records no event.
func (p *Proxy) Remove(namespace, name string) {
	p.mu.Lock()
	delay := p.delayLocked()
	p.mu.Unlock()
	key := namespace + "/" + name
	p.queue.push(delay, func() {
		p.mu.Lock()
		delete(p.view, key)
		// Its recent lists of sessionAffinity ClientIP go with its rules.
		for a := range p.affinity {
			if a.service == key {
				delete(p.affinity, a)
			}
		}
		// A removal records no event; one the kernel refuses leaves the
		// Service's rules until a later change is written whole.
		_ = p.writeRulesLocked()
	})
}

// delayLocked draws the propagation delay of one change.
func (p *Proxy) delayLocked() time.Duration {
	delay := p.cfg.MinPropagationDelay
	if spread := p.cfg.MaxPropagationDelay - p.cfg.MinPropagationDelay; spread > 0 {
		delay += time.Duration(p.randSrc.Int64N(int64(spread)))
	}
	return delay
}

// DialContext connects to a Service through this node's view, as a client
// on the node would through iptables DNAT (E6, E8–E10). address is
// "name.namespace:port", optionally followed by ".svc" or
// ".svc.cluster.local" before the port, where port is one of the Service's
// ports; network must be "tcp".
//
// Each connection goes to an endpoint chosen uniformly at random among the
// Ready ones; when none is Ready, among the serving and terminating ones.
// With internalTrafficPolicy Local, only endpoints on this node count.
// Topology hints are not read: every Ready endpoint is a candidate. When
// no endpoint is usable anywhere, the connection is refused (an error
// that wraps syscall.ECONNREFUSED), as kube-proxy's REJECT rule refuses
// it. When some are usable but, with internalTrafficPolicy Local, none on
// this node, kube-proxy's DROP rule swallows the connection attempt: the
// dial blocks until ctx ends, with an error that wraps ctx.Err() (a
// connect timeout for a ctx with a deadline), or, without one, until the
// kernel gives up the connect (an error that wraps syscall.ETIMEDOUT).
//
// With sessionAffinity ClientIP, a client goes to the endpoint it used
// last, while that endpoint is usable and for the Service's
// sessionAffinityConfig timeout since its last new connection. The client
// is the source address; every connection DialContext makes comes from the
// node itself, so they all count as one client and all stick to one
// endpoint.
//
// The connection is then a plain TCP connection to the pod: later changes
// of the view never move it, as conntrack keeps a flow on its backend. An
// unknown Service fails as a DNS lookup would.
//
// With Rules, the routing is the kernel's: DialContext connects to the
// Service's cluster IP through Dial, and the node's rules pick the
// endpoint as described, and keep the connection on it (conntrack); a
// dropped connection times out by the kernel's own clock. address may then
// also be the cluster IP and port itself, as pods given the Service's
// variables dial it.
func (p *Proxy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if p.cfg.Rules != nil {
		return p.dialClusterIP(ctx, network, address)
	}
	return p.dial(ctx, network, address, nodeClient, false)
}

// nodeClient is the client address of connections made on the node.
const nodeClient = "127.0.0.1"

// dropTimeout is how long a connect whose SYNs are dropped waits before the
// kernel gives up: 127 s, with Linux's default of 6 SYN retransmissions
// from a 1 s timeout, doubled each time (Documentation/networking/ip-sysctl.rst,
// tcp_syn_retries).
const dropTimeout = 127 * time.Second

// dial is DialContext for a connection from client's address; nodePort
// routes it as a connection to one of the Service's node ports (see
// ServeNodePort).
func (p *Proxy) dial(ctx context.Context, network, address, client string, nodePort bool) (net.Conn, error) {
	if network != "tcp" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("port %q: %w", portText, err)}
	}
	name, namespace, err := serviceHost(host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	target, err := p.pick(namespace, name, int32(port), client, nodePort)
	if errors.Is(err, errDropped) {
		t := p.clock.NewTimer(dropTimeout)
		defer t.Stop()
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C():
			err = os.NewSyscallError("connect", syscall.ETIMEDOUT)
		}
	}
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	return p.cfg.Dial(ctx, network, target)
}

// errNoEndpoints is what a REJECT rule makes the client see.
var errNoEndpoints = os.NewSyscallError("connect", syscall.ECONNREFUSED)

// errDropped is a connection that a DROP rule swallows.
var errDropped = errors.New("dropped: no local endpoints")

// pick chooses the endpoint address of a new connection from client to
// port of Service namespace/name (E6, E8, E9; k8s.io/kubernetes
// pkg/proxy/topology.go, CategorizeEndpoints, and
// pkg/proxy/iptables/proxier.go, syncProxyRules and
// writeServiceToEndpointRules). nodePort picks as for a connection from
// the node to a node port: among the endpoints of every node, whatever
// the Service's internalTrafficPolicy (ServeNodePort).
func (p *Proxy) pick(namespace, name string, port int32, client string, nodePort bool) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.view[namespace+"/"+name]
	if r == nil {
		return "", errNoSuchService(name, namespace)
	}
	var sp *corev1.ServicePort
	for i := range r.svc.Spec.Ports {
		if q := &r.svc.Spec.Ports[i]; q.Port == port && (q.Protocol == "" || q.Protocol == corev1.ProtocolTCP) {
			sp = q
			break
		}
	}
	if sp == nil {
		// No rule matches the port: nothing answers there.
		return "", errNoEndpoints
	}
	usable, dropped := p.routeLocked(r, sp.Name, nodePort)
	switch {
	case dropped:
		return "", errDropped
	case len(usable) == 0:
		return "", errNoEndpoints
	}
	if r.svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return usable[p.randSrc.IntN(len(usable))].hostPort(), nil
	}
	// The recent match: the endpoint the client used last, if it is
	// still usable and the client made a connection within the timeout;
	// each connection restarts the timeout.
	timeout := affinityTimeout(r.svc)
	key := affinityKey{service: namespace + "/" + name, port: port, client: client}
	now := p.clock.Now()
	a, ok := p.affinity[key]
	if !ok || now.Sub(a.at) > timeout || !slices.Contains(usable, a.endpoint) {
		a.endpoint = usable[p.randSrc.IntN(len(usable))]
	}
	a.at = now
	p.affinity[key] = a
	return a.endpoint.hostPort(), nil
}

// routeLocked returns the endpoints that new connections to Service port
// portName of r may go to from this node, each with the port its slice
// gives portName, or dropped when, with internalTrafficPolicy Local, only
// other nodes have any; nodePort routes as for a connection to the port's
// node port (see pick).
func (p *Proxy) routeLocked(r *routes, portName string, nodePort bool) (usable []endpointPort, dropped bool) {
	view := cluster.Endpoints{NodeLocal: !nodePort && nodeLocal(r.svc)}
	var targets []int32
	for _, s := range r.slices {
		var target int32
		for _, sp := range s.Ports {
			if sp.Name != nil && *sp.Name == portName && sp.Port != nil {
				target = *sp.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range cluster.EndpointsOf(s) {
			view.List = append(view.List, ep)
			targets = append(targets, target)
		}
	}
	to, dropped := view.Route(p.cfg.NodeName)
	for _, j := range to {
		usable = append(usable, endpointPort{addr: view.List[j].Address, port: targets[j]})
	}
	return usable, dropped
}

// affinityTimeout returns svc's sessionAffinity ClientIP timeout.
func affinityTimeout(svc *corev1.Service) time.Duration {
	if cfg := svc.Spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
		return time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
	}
	return cluster.DefaultSessionAffinityTimeout
}

// nodeLocal reports whether svc's internalTrafficPolicy is Local.
func nodeLocal(svc *corev1.Service) bool {
	p := svc.Spec.InternalTrafficPolicy
	return p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal
}

// hostPort returns e as a dial address, "host:port".
func (e endpointPort) hostPort() string {
	return net.JoinHostPort(e.addr, strconv.Itoa(int(e.port)))
}

// serviceHost splits host as SplitServiceHost does, or returns the error
// that a lookup of a name that is no Service's gives.
func serviceHost(host string) (name, namespace string, err error) {
	name, namespace, ok := SplitServiceHost(host)
	if !ok {
		return "", "", &net.DNSError{Err: "not a Service name (name.namespace)", Name: host, IsNotFound: true}
	}
	return name, namespace, nil
}

// LookupHost returns the addresses that the cluster's DNS gives a client
// on the node for host, a headless Service's name (name.namespace[.svc…]):
// the addresses of its ready endpoints, as the view has them, as CoreDNS
// answers from the same EndpointSlices. The error of a host that is not
// a headless Service in the view is a *net.DNSError; for a Service with a
// cluster IP, the routing view dials its name (DialContext).
func (p *Proxy) LookupHost(host string) ([]netip.Addr, error) {
	name, namespace, err := serviceHost(host)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.view[namespace+"/"+name]
	switch {
	case r == nil:
		return nil, errNoSuchService(name, namespace)
	case r.svc.Spec.ClusterIP != corev1.ClusterIPNone:
		return nil, &net.DNSError{Err: "not a headless Service: dial its name", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, ep := range cluster.EndpointsOf(r.slices...) {
		if addr, err := netip.ParseAddr(ep.Address); err == nil && ep.Ready && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	return out, nil
}

// errNoSuchService is the lookup error of a Service the view does not
// have.
func errNoSuchService(name, namespace string) error {
	return &net.DNSError{Err: "no such Service", Name: name + "." + namespace, IsNotFound: true}
}

// SplitServiceHost splits host, a Service's name as a client in the
// cluster writes it, name.namespace, optionally followed by ".svc" or
// ".svc.cluster.local" (and a final dot), into name and namespace. ok is
// false for any other host: an IP address, or a name of more labels.
func SplitServiceHost(host string) (name, namespace string, ok bool) {
	host = strings.TrimSuffix(strings.TrimSuffix(host, "."), ".cluster.local")
	host = strings.TrimSuffix(host, ".svc")
	name, namespace, ok = strings.Cut(host, ".")
	return name, namespace, ok && name != "" && namespace != "" && !strings.Contains(namespace, ".")
}

// Serve accepts connections on ln and forwards each to the Service at
// address ("name.namespace:port") through this node's view, one new
// backend connection per accepted one, so that clients outside the
// cluster (curl, k6, a browser) can reach it. It returns when ctx ends,
// after closing ln and every forwarded connection, or when ln fails.
//
// A userspace proxy differs from iptables DNAT in one way that clients
// see: the client's connection is accepted before a backend is chosen, so
// a refused backend (no endpoints, or a pod that no longer listens) shows
// up as a reset of an accepted connection, not as a refused connect, and a
// dropped one (internalTrafficPolicy Local with no endpoint on the node)
// as an accepted connection that never answers. Without Rules, the
// client's address is its source for sessionAffinity ClientIP; with
// Rules, each connection is dialled anew through DialContext, from the
// node's client. The forwarded connection ends
// when either side closes; a half-close is passed on.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, address string) error {
	return p.serve(ctx, ln, address, false)
}

// ServeNodePort is Serve for a listener on one of the Service's node
// ports, on the node, where address names the Service port whose node
// port it is: each connection comes from a client on the node to a node
// port, and kube-proxy sends those to the Service's endpoints on every
// node, whatever its internalTrafficPolicy (which is for its cluster IP
// only) and its externalTrafficPolicy (whose Local, for a client on the
// node, is short-circuited to the endpoints of every node). So it picks
// as DialContext does without internalTrafficPolicy Local, and a Service
// without a usable endpoint refuses (k8s.io/kubernetes
// pkg/proxy/iptables/proxier.go and pkg/proxy/nftables/proxier.go,
// syncProxyRules: a node port jumps to the external traffic chain, whose
// rules for a source of type LOCAL go to the Cluster policy chain;
// pkg/proxy/serviceport.go, UsesClusterEndpoints).
func (p *Proxy) ServeNodePort(ctx context.Context, ln net.Listener, address string) error {
	return p.serve(ctx, ln, address, true)
}

// serve is Serve, or ServeNodePort if nodePort.
func (p *Proxy) serve(ctx context.Context, ln net.Listener, address string, nodePort bool) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// One connection per round; the loop ends when ln is closed.
	for {
		client, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("serve Service %s: %w", address, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.forward(ctx, client, address, nodePort)
		}()
	}
}

// tcpConn is a TCP connection: a *net.TCPConn, or a natConn.
type tcpConn interface {
	net.Conn
	SetLinger(sec int) error
	CloseWrite() error
}

// forward carries one client connection to a backend of the Service; the
// client's address is its source for session affinity.
func (p *Proxy) forward(ctx context.Context, client net.Conn, address string, nodePort bool) {
	defer client.Close()
	source, _, _ := net.SplitHostPort(client.RemoteAddr().String())
	var backend net.Conn
	var err error
	if p.cfg.Rules != nil && !nodePort {
		backend, err = p.dialClusterIP(ctx, "tcp", address)
	} else {
		backend, err = p.dial(ctx, "tcp", address, source, nodePort)
	}
	if err != nil {
		// Reset the accepted connection, the nearest a userspace proxy
		// comes to a refused connect.
		if tc, ok := client.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		return
	}
	Relay(ctx, client, backend)
}

// Relay carries the bytes of two TCP connections, a and b, each way until
// both sides have closed or ctx ends, and closes both: a half-close is
// passed on as a half-close, and a reset as a reset.
func Relay(ctx context.Context, a, b net.Conn) {
	defer a.Close()
	defer b.Close()
	stop := context.AfterFunc(ctx, func() {
		a.Close()
		b.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		tc, _ := dst.(tcpConn)
		if _, err := io.Copy(dst, src); err != nil && tc != nil {
			// A reset on one side is passed on as a reset.
			tc.SetLinger(0)
			tc.Close()
			return
		}
		if tc != nil {
			tc.CloseWrite()
		}
	}
	go pipe(b, a)
	go pipe(a, b)
	<-done
	<-done
}
