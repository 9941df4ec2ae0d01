//go:build unix

package graceful

import (
	"net"
	"syscall"
)

// unread reports whether the kernel holds bytes that nc's reader has not
// read yet. It peeks without consuming and without waiting: the Go runtime
// keeps every socket non-blocking, so the peek answers at once.
func unread(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var peekErr error
	var buf [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, peekErr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
	}); err != nil {
		return false
	}
	return peekErr == nil && n > 0
}
