package podnet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Defaults of a Network's ranges; each exists only inside the namespaces a
// Network makes.
const (
	// DefaultPodCIDR is the cluster's pod range, as kubeadm's and kind's
	// default: node n's pods take their addresses from its n-th /24.
	DefaultPodCIDR = "10.244.0.0/16"
	// NodeCIDR is the range of the nodes' own addresses on the switch:
	// node n is 10.0.0.n.
	NodeCIDR = "10.0.0.0/24"
)

// MaxNodes is the most nodes a Network has: one /24 of the pod range, and
// one address of NodeCIDR, each.
const MaxNodes = 250

// switchGateway is the switch's own address, the nodes' default route. The
// switch forwards nothing, so that a packet for an address no node routes
// (a ClusterIP without rules) is dropped, as by a network that does not
// know it.
var switchGateway = netip.MustParseAddr("10.0.0.254")

// Interface names. A sandbox's host end is named after its address
// (veth<last byte>), unique on its node's bridge.
const (
	bridgeName = "cbr0"
	switchName = "switch0"
	podIfName  = "eth0"
)

// Config configures a [Network].
type Config struct {
	// Nodes is the number of nodes, from 1 to MaxNodes.
	Nodes int
	// PodCIDR is the cluster's pod range, a /16 or larger;
	// DefaultPodCIDR if zero.
	PodCIDR netip.Prefix
}

// Network is a cluster's network: a switch namespace that joins its nodes'
// namespaces. It is safe for concurrent use.
type Network struct {
	podCIDR netip.Prefix
	fabric  *Netns
	nodes   []*NetnsNode

	closeOnce sync.Once
	closeErr  error
}

// New makes a cluster's network, or returns an error wrapping
// ErrUnsupported where the system allows no network namespaces. Close
// takes it down.
func New(cfg Config) (*Network, error) {
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = netip.MustParsePrefix(DefaultPodCIDR)
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes || !cfg.PodCIDR.Addr().Is4() || cfg.PodCIDR.Bits() > 16 {
		return nil, fmt.Errorf("network of %d nodes in %s: want 1 to %d nodes in an IPv4 /16 or larger", cfg.Nodes, cfg.PodCIDR, MaxNodes)
	}
	nw := &Network{podCIDR: cfg.PodCIDR.Masked()}
	if err := nw.build(cfg.Nodes); err != nil {
		nw.Close()
		return nil, err
	}
	return nw, nil
}

// build makes the switch and the nodes; what it made before an error is
// left for Close.
func (nw *Network) build(nodes int) error {
	var err error
	if nw.fabric, err = NewNetns(); err != nil {
		return err
	}
	h, err := handle(nw.fabric)
	if err != nil {
		return err
	}
	defer h.Close()
	sw := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: switchName}}
	if err := h.LinkAdd(sw); err != nil {
		return fmt.Errorf("switch: add bridge: %w", err)
	}
	if err := up(h, "lo", switchName); err != nil {
		return fmt.Errorf("switch: %w", err)
	}
	if err := h.AddrAdd(sw, addr(netip.PrefixFrom(switchGateway, 24))); err != nil {
		return fmt.Errorf("switch: address: %w", err)
	}
	// A new namespace may take its forwarding from the machine's.
	if err := sysctls(nw.fabric, map[string]string{"net/ipv4/ip_forward": "0"}); err != nil {
		return fmt.Errorf("switch: %w", err)
	}
	for i := 1; i <= nodes; i++ {
		n, err := nw.addNode(h, i)
		if n != nil {
			nw.nodes = append(nw.nodes, n)
		}
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

// bridgeMAC is the hardware address of node i's bridge, locally
// administered. A bridge without an address of its own takes the lowest
// of its ports', and takes another when that port goes: the pods, whose
// neighbour tables still hold the old one for their gateway, then lose
// every packet through the node for seconds, until they ask again. Here
// that was a pod's sandbox deleted in a rollout, and the other pods'
// connects timing out to pods that were serving.
func bridgeMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0, 0, 0, byte(i >> 8), byte(i)}
}

