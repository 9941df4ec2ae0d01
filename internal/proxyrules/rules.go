package proxyrules

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TableName is the name of the nftables table, of family ip, that [Rules]
// writes.
const TableName = "closingtime"

// Verdict is what becomes of a new connection to a Service port that has
// no endpoints.
type Verdict int

const (
	// Reject refuses it: the kernel answers with ICMP port unreachable,
	// and a TCP client's connect fails with ECONNREFUSED.
	Reject Verdict = iota
	// Drop drops it: a TCP client's connect times out. kube-proxy drops
	// a connection to a Service of internalTrafficPolicy Local that has
	// endpoints on other nodes only.
	Drop
)

// String returns "reject" or "drop".
func (v Verdict) String() string {
	switch v {
	case Reject:
		return "reject"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Config configures [Rules].
type Config struct {
	// NetNS is a file descriptor of the network namespace whose nftables
	// the rules live in. It must stay open until Close has returned.
	NetNS int
	// PodCIDR is the cluster's pod range: a connection to a ClusterIP
	// from outside it is masqueraded, as with kube-proxy's
	// --cluster-cidr. If zero, no connection to a ClusterIP is (apart
	// from an endpoint's own, hairpin), as kube-proxy without a way to
	// tell pods' traffic.
	PodCIDR netip.Prefix
}

// Service is one Service as a node's routing view has it.
type Service struct {
	// Namespace and Name name the Service; they name its chains.
	Namespace, Name string
	// ClusterIP is the Service's IPv4 cluster IP; the zero Addr for a
	// headless Service, which gets no rules.
	ClusterIP netip.Addr
	// Affinity is the timeout of sessionAffinity ClientIP: a client's
	// new connections go to the endpoint its last one went to, while that
	// endpoint is in the view and its last connection is not older. Zero
	// for no affinity.
	Affinity time.Duration
	// Ports are the Service's TCP ports.
	Ports []Port
}

// Port is one TCP port of a [Service].
type Port struct {
	// Name is the Service port's name, "" for a Service's only port; it
	// names the port's chains.
	Name string
	// Port is the Service port, on the ClusterIP.
	Port uint16
	// NodePort is the port's node port, 0 for none.
	NodePort uint16
	// Endpoints are where new connections to ClusterIP:Port go, one
	// chosen at random for each, as the caller chose them for this node
	// (the Ready ones, else the serving and terminating ones; with
	// internalTrafficPolicy Local, only the node's own). An endpoint
	// listed twice counts once.
	Endpoints []netip.AddrPort
	// NoEndpoints is what becomes of a new connection to ClusterIP:Port
	// when Endpoints is empty: Reject, or Drop for internalTrafficPolicy
	// Local with endpoints on other nodes only.
	NoEndpoints Verdict
	// NodePortEndpoints are where new connections to the node port go:
	// the endpoints of every node, whatever the internalTrafficPolicy. A
	// node port without any rejects its connections.
	NodePortEndpoints []netip.AddrPort
}

// Rules writes the Service rules of one network namespace: the table
// "ip closingtime", which it owns. It is safe for concurrent use.
type Rules struct {
	cfg   Config
	table *nftables.Table

	mu     sync.Mutex
	conn   *nftables.Conn      // nil after a failed transaction: Sync dials anew
	kernel map[string]*planned // what the table holds beyond its base, by Service, as last written
	// stale holds the chains that a write unlinked and emptied, by when:
	// a later write deletes each once staleChainDelay has passed.
	stale  map[string]time.Time
	now    func() time.Time
	setID  uint32 // the last ID given to a set in a transaction
	closed bool
}

// staleChainDelay is how long a chain that a write unlinked stays, empty,
// before a later write deletes it, as kube-proxy's nftables mode keeps
// one (see the package documentation).
const staleChainDelay = time.Second

// ErrClosed is returned by Sync and Close once Close has been called.
var ErrClosed = errors.New("proxyrules: closed")

// New creates the table "ip closingtime" in cfg.NetNS with its base
// chains, maps and sets, and no Service, in place of any table of that
// name there. Close deletes it.
func New(cfg Config) (*Rules, error) {
	if cfg.NetNS <= 0 {
		return nil, fmt.Errorf("proxyrules: network namespace fd %d: want the fd of a namespace the rules are for", cfg.NetNS)
	}
	if cfg.PodCIDR.IsValid() {
		if !cfg.PodCIDR.Addr().Is4() {
			return nil, fmt.Errorf("proxyrules: pod range %s: want an IPv4 prefix", cfg.PodCIDR)
		}
		cfg.PodCIDR = cfg.PodCIDR.Masked()
	}
	r := &Rules{cfg: cfg, table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}, now: time.Now}
	if err := r.write(nil); err != nil {
		return nil, err
	}
	return r, nil
}

// Sync makes the table route services, the node's whole routing view:
// rules for a Service or an endpoint left out of it go. It writes the
// difference from what the last Sync wrote in one netlink transaction,
// and nothing when there is none. A client's sessionAffinity ClientIP
// survives every Sync that keeps its endpoint for the Service port, and
// the Service's affinity timeout.
// Connections that conntrack already tracks keep their endpoint, as no
// rule sees them again.
//
// An error in services (a Service or a port twice, a ClusterIP or a node
// port of two Services, an address that is not IPv4) leaves the table as
// it was. When the kernel refuses the transaction, the table is
// as it was too, and the next Sync writes it whole.
func (r *Rules) Sync(services []Service) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	want, err := plan(services, r.cfg.PodCIDR, r.kernel)
	if err != nil {
		return fmt.Errorf("proxyrules: sync: %w", err)
	}
	return r.write(want)
}

