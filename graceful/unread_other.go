//go:build !unix

package graceful

import "net"

// unread reports whether the kernel holds bytes that nc's reader has not
// read yet; where sockets cannot be peeked at, it reports false.
func unread(net.Conn) bool { return false }
