package podnet

import (
	"errors"
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
	// as long as a busy machine keeps a goroutine waiting.
	eventWait = 10 * time.Millisecond
)

// tracker follows where a node's rules send each new TCP connection, from
// the kernel's connection tracking: its events of new connections, kept
// for recentFor, and its table, for connections it still tracks. A
// connection that a pod refused is gone from the table at once (the
// kernel drops a connection whose only answer is a reset): its event
// tells.
type tracker struct {
	events *conntrack.Conn
	query  *conntrack.Conn
	done   chan struct{}

	mu      sync.Mutex
	recent  map[flowKey]seenFlow
	arrived chan struct{} // closed and replaced at each event
}

type flowKey struct{ from, to netip.AddrPort }

type seenFlow struct {
	backend netip.AddrPort
	at      time.Time
}

// newTracker starts following the connections of namespace ns.
func newTracker(ns *Netns) (*tracker, error) {
	events, err := conntrack.Dial(&netlink.Config{NetNS: ns.FD()})
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	query, err := conntrack.Dial(&netlink.Config{NetNS: ns.FD()})
	if err != nil {
		events.Close()
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	ch := make(chan conntrack.Event, 1024)
	if _, err := events.Listen(ch, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew}); err != nil {
		events.Close()
		query.Close()
		return nil, fmt.Errorf("conntrack events: %w", err)
	}
	t := &tracker{events: events, query: query, done: make(chan struct{}), recent: map[flowKey]seenFlow{}, arrived: make(chan struct{})}
	go t.follow(ch)
	return t, nil
}

// follow keeps the connections of the events on ch until Close.
func (t *tracker) follow(ch <-chan conntrack.Event) {
	prune := time.NewTicker(recentFor)
	defer prune.Stop()
	// One event or one pruning per round; the loop ends with close.
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

// backend returns where the connection from from to to, tried at since or
// later, went: the kernel's table has it while it tracks it; else the
// event of its start, if it came at since or later (an earlier one is of
// another connection of the same ports).
func (t *tracker) backend(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool) {
	if flow, err := t.query.Get(conntrack.NewFlow(unix.IPPROTO_TCP, 0, from.Addr(), to.Addr(), from.Port(), to.Port(), 0, 0)); err == nil {
		b := netip.AddrPortFrom(flow.TupleReply.IP.SourceAddress, flow.TupleReply.Proto.SourcePort)
		return b, b != to
	}
	key := flowKey{from, to}
	timeout := time.NewTimer(eventWait)
	defer timeout.Stop()
	// One event per round; the loop ends with the connection's event or
	// the wait.
	for {
		t.mu.Lock()
		f, ok := t.recent[key]
		arrived := t.arrived
		t.mu.Unlock()
		if ok && !f.at.Before(since) {
			return f.backend, f.backend != to
		}
		select {
		case <-arrived:
		case <-timeout.C:
			return netip.AddrPort{}, false
		}
	}
}

// close stops following.
func (t *tracker) close() error {
	close(t.done)
	return errors.Join(t.events.Close(), t.query.Close())
}
