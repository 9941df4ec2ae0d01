//go:build unix

package load

import (
	"syscall"
)

// idleAlive reports whether an idle connection can carry a request: the
// server has not closed or reset it and sent nothing unasked. It peeks at
// the socket without blocking. A connection that does not expose its file
// descriptor is assumed alive.
func idleAlive(cn *conn) bool {
	if cn.br.Buffered() > 0 {
		return false
	}
	sc, ok := cn.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read is the only sign of health: data, EOF (n == 0)
		// and errors all mean the connection must not be used.
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && alive
}
