package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DialContext connects to address, "IP:port", over TCP from inside the
// namespace, as net.Dialer.DialContext does from the machine's: network
// must be "tcp", "tcp4" or "tcp6", and the host an IP address (a
// namespace of a cluster has no name service). The connection's socket is
// the namespace's, so routes, rules and conntrack are the namespace's; it
// is a plain *net.TCPConn. The errors are those of the net package: an
// *net.OpError that wraps the connect's errno (syscall.ECONNREFUSED…) or,
// when ctx ends first, ctx.Err(). Unlike net.Dialer's, a failed connect's
// error names the address it was made from (Source), by which the
// connection tracking of a node tells where its rules sent it
// ([Tracker.Backend]).
func (n *Netns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dial(ctx, network, address, n.socket)
}

// DialContext is [Netns.DialContext] from the namespace the calling
// thread is in: for a process in a pod, whose connect that fails must name
// its source address too.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dial(ctx, network, address, newSocket)
}

// newSocket makes a non-blocking TCP socket of family in the calling
// thread's namespace.
func newSocket(family int) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}

// dial is DialContext through socket, which makes the socket of an
// address family.
func dial(ctx context.Context, network, address string, socket func(family int) (int, error)) (net.Conn, error) {
	opErr := func(addr net.Addr, err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: addr, Err: err}
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, opErr(nil, net.UnknownNetworkError(network))
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, opErr(nil, fmt.Errorf("address %q: want IP:port: %w", address, err))
	}
	raddr := net.TCPAddrFromAddrPort(ap)
	if err := ctx.Err(); err != nil {
		return nil, opErr(raddr, err)
	}
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := socket(family)
	if err != nil {
		return nil, opErr(raddr, err)
	}
	conn, laddr, err := connect(ctx, fd, sa)
	if err != nil {
		e := opErr(raddr, err).(*net.OpError)
		e.Source = laddr
		return nil, e
	}
	return conn, nil
}

// connect connects the non-blocking socket fd to sa, waiting through the
// runtime's poller, and returns it as a net.Conn; it closes fd. A failed
// connect returns the address it was made from too, if it got one, as
// net.OpError's Source names it.
func connect(ctx context.Context, fd int, sa unix.Sockaddr) (net.Conn, net.Addr, error) {
	err := unix.Connect(fd, sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		laddr := localAddr(fd)
		unix.Close(fd)
		return nil, laddr, os.NewSyscallError("connect", err)
	}
	// The file registers fd with the poller, as it is non-blocking.
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close()
	if err != nil {
		if err := waitConnected(ctx, f); err != nil {
			return nil, localAddr(fd), err
		}
	}
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, nil, err
	}
	return conn, nil, nil
}

// localAddr returns the TCP address socket fd is bound to; nil if none.
func localAddr(fd int) net.Addr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
	}
	return nil
}

// waitConnected waits until the connect of f's socket has completed, and
// returns its error, or ctx.Err() if ctx ends first.
func waitConnected(ctx context.Context, f *os.File) error {
	if d, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var connectErr error
	// The poller calls check at once, then each time the socket turns
	// writable, until it returns true: a connect ends by making it so.
	check := func(fd uintptr) bool {
		code, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			connectErr = os.NewSyscallError("getsockopt", err)
		case code != 0:
			connectErr = os.NewSyscallError("connect", unix.Errno(code))
		default:
			if _, err := unix.Getpeername(int(fd)); errors.Is(err, unix.ENOTCONN) {
				return false
			}
		}
		return true
	}
	if err := rc.Write(check); err != nil {
		// The socket's deadline is ctx's, and may pass a moment before
		// ctx says so.
		if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return connectErr
}

// Listen listens on address ("IP:port", or ":port" for every address of
// the namespace) inside the namespace, as net.Listen does in the
// machine's; network is "tcp", "tcp4" or "tcp6". The listener is the
// namespace's and can be used from any goroutine.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	var err error
	if derr := n.Do(func() { ln, err = net.Listen(network, address) }); derr != nil {
		return nil, derr
	}
	return ln, err
}
