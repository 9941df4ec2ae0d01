package local

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// The default range of the delay from an endpoint change to its arrival in
// a node's routing view. Upstream gives no number (spec E11); seed 001
// measured the last request to a deleted pod 0.02 to 1.03 s after its
// deletion, which this range reproduces.
const (
	DefaultMinPropagationDelay = 100 * time.Millisecond
	DefaultMaxPropagationDelay = time.Second
)

// ProxyConfig configures a [Proxy]. The zero value is a proxy of node
// "node" with the default propagation delay.
type ProxyConfig struct {
	// NodeName is the node whose routing view it is; "node" if empty.
	NodeName string
	// MinPropagationDelay and MaxPropagationDelay bound the delay from a
	// call of Publish to the change in the view, chosen uniformly for each
	// change. Both zero means DefaultMinPropagationDelay and
	// DefaultMaxPropagationDelay; equal values give a fixed delay.
	MinPropagationDelay, MaxPropagationDelay time.Duration
	// Clock times the delays and stamps events; the real clock if nil.
	Clock clock.Clock
	// Recorder receives an EndpointsApplied event for each change; events
	// are dropped if nil.
	Recorder cluster.Recorder
}

// Proxy is one node's routing view of Services, like that node's
// kube-proxy in iptables mode: endpoint changes reach it after a
// propagation delay, and DialContext picks an endpoint per new connection
// from what it has (spec E6–E10). It takes Services and EndpointSlices as
// k8s.io/api objects and knows nothing of the controllers that make them.
// It is safe for concurrent use.
type Proxy struct {
	cfg   ProxyConfig
	clock clock.Clock
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	mu      sync.Mutex
	view    map[string]*routes // by namespace/name
	queue   []pending
	lastAt  time.Time     // when the latest queued change applies
	wake    chan struct{} // a change was queued
	randSrc *rand.Rand
}

// routes is a Service and its endpoints, as a node's rules hold them.
type routes struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
}

type pending struct {
	at     time.Time
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
}

// NewProxy returns a proxy configured by cfg and starts applying the
// changes it is given; Close stops it.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.NodeName == "" {
		cfg.NodeName = "node"
	}
	if cfg.MinPropagationDelay == 0 && cfg.MaxPropagationDelay == 0 {
		cfg.MinPropagationDelay, cfg.MaxPropagationDelay = DefaultMinPropagationDelay, DefaultMaxPropagationDelay
	}
	if cfg.MinPropagationDelay < 0 || cfg.MaxPropagationDelay < cfg.MinPropagationDelay {
		return nil, fmt.Errorf("propagation delay range %s–%s is not a range of non-negative durations", cfg.MinPropagationDelay, cfg.MaxPropagationDelay)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, clock: cfg.Clock, ctx: ctx, stop: stop, done: make(chan struct{}),
		view: map[string]*routes{}, wake: make(chan struct{}, 1),
		randSrc: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	go p.apply()
	return p, nil
}

// Close stops applying changes; changes still in flight are dropped. The
// view stays as it is, and dialing goes on working.
func (p *Proxy) Close() {
	p.stop()
	<-p.done
}

// Publish hands the proxy the current EndpointSlices of svc. The view
// changes after the propagation delay; changes apply in the order
// published.
func (p *Proxy) Publish(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delay := p.cfg.MinPropagationDelay
	if spread := p.cfg.MaxPropagationDelay - p.cfg.MinPropagationDelay; spread > 0 {
		delay += time.Duration(p.randSrc.Int64N(int64(spread)))
	}
	// A later change never overtakes an earlier one.
	at := p.clock.Now().Add(delay)
	if at.Before(p.lastAt) {
		at = p.lastAt
	}
	p.lastAt = at
	p.queue = append(p.queue, pending{at: at, svc: svc, slices: slices})
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// apply applies queued changes when their time comes, until Close.
func (p *Proxy) apply() {
	defer close(p.done)
	// Each round applies what is due or waits for the next change; the
	// loop ends with Close.
	for {
		p.mu.Lock()
		var wait time.Duration = -1
		now := p.clock.Now()
		var due []pending
		for len(p.queue) > 0 && !p.queue[0].at.After(now) {
			due = append(due, p.queue[0])
			p.queue = p.queue[1:]
		}
		for _, c := range due {
			p.view[c.svc.Namespace+"/"+c.svc.Name] = &routes{svc: c.svc, slices: c.slices}
		}
		if len(p.queue) > 0 {
			wait = p.queue[0].at.Sub(now)
		}
		p.mu.Unlock()
		for _, c := range due {
			if p.cfg.Recorder != nil {
				p.cfg.Recorder.Record(cluster.Event{Time: p.clock.Now(), Kind: cluster.EndpointsApplied, Node: p.cfg.NodeName,
					Object: "Service/" + c.svc.Namespace + "/" + c.svc.Name, Fields: map[string]string{"endpoints": describeSlices(c.slices)}})
			}
		}
		var timer clock.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = p.clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-p.ctx.Done():
		case <-p.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if p.ctx.Err() != nil {
			return
		}
	}
}

// DialContext connects to a Service through this node's view, as a client
// on the node would through iptables DNAT (spec E6, E8–E10). address is
// "name.namespace:port", optionally followed by ".svc" or
// ".svc.cluster.local" before the port, where port is one of the Service's
// ports; network must be "tcp".
//
// Each connection goes to an endpoint chosen uniformly at random among the
// Ready ones; when none is Ready, among the serving and terminating ones;
// when there are none of either, the connection is refused (an error that
// wraps syscall.ECONNREFUSED), as kube-proxy's REJECT rule refuses it. The
// connection is then a plain TCP connection to the pod: later changes of
// the view never move it, as conntrack keeps a flow on its backend. An
// unknown Service fails as a DNS lookup would.
func (p *Proxy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
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
	name, namespace, ok := serviceName(host)
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "not a Service name (name.namespace)", Name: host, IsNotFound: true}}
	}
	target, err := p.pick(namespace, name, int32(port))
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

