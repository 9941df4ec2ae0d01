package podnet

import (
	"context"
	"net"
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

// BenchmarkDial measures a connection made from a node's namespace to a
// pod's across the node's bridge (netns), against one made with the
// machine's dialer to a listener on its loopback (loopback).
func BenchmarkDial(b *testing.B) {
	b.Run("netns", func(b *testing.B) {
		n := newNetwork(b, 1).Nodes()[0]
		s, err := n.NewSandbox()
		if err != nil {
			b.Fatal(err)
		}
		ln, err := s.(*netnsSandbox).ns.Listen("tcp", ":8080")
		if err != nil {
			b.Fatal(err)
		}
		benchmarkDial(b, ln, n.DialContext, netip.AddrPortFrom(s.IP(), 8080).String())
	})
	b.Run("loopback", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		benchmarkDial(b, ln, (&net.Dialer{}).DialContext, ln.Addr().String())
	})
}

// benchmarkDial times connections made by dial to addr, where ln accepts
// and closes them; it closes ln.
func benchmarkDial(b *testing.B, ln net.Listener, dial func(ctx context.Context, network, address string) (net.Conn, error), addr string) {
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
	for b.Loop() {
		c, err := dial(context.Background(), "tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