// addNode makes node i: its namespace and bridge, its link to the switch,
// and the routes between it and the nodes before it. sw is a netlink
// handle in the switch's namespace.
func (nw *Network) addNode(sw *netlink.Handle, i int) (*NetnsNode, error) {
	ns, err := NewNetns()
	if err != nil {
		return nil, err
	}
	base := netip.MustParsePrefix(NodeCIDR).Addr().As4()
	n := &NetnsNode{ns: ns, ipAddr: netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(i)})}
	n.podCIDR = NodePodCIDR(nw.podCIDR, i)
	n.gateway = n.podCIDR.Addr().Next()
	n.alloc = newAllocator(n.podCIDR, n.gateway)
	if n.nl, err = handle(ns); err != nil {
		return n, err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, HardwareAddr: bridgeMAC(i)}}
	if err := n.nl.LinkAdd(br); err != nil {
		return n, fmt.Errorf("add bridge: %w", err)
	}
	if err := n.nl.AddrAdd(br, addr(netip.PrefixFrom(n.gateway, n.podCIDR.Bits()))); err != nil {
		return n, fmt.Errorf("bridge address: %w", err)
	}
	if n.bridge, err = n.nl.LinkByName(bridgeName); err != nil {
		return n, err
	}
	// The node's link to the switch, made as a pod's to its node: the
	// switch's end first, on the switch's bridge and up, then the node's.
	port := "node-" + strconv.Itoa(i)
	swBridge, err := sw.LinkByName(switchName)
	if err != nil {
		return n, fmt.Errorf("switch: %w", err)
	}
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MasterIndex: swBridge.Attrs().Index},
		PeerName: podIfName, PeerNamespace: netlink.NsFd(ns.FD())}
	if err := sw.LinkAdd(link); err != nil {
		return n, fmt.Errorf("link to the switch: %w", err)
	}
	if err := sw.LinkSetUp(link); err != nil {
		return n, fmt.Errorf("switch port %s: %w", port, err)
	}
	eth, err := n.nl.LinkByName(podIfName)
	if err != nil {
		return n, err
	}
	if err := n.nl.AddrAdd(eth, addr(netip.PrefixFrom(n.ipAddr, 24))); err != nil {
		return n, fmt.Errorf("node address: %w", err)
	}
	if err := up(n.nl, "lo", bridgeName, podIfName); err != nil {
		return n, err
	}
	waitOperUp(sw, port)
	waitOperUp(n.nl, podIfName)
	if err := n.nl.RouteAdd(&netlink.Route{Gw: net.IP(switchGateway.AsSlice())}); err != nil {
		return n, fmt.Errorf("default route: %w", err)
	}
	// The switch's own host (ListenOutside) answers pods through their
	// node.
	if err := route(sw, n.podCIDR, n.ipAddr); err != nil {
		return n, fmt.Errorf("switch: %w", err)
	}
	// Pods' traffic is routed by the node, and traffic between two pods
	// of its bridge passes its rules too (br_netfilter), as a node's
	// kube-proxy needs; both are what kubeadm asks of a node.
	if err := sysctls(ns, map[string]string{"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"}); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w (the kernel's br_netfilter is not loaded: modprobe br_netfilter)", err)
		}
		return n, err
	}
	if n.tracker, err = NewTracker(ns); err != nil {
		return n, err
	}
	for _, m := range nw.nodes {
		if err := route(n.nl, m.podCIDR, m.ipAddr); err != nil {
			return n, err
		}
		if err := route(m.nl, n.podCIDR, n.ipAddr); err != nil {
			return n, err
		}
	}
	return n, nil
}

// ListenOutside listens on port (0 for a free one) of the switch's own
// address: a host of the cluster's network outside every node, as a
// database server next to a cluster is, which every pod and node reaches
// through its default route and nothing in the machine's namespace does.
func (nw *Network) ListenOutside(port int) (net.Listener, error) {
	return nw.fabric.Listen("tcp", netip.AddrPortFrom(switchGateway, uint16(port)).String())
}

// Nodes returns the network's nodes, node 1 first.
func (nw *Network) Nodes() []*NetnsNode { return nw.nodes }

// PodCIDR returns the cluster's pod range.
func (nw *Network) PodCIDR() netip.Prefix { return nw.podCIDR }

// Close takes the network down: the nodes, with every sandbox still open,
// and the switch. Nothing of it is left in the kernel once the processes
// started in its sandboxes are gone. Later calls return the first one's
// result.
func (nw *Network) Close() error {
	nw.closeOnce.Do(func() {
		var errs []error
		for _, n := range nw.nodes {
			errs = append(errs, n.close())
		}
		if nw.fabric != nil {
			errs = append(errs, nw.fabric.Close())
		}
		nw.closeErr = errors.Join(errs...)
	})
	return nw.closeErr
}

// NetnsNode is a node of a [Network]: a network namespace with the bridge
// its pods join. It implements [Node].
type NetnsNode struct {
	ns      *Netns
	nl      *netlink.Handle
	bridge  netlink.Link
	ipAddr  netip.Addr
	podCIDR netip.Prefix
	gateway netip.Addr
	alloc   *allocator
	tracker *Tracker

	mu        sync.Mutex
	sandboxes map[*netnsSandbox]bool
}

var _ Node = (*NetnsNode)(nil)

// Netns returns the node's namespace, where its Service rules live.
func (n *NetnsNode) Netns() *Netns { return n.ns }

