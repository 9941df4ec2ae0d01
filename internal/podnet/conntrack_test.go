package podnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TestTrackerOverflow: a tracker keeps following after more events than
// its channel and its socket's buffer hold came at once, as in a burst of
// load on a busy machine, and closes while they wait. A tracker whose
// reader ended at the buffer's overflow (ENOBUFS) saw no connection begin
// after it and kept its close waiting for ever; so did one that stopped
// taking events before their reader had ended.
func TestTrackerOverflow(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 10,000 connections")
	}
	ns, err := NewNetns()
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no network namespaces here (run as root, or in a user namespace with CAP_NET_ADMIN): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := up(h, "lo"); err != nil {
		t.Fatal(err)
	}
	trackConnections(t, ns)
	tr, err := NewTracker(ns)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ns.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, "server")
	server := netip.MustParseAddrPort("127.0.0.1:8080")
	dial := func() netip.AddrPort {
		c, err := ns.DialContext(context.Background(), "tcp", server.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.TCPAddr).AddrPort()
	}
	// burst makes n connections while the tracker, its lock held, takes
	// no event.
	burst := func(n int) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for range n {
			dial()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	burst(5000)
	// Once the tracker has taken what waited, the next connection's event
	// comes: each round makes a connection and waits for an event.
	made := map[netip.AddrPort]time.Time{}
	for seen := false; !seen; {
		made[dial()] = time.Now()
		tr.mu.Lock()
		for from, at := range made {
			f, ok := tr.recent[flowKey{from, server}]
			seen = seen || ok && !f.at.Before(at)
		}
		arrived := tr.arrived
		tr.mu.Unlock()
		if !seen {
			select {
			case <-arrived:
			case <-ctx.Done():
				t.Fatal("no event of a connection made after the overflow")
			}
		}
	}
	burst(5000)
	closed := make(chan error, 1)
	tr.mu.Lock()
	go func() { closed <- tr.Close() }()
	// Events wait for the tracker when its close begins: let the close
	// get as far as it gets without them (a tracker that stops following
	// first stops at once) before the lock goes.
	select {
	case <-tr.done:
	case <-time.After(time.Second):
	}
	tr.mu.Unlock()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("close still waits")
	}
}

// trackConnections makes ns track connections, as the rules of a Service
// make a node's namespace do: an output chain that reads each packet's
// connection state.
func trackConnections(t *testing.T, ns *Netns) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "track"})
	chain := c.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeySTATE}}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}
