package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/proxyrules"
)

// NewNodeProxy returns the routing view of node n of a cluster whose pods
// take their addresses from podCIDR, configured by cfg but for its Dial,
// Rules and Backend: it dials from a client pod of its own on n, and where
// n is a node of a network of namespaces (a *podnet.NetnsNode), it writes
// each change into n's kernel, as kube-proxy's nftables mode does, and
// tells which endpoint a connection reached from conntrack. Close also
// removes the rules and the client; dialing fails after it.
func NewNodeProxy(cfg ProxyConfig, n podnet.Node, podCIDR netip.Prefix) (*Proxy, error) {
	client, err := n.NewSandbox()
	if err != nil {
		return nil, fmt.Errorf("%s: client: %w", cfg.NodeName, err)
	}
	cfg.Dial, cfg.Rules, cfg.Backend = client.DialContext, nil, nil
	if nn, ok := n.(*podnet.NetnsNode); ok {
		if cfg.Rules, err = proxyrules.New(proxyrules.Config{NetNS: nn.Netns().FD(), PodCIDR: podCIDR}); err != nil {
			client.Close()
			return nil, fmt.Errorf("%s: %w", cfg.NodeName, err)
		}
		cfg.Backend = nn.Backend
	}
	p, err := NewProxy(cfg)
	if err != nil {
		if cfg.Rules != nil {
			cfg.Rules.Close()
		}
		client.Close()
		return nil, err
	}
	p.client = client
	return p, nil
}

// writeRulesLocked writes the whole view into the node's kernel rules, if
// it has any, and returns the kernel's error. It is called with p.mu held,
// and releases it: the view is read under p.mu, and written under
// p.rulesMu, which it takes before it lets p.mu go, so that views reach the
// kernel in the order they were made while dials go on.
func (p *Proxy) writeRulesLocked() error {
	if p.cfg.Rules == nil {
		p.mu.Unlock()
		return nil
	}
	var services []proxyrules.Service
	for _, r := range sortedValues(p.view) {
		ip, err := netip.ParseAddr(r.svc.Spec.ClusterIP)
		if err != nil {
			continue // headless, or no cluster IP: no rules
		}
		svc := proxyrules.Service{Namespace: r.svc.Namespace, Name: r.svc.Name, ClusterIP: ip}
		if r.svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			svc.Affinity = affinityTimeout(r.svc)
		}
		for _, sp := range r.svc.Spec.Ports {
			if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			usable, dropped := p.routeLocked(r, sp.Name, false)
			port := proxyrules.Port{Name: sp.Name, Port: uint16(sp.Port), NodePort: uint16(sp.NodePort), Endpoints: addrPorts(usable)}
			if dropped {
				port.NoEndpoints = proxyrules.Drop
			}
			if sp.NodePort != 0 {
				all, _ := p.routeLocked(r, sp.Name, true)
				port.NodePortEndpoints = addrPorts(all)
			}
			svc.Ports = append(svc.Ports, port)
		}
		services = append(services, svc)
	}
	p.rulesMu.Lock()
	defer p.rulesMu.Unlock()
	p.mu.Unlock()
	return p.cfg.Rules.Sync(services)
}

// addrPorts returns endpoints as addresses and ports, leaving out any
// whose address is not an IP address.
func addrPorts(endpoints []endpointPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, e := range endpoints {
		if ip, err := netip.ParseAddr(e.addr); err == nil {
			out = append(out, netip.AddrPortFrom(ip, uint16(e.port)))
		}
	}
	return out
}

// dialClusterIP is DialContext through the kernel's rules: it resolves a
// Service's name to its cluster IP, as a cluster's DNS would, and dials it
// through p.cfg.Dial, tracked by p.cfg.Backend (DialTracked).
func (p *Proxy) dialClusterIP(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if _, err := netip.ParseAddr(host); err != nil {
		name, namespace, err := serviceHost(host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		p.mu.Lock()
		r := p.view[namespace+"/"+name]
		p.mu.Unlock()
		if r == nil || r.svc.Spec.ClusterIP == "" || r.svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errNoSuchService(name, namespace)}
		}
		host = r.svc.Spec.ClusterIP
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	return DialTracked(ctx, p.cfg.Dial, p.cfg.Backend, network, net.JoinHostPort(host, port))
}

// DialTracked connects to address, a cluster IP and port, through dial,
// and returns the connection with the endpoint the rules sent it to as its
// RemoteAddr, or a failed connect's error with that endpoint as its
// *net.OpError's Addr, where backend (a podnet.Tracker's Backend, or nil)
// tells: what a client in a pod never sees, and what tells which pod
// refused or never answered.
func DialTracked(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error),
	backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool), network, address string) (net.Conn, error) {
	tried := time.Now()
	conn, err := dial(ctx, network, address)
	if backend == nil {
		return conn, err
	}
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			if b, ok := backendOf(backend, oe.Source, oe.Addr, tried); ok {
				oe.Addr = b
			}
		}
		return nil, err
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return conn, nil
	}
	return &natConn{TCPConn: tc, backend: backend, since: tried}, nil
}

// backendOf returns the endpoint that backend says the rules sent a
// connection from src to dst, tried at since, to.
func backendOf(backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool), src, dst net.Addr, since time.Time) (*net.TCPAddr, bool) {
	from, ok1 := src.(*net.TCPAddr)
	to, ok2 := dst.(*net.TCPAddr)
	if !ok1 || !ok2 || from == nil || to == nil {
		return nil, false
	}
	b, ok := backend(from.AddrPort(), to.AddrPort(), since)
	if !ok {
		return nil, false
	}
	return net.TCPAddrFromAddrPort(b), true
}

// natConn is a connection to a cluster IP whose RemoteAddr is the endpoint
// the node's rules sent it to, asked of backend at the first call: by then
// the event of the connection's start has usually been read, which spares
// the connect a query of the kernel's table.
type natConn struct {
	*net.TCPConn
	backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool)
	since   time.Time

	once   sync.Once
	remote net.Addr
}

// RemoteAddr returns the endpoint the connection reached, or the address it
// was made to if backend does not know it.
func (c *natConn) RemoteAddr() net.Addr {
	c.once.Do(func() {
		c.remote = c.TCPConn.RemoteAddr()
		if b, ok := backendOf(c.backend, c.LocalAddr(), c.remote, c.since); ok {
			c.remote = b
		}
	})
	return c.remote
}
