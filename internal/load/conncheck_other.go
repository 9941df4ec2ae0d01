//go:build !unix

package load

// idleAlive reports whether an idle connection can carry a request. Where
// the socket cannot be peeked at without blocking, only data already
// buffered shows that it cannot.
func idleAlive(cn *conn) bool {
	return cn.br.Buffered() == 0
}