// errNoEndpoints is what a REJECT rule makes the client see.
var errNoEndpoints = os.NewSyscallError("connect", syscall.ECONNREFUSED)

// pick chooses the endpoint address of a new connection to port of
// Service namespace/name.
func (p *Proxy) pick(namespace, name string, port int32) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.view[namespace+"/"+name]
	if r == nil {
		return "", &net.DNSError{Err: "no such Service", Name: name + "." + namespace, IsNotFound: true}
	}
	var portName string
	found := false
	for _, sp := range r.svc.Spec.Ports {
		if sp.Port == port && (sp.Protocol == "" || sp.Protocol == corev1.ProtocolTCP) {
			portName, found = sp.Name, true
			break
		}
	}
	if !found {
		// No rule matches the port: nothing answers there.
		return "", errNoEndpoints
	}
	// CategorizeEndpoints for the Cluster policy, without topology hints
	// (E6).
	var ready, terminating []string
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
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(target)))
			c := ep.Conditions
			switch {
			case c.Ready == nil || *c.Ready:
				ready = append(ready, addr)
			case (c.Serving == nil || *c.Serving) && c.Terminating != nil && *c.Terminating:
				terminating = append(terminating, addr)
			}
		}
	}
	usable := ready
	if len(usable) == 0 {
		usable = terminating
	}
	if len(usable) == 0 {
		return "", errNoEndpoints
	}
	return usable[p.randSrc.IntN(len(usable))], nil
}

// serviceName splits a Service host name into name and namespace.
func serviceName(host string) (name, namespace string, ok bool) {
	host = strings.TrimSuffix(strings.TrimSuffix(host, "."), ".cluster.local")
	host = strings.TrimSuffix(host, ".svc")
	name, namespace, ok = strings.Cut(host, ".")
	return name, namespace, ok && name != "" && namespace != "" && !strings.Contains(namespace, ".")
}

// describeSlices renders endpoints for events: ip=ready/serving/terminating
// for each, as 1 or 0.
func describeSlices(slices []*discoveryv1.EndpointSlice) string {
	var parts []string
	flag := func(b *bool, def bool) string {
		if (b == nil && def) || (b != nil && *b) {
			return "1"
		}
		return "0"
	}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			c := ep.Conditions
			parts = append(parts, ep.Addresses[0]+"="+flag(c.Ready, true)+"/"+flag(c.Serving, true)+"/"+flag(c.Terminating, false))
		}
	}
	return strings.Join(parts, ",")
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
// up as a reset of an accepted connection, not as a refused connect. The
// forwarded connection ends when either side closes; a half-close is
// passed on.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, address string) error {
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
			p.forward(ctx, client, address)
		}()
	}
}

// forward carries one client connection to a backend of the Service.
func (p *Proxy) forward(ctx context.Context, client net.Conn, address string) {
	defer client.Close()
	backend, err := p.DialContext(ctx, "tcp", address)
	if err != nil {
		// Reset the accepted connection, the nearest a userspace proxy
		// comes to a refused connect.
		if tc, ok := client.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		return
	}
	defer backend.Close()
	stop := context.AfterFunc(ctx, func() {
		client.Close()
		backend.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		tc, _ := dst.(*net.TCPConn)
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
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}
