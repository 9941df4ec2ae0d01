package podnet

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// Where a tracker looks for a connection, and for how long.
const (
	// recentFor is how long a tracker keeps a connection it saw begin:
	// longer than any connect takes before it fails.
	recentFor = 10 * time.Second
	// eventWait is how long Backend waits for the event of a connection
	// that the kernel no longer tracks (one that a pod refused, or that
	// the rules rejected, which has none). The kernel queues the event
	// when the connection's first packet passes, before the answer that
	// ends a connect comes back: only the reading of it can be late, by
	// as long as a busy machine keeps a goroutine waiting, tens of
	// milliseconds under the race detector beside other work. The wait
	// costs only a connect that the rules rejected, which has no event:
	// the kernel answers a client that at most about once a second.
	eventWait = 50 * time.Millisecond
)

// Tracker follows where a node's rules send each new TCP connection, from
// the kernel's connection tracking: its events of new connections, kept
// for recentFor, and its table, for connections it still tracks. A
// connection that a pod refused is gone from the table at once (the
// kernel drops a connection whose only answer is a reset): its event
// tells. It is safe for concurrent use.
type Tracker struct {
	ns       *Netns
	query    *conntrack.Conn
	done     chan struct{} // closed by close
	followed chan struct{} // closed when follow returns

	mu      sync.Mutex
	events  *conntrack.Conn // the connection the events come by
	closing bool
	recent  map[flowKey]seenFlow
	arrived chan struct{} // closed and replaced at each event
}

type flowKey struct{ from, to netip.AddrPort }

type seenFlow struct {
	backend netip.AddrPort
	at      time.Time
}

// eventBuffer is the receive buffer asked for the events, as far as the
// namespace's net.core.rmem_max allows: room for a burst of new
// connections while the tracker's goroutine waits for the processor.
const eventBuffer = 8 << 20

// NewTracker starts following the connections of namespace ns, which must
// stay open until Close: a node's, or, in another process, the node's that
// JoinNetns joined. It needs CAP_NET_ADMIN in the namespace.
func NewTracker(ns *Netns) (*Tracker, error) {
	query, err := dialConntrack(ns)
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	t := &Tracker{ns: ns, query: query, done: make(chan struct{}), followed: make(chan struct{}),
		recent: map[flowKey]seenFlow{}, arrived: make(chan struct{})}
	ch, errc, err := t.listen()
	if err != nil {
		query.Close()
		return nil, err
	}
	go t.follow(ch, errc)
	return t, nil
}

// dialConntrack opens a conntrack connection in ns, on its thread: a
// netlink socket belongs to the namespace it is made in.
func dialConntrack(ns *Netns) (*conntrack.Conn, error) {
	var c *conntrack.Conn
	var err error
	if derr := ns.Do(func() { c, err = conntrack.Dial(nil) }); derr != nil {
		return nil, derr
	}
	return c, err
}

// listen subscribes to the events of new connections on a connection of
// its own, which becomes t.events.
func (t *Tracker) listen() (<-chan conntrack.Event, <-chan error, error) {
	events, err := dialConntrack(t.ns)
	if err != nil {
		return nil, nil, fmt.Errorf("conntrack events: %w", err)
	}
	events.SetReadBuffer(eventBuffer) // a smaller one only loses more under a burst
	// Events that find the socket's buffer full are dropped, rather than
	// failing the next read (ENOBUFS), which would end the reader: a busy
	// machine loses some events, not every one after.
	ch := make(chan conntrack.Event, 1024)
	var errc chan error
	err = events.SetOption(netlink.NoENOBUFS, true)
	if err == nil {
		errc, err = events.Listen(ch, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew})
	}
	if err != nil {
		events.Close()
		return nil, nil, fmt.Errorf("conntrack events: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		events.Close()
		return nil, nil, ErrClosed
	}
	t.events = events
	return ch, errc, nil
}

// follow keeps the connections of the events on ch until close. When the
// events stop with an error on errc (the kernel found the socket's buffer
// full and dropped some), it listens anew: the events lost are lost, and
// so is where their connections went, if they end before the table is
// asked.
func (t *Tracker) follow(ch <-chan conntrack.Event, errc <-chan error) {
	defer close(t.followed)
	prune := time.NewTicker(recentFor)
	defer prune.Stop()
	// One event, error or pruning per round; the loop ends with close.
	for {
		select {
		case <-t.done:
			return
		case now := <-prune.C:
			t.mu.Lock()
			for k, f := range t.recent {
				if now.Sub(f.at) > recentFor {
					delete(t.recent, k)
				}
			}
			t.mu.Unlock()
		case <-errc:
			t.mu.Lock()
			old, closing := t.events, t.closing
			t.mu.Unlock()
			if closing {
				ch, errc = nil, nil // close ends the rest
				continue
			}
			old.Close()
			var err error
			if ch, errc, err = t.listen(); err != nil {
				ch, errc = nil, nil // no events until close
			}
		case e := <-ch:
			f := e.Flow
			if f == nil || f.TupleOrig.Proto.Protocol != unix.IPPROTO_TCP {
				continue
			}
			o, r := f.TupleOrig, f.TupleReply
			key := flowKey{netip.AddrPortFrom(o.IP.SourceAddress, o.Proto.SourcePort), netip.AddrPortFrom(o.IP.DestinationAddress, o.Proto.DestinationPort)}
			t.mu.Lock()
			t.recent[key] = seenFlow{backend: netip.AddrPortFrom(r.IP.SourceAddress, r.Proto.SourcePort), at: time.Now()}
			close(t.arrived)
			t.arrived = make(chan struct{})
			t.mu.Unlock()
		}
	}
}

// Backend returns where the connection from from to to, tried at since or
// later, went: the address and port the namespace's rules translated to,
// as the event of its start told, if it came at since or later (an
// earlier one is of another connection of the same ports); else as the
// kernel's table has it while it tracks it, for a connection whose event
// is late or was lost. ok is false when the namespace saw no such
// connection in the last 10 s, or did not translate it.
func (t *Tracker) Backend(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool) {
	key := flowKey{from, to}
	// The event has usually come by the time a connect returns: the
	// table is asked, one netlink round trip, only when it has not.
	if b, ok := t.seen(key, since); ok {
		return b, b != to
	}
	if flow, err := t.query.Get(conntrack.NewFlow(unix.IPPROTO_TCP, 0, from.Addr(), to.Addr(), from.Port(), to.Port(), 0, 0)); err == nil {
		b := netip.AddrPortFrom(flow.TupleReply.IP.SourceAddress, flow.TupleReply.Proto.SourcePort)
		return b, b != to
	}
	timeout := time.NewTimer(eventWait)
	defer timeout.Stop()
	// One event per round; the loop ends with the connection's event or
	// the wait.
	for {
		t.mu.Lock()
		arrived := t.arrived
		t.mu.Unlock()
		if b, ok := t.seen(key, since); ok {
			return b, b != to
		}
		select {
		case <-arrived:
		case <-timeout.C:
			return netip.AddrPort{}, false
		}
	}
}

// seen returns the backend of the event of key's connection, if one came
// at since or later.
func (t *Tracker) seen(key flowKey, since time.Time) (netip.AddrPort, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.recent[key]
	if !ok || f.at.Before(since) {
		return netip.AddrPort{}, false
	}
	return f.backend, true
}

// Close stops following. The events' connection closes first, while
// follow still takes what its worker sends, so that the worker can end.
func (t *Tracker) Close() error {
	t.mu.Lock()
	t.closing = true
	events := t.events
	t.mu.Unlock()
	events.Close()
	close(t.done)
	<-t.followed
	return t.query.Close()
}