// write writes want in one transaction: the Services that differ from
// r.kernel, or, with no connection yet, the whole table. r.mu is held or
// r is new.
func (r *Rules) write(want map[string]*planned) error {
	old, next := newState(), newState()
	if r.conn == nil {
		conn, err := nftables.New(nftables.WithNetNSFd(r.cfg.NetNS), nftables.AsLasting(), nftables.WithSockOptions(largeBuffers))
		if err != nil {
			return fmt.Errorf("proxyrules: netlink: %w", err)
		}
		r.conn = conn
		r.writeBase()
		r.kernel, r.stale = nil, map[string]time.Time{}
	}
	// A Service planned anew is a new part; an unchanged one keeps its
	// part, and nothing of it is written.
	for id, p := range r.kernel {
		if want[id] != p {
			old.add(p.state)
		}
	}
	for id, p := range want {
		if r.kernel[id] != p {
			next.add(p.state)
		}
	}
	err := r.writeDiff(&old, &next)
	if err == nil {
		err = r.conn.Flush()
	}
	if err != nil {
		// The kernel applied none of the transaction, but acks of it may
		// be left unread, or the transaction unsent: the next write starts
		// on a new connection, and writes the table whole.
		r.conn.CloseLasting()
		r.conn = nil
		return fmt.Errorf("proxyrules: write table ip %s: %w", TableName, err)
	}
	r.kernel = want
	return nil
}

// Close deletes the table; the connections it routed keep their
// endpoints, which conntrack holds.
func (r *Rules) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.closed = true
	conn := r.conn
	if conn == nil {
		var err error
		if conn, err = nftables.New(nftables.WithNetNSFd(r.cfg.NetNS)); err != nil {
			return fmt.Errorf("proxyrules: netlink: %w", err)
		}
	}
	conn.DelTable(r.table)
	err := conn.Flush()
	conn.CloseLasting()
	if err != nil {
		return fmt.Errorf("proxyrules: delete table ip %s: %w", TableName, err)
	}
	return nil
}

// socketBuffer is the size of the netlink socket's buffers. A transaction
// is one message, and the kernel refuses a message larger than the send
// buffer; it answers every part of it, and drops what overflows the
// receive buffer. 64 MiB holds the first transaction of 100 Services of
// 100 endpoints each (1.7 MB sent for 100 of 10 with affinity).
const socketBuffer = 64 << 20

// largeBuffers sets the socket's buffers to socketBuffer, past the
// system's limits (net.core.wmem_max, rmem_max), which CAP_NET_ADMIN in the
// machine's first user namespace allows; without it, as in a user namespace
// of its own, to as much as those limits allow.
func largeBuffers(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, opt := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[0], socketBuffer)
			if errors.Is(e, unix.EPERM) {
				e = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[1], socketBuffer)
			}
			serr = errors.Join(serr, e)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