// PodCIDR returns the node's pod range.
func (n *NetnsNode) PodCIDR() netip.Prefix { return n.podCIDR }

// IP returns the node's address on the switch.
func (n *NetnsNode) IP() netip.Addr { return n.ipAddr }

// Isolation returns "netns".
func (n *NetnsNode) Isolation() string { return "netns" }

// DialContext connects from the node's namespace; see [Netns.DialContext].
func (n *NetnsNode) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return n.ns.DialContext(ctx, network, address)
}

// Backend returns where the node's kernel sent a TCP connection from from
// to to, tried at since or later: the address and port its rules
// translated to (a Service's endpoint, for a connection to its cluster
// IP), as its connection tracking has it, or saw it begin. ok is false
// when the node saw no such connection in the last 10 s, or did not
// translate it: a Service without endpoints rejects a connection before
// it is tracked.
func (n *NetnsNode) Backend(from, to netip.AddrPort, since time.Time) (backend netip.AddrPort, ok bool) {
	return n.tracker.Backend(from, to, since)
}

// NewSandbox makes a pod's network namespace, with a loopback interface
// and eth0, which holds a free address of the node's range and joins the
// node's bridge through a veth; the node's bridge address is its default
// route.
func (n *NetnsNode) NewSandbox() (Sandbox, error) {
	ip, err := n.alloc.take()
	if err != nil {
		return nil, err
	}
	s := &netnsSandbox{node: n, ip: ip, host: "veth" + strconv.Itoa(int(ip.As4()[3]))}
	if err := s.build(); err != nil {
		s.Close()
		return nil, fmt.Errorf("pod network %s: %w", ip, err)
	}
	n.mu.Lock()
	if n.sandboxes == nil {
		n.sandboxes = map[*netnsSandbox]bool{}
	}
	n.sandboxes[s] = true
	n.mu.Unlock()
	return s, nil
}

// close closes the sandboxes left and the node's namespace.
func (n *NetnsNode) close() error {
	n.mu.Lock()
	left := make([]*netnsSandbox, 0, len(n.sandboxes))
	for s := range n.sandboxes {
		left = append(left, s)
	}
	n.mu.Unlock()
	var errs []error
	for _, s := range left {
		errs = append(errs, s.Close())
	}
	if n.nl != nil {
		n.nl.Close()
	}
	if n.tracker != nil {
		errs = append(errs, n.tracker.Close())
	}
	return errors.Join(append(errs, n.ns.Close())...)
}

// netnsSandbox is a pod's network namespace.
type netnsSandbox struct {
	node *NetnsNode
	ip   netip.Addr
	host string // the veth's end on the node
	ns   *Netns

	once sync.Once
	err  error
}

func (s *netnsSandbox) build() error {
	var err error
	if s.ns, err = NewNetns(); err != nil {
		return err
	}
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.host, MasterIndex: s.node.bridge.Attrs().Index},
		PeerName: podIfName, PeerNamespace: netlink.NsFd(s.ns.FD())}
	if err := s.node.nl.LinkAdd(link); err != nil {
		return fmt.Errorf("add veth %s: %w", s.host, err)
	}
	// Hairpin mode, as a CNI bridge plugin's hairpinMode sets it: the
	// bridge sends a pod its own packets that the node routes back to it,
	// by the port they came in by (its connection to a Service it is an
	// endpoint of).
	if err := s.node.nl.LinkSetHairpin(link, true); err != nil {
		return fmt.Errorf("veth %s hairpin mode: %w", s.host, err)
	}
	if err := s.node.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("veth %s up: %w", s.host, err)
	}
	h, err := handle(s.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName(podIfName)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(eth, addr(netip.PrefixFrom(s.ip, s.node.podCIDR.Bits()))); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	if err := up(h, "lo", podIfName); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{Gw: net.IP(s.node.gateway.AsSlice())}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	waitOperUp(s.node.nl, s.host)
	waitOperUp(h, podIfName)
	return nil
}

// linkUpWait bounds the wait for a new link to become operational.
const linkUpWait = time.Second

