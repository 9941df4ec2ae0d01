package podnet

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
)

// LoopbackNode is a node whose pods share the machine's network, each with
// an address of its own on the loopback range, which Linux routes to the
// loopback interface as a whole: pods must listen on their own address,
// and localhost is the machine's. It needs no privilege.
type LoopbackNode struct {
	reason string
	alloc  *allocator
}

// NewLoopbackNode returns a node whose pods take their addresses from
// cidr, a range of 127.0.0.0/8; reason, if not empty, says why the node has
// no network namespaces.
func NewLoopbackNode(cidr netip.Prefix, reason string) *LoopbackNode {
	return &LoopbackNode{reason: reason, alloc: newAllocator(cidr)}
}

// NewSandbox takes a free address of the node's range.
func (l *LoopbackNode) NewSandbox() (Sandbox, error) {
	ip, err := l.alloc.take()
	if err != nil {
		return nil, err
	}
	return &loopbackSandbox{node: l, ip: ip}, nil
}

// DialContext dials from the machine's network.
func (l *LoopbackNode) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// PodCIDR returns the range pods take their addresses from.
func (l *LoopbackNode) PodCIDR() netip.Prefix { return l.alloc.prefix }

// IP returns 127.0.0.1.
func (l *LoopbackNode) IP() netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }

// Isolation returns "loopback", with the reason the node was given.
func (l *LoopbackNode) Isolation() string {
	if l.reason == "" {
		return "loopback"
	}
	return "loopback (" + l.reason + ")"
}

type loopbackSandbox struct {
	node *LoopbackNode
	ip   netip.Addr
}

func (s *loopbackSandbox) IP() netip.Addr            { return s.ip }
func (s *loopbackSandbox) Start(cmd *exec.Cmd) error { return cmd.Start() }

// Do runs fn on a thread locked to it, given back to the runtime after,
// not ended: a thread's end would send the processes fn started with a
// parent-death signal that signal.
func (s *loopbackSandbox) Do(fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fn()
	}()
	<-done
	return nil
}
func (s *loopbackSandbox) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return s.node.DialContext(ctx, network, address)
}
func (s *loopbackSandbox) Close() error {
	s.node.alloc.free(s.ip)
	return nil
}
