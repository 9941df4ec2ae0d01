package podnet

import (
	"context"
	"net/netip"
	"testing"
)

// BenchmarkSandbox measures what a pod's network adds to its start (a
// namespace, a veth on the node's bridge, its address and routes) and to
// its end (their removal), each timed alone.
func BenchmarkSandbox(b *testing.B) {
	n := newNetwork(b, 1).Nodes()[0]
	b.Run("start", func(b *testing.B) {
		for b.Loop() {
			s, err := n.NewSandbox()
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			s.Close()
			b.StartTimer()
		}
	})
	b.Run("stop", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s, err := n.NewSandbox()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDial measures a connection made from a namespace, against the
// machine's loopback dialer on the same kind of listener.
func BenchmarkDial(b *testing.B) {
	n := newNetwork(b, 1).Nodes()[0]
	s, err := n.NewSandbox()
	if err != nil {
		b.Fatal(err)
	}
	ln, err := s.(*netnsSandbox).ns.Listen("tcp", ":8080")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		// One connection per round; the loop ends when ln is closed.
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := netip.AddrPortFrom(s.IP(), 8080).String()
	for b.Loop() {
		c, err := n.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