// waitOperUp waits until link name of h's namespace is operational, for
// at most linkUpWait. A veth's carrier comes up with both its ends, but
// the kernel activates its transmit queue a moment later, from a work
// queue, and drops what is sent before: a connect that came first would
// lose its first ARP request or SYN, and wait a second for the
// retransmit. It takes a millisecond or less on an idle machine.
func waitOperUp(h *netlink.Handle, name string) {
	deadline := time.Now().Add(linkUpWait)
	// One look per round; bounded by the deadline.
	for {
		l, err := h.LinkByName(name)
		if err != nil || l.Attrs().OperState == netlink.OperUp || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (s *netnsSandbox) IP() netip.Addr { return s.ip }

// Start starts cmd in the pod's namespace; see [Netns.Start].
func (s *netnsSandbox) Start(cmd *exec.Cmd) error { return s.ns.Start(cmd) }

// Do runs fn on the namespace's thread; see [Netns.Do].
func (s *netnsSandbox) Do(fn func()) error { return s.ns.Do(fn) }

// DialContext connects from the pod's namespace; see [Netns.DialContext].
func (s *netnsSandbox) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return s.ns.DialContext(ctx, network, address)
}

// Close deletes the veth, which takes eth0 with it at once, closes the
// namespace and frees the address. Later calls return the first one's
// result. It first lets the FINs of the pod's last connections leave
// (awaitFINs), as a real runtime's slower teardown does.
func (s *netnsSandbox) Close() error {
	s.once.Do(func() {
		n := s.node
		if s.ns != nil {
			s.awaitFINs()
		}
		var errs []error
		if link, err := n.nl.LinkByName(s.host); err == nil {
			errs = append(errs, n.nl.LinkDel(link))
		}
		if s.ns != nil {
			errs = append(errs, s.ns.Close())
		}
		n.mu.Lock()
		delete(n.sandboxes, s)
		n.mu.Unlock()
		n.alloc.free(s.ip)
		s.err = errors.Join(errs...)
	})
	return s.err
}

// finWait bounds how long a sandbox's teardown waits for the FINs of its
// pod's last connections to be acknowledged.
const finWait = time.Second

// awaitFINs waits, for at most finWait, until no TCP connection of the
// pod's namespace has a FIN of its own unacknowledged (FIN_WAIT1, CLOSING,
// LAST_ACK). A process's exit closes its connections, but the FINs it
// sends wait in the kernel's receive backlog of the veth's other end, which
// a loaded machine works off later, and deleting the veth drops them: the
// clients would never learn that their connections ended, and would time
// out where a cluster's would see them closed. Kubernetes' runtimes take
// longer to tear a pod's network down (a CNI plugin's DEL), so the FINs
// leave first there. Nothing to wait for, or a namespace that cannot be
// asked, returns at once.
func (s *netnsSandbox) awaitFINs() {
	h, err := handle(s.ns, unix.NETLINK_INET_DIAG)
	if err != nil {
		return
	}
	defer h.Close()
	unacknowledged := func(sk *netlink.Socket) bool {
		switch sk.State {
		case netlink.TCP_FIN_WAIT1, netlink.TCP_CLOSING, netlink.TCP_LAST_ACK:
			return true
		}
		return false
	}
	// A server that listens on ":port" accepts its IPv4 connections on
	// IPv6 sockets (v4-mapped): both families are asked.
	waiting := func() bool {
		for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
			sockets, err := h.SocketDiagTCP(family)
			if errors.Is(err, netlink.ErrDumpInterrupted) {
				return true // the dump changed under way: ask again
			}
			if err == nil && slices.ContainsFunc(sockets, unacknowledged) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(finWait); time.Now().Before(deadline) && waiting(); {
		time.Sleep(5 * time.Millisecond)
	}
}

// NodePodCIDR returns the pod range of node n (from 1 to MaxNodes) of a
// cluster whose pod range is cidr, an IPv4 /16 or larger: its n-th /24.
func NodePodCIDR(cidr netip.Prefix, n int) netip.Prefix {
	base := cidr.Masked().Addr().As4()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{base[0], base[1], byte(n), 0}), 24)
}

// handle returns a netlink handle whose sockets, of the netlink families
// given (NETLINK_ROUTE if none), are in ns.
func handle(ns *Netns, families ...int) (*netlink.Handle, error) {
	if len(families) == 0 {
		families = []int{unix.NETLINK_ROUTE}
	}
	var h *netlink.Handle
	var err error
	if derr := ns.Do(func() { h, err = netlink.NewHandle(families...) }); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return h, nil
}

// up sets the links named up.
func up(h *netlink.Handle, names ...string) error {
	for _, name := range names {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("link %s up: %w", name, err)
		}
	}
	return nil
}

// route adds a route to dst through gw.
func route(h *netlink.Handle, dst netip.Prefix, gw netip.Addr) error {
	ipnet := &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}
	if err := h.RouteAdd(&netlink.Route{Dst: ipnet, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, gw, err)
	}
	return nil
}

func addr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}

// sysctls writes the network sysctls of ns, by their path under
// /proc/sys; /proc/sys/net is the namespace of the thread that opens it.
func sysctls(ns *Netns, values map[string]string) error {
	var err error
	derr := ns.Do(func() {
		for key, v := range values {
			if werr := os.WriteFile("/proc/sys/"+key, []byte(v), 0); werr != nil {
				err = errors.Join(err, fmt.Errorf("sysctl %s: %w", key, werr))
			}
		}
	})
	return errors.Join(derr, err)
}
