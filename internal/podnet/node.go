package podnet

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
)

// Node gives the pods of one node their network: a [NetnsNode] where the
// system allows network namespaces, else a [LoopbackNode].
type Node interface {
	// NewSandbox makes the network of a new pod, with an address of the
	// node's pod range.
	NewSandbox() (Sandbox, error)
	// DialContext connects from the node itself, as the kubelet's probes
	// and httpGet hooks do; see net.Dialer.DialContext. The host of
	// address is an IP address.
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
	// PodCIDR is the node's range of pod addresses.
	PodCIDR() netip.Prefix
	// IP is the node's own address, a pod's status.hostIP.
	IP() netip.Addr
	// Isolation says how pods' networks are kept apart, for the events
	// that start them: "netns", or "loopback" and why no namespace could
	// be made.
	Isolation() string
}

// Sandbox is a pod's network, which every container of the pod shares.
type Sandbox interface {
	// IP is the pod's address.
	IP() netip.Addr
	// Start starts cmd in the pod's network; see exec.Cmd.Start.
	Start(cmd *exec.Cmd) error
	// Do runs fn on a thread in the pod's network, locked to it for the
	// call: a process that fn starts is in the pod's network, and fn may
	// change what the thread's children inherit (a PID namespace to join)
	// if it changes it back before it returns.
	Do(fn func()) error
	// DialContext connects from inside the pod, as a process of the pod
	// would; see [Netns.DialContext].
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
	// Close takes the pod's network down, once its last container has
	// stopped, and frees its address.
	Close() error
}
