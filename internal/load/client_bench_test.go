package load

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
)

// BenchmarkRoundTrip measures one request through the client, on a
// keep-alive connection and on a new connection per request, against a
// loopback server that answers each request with a fixed response. The
// allocations it reports include the server's. A new connection per
// request holds an ephemeral port in TIME_WAIT for 60 s, so bound the
// count:
//
//	go test -run '^$' -bench RoundTrip -benchmem -benchtime 2000x ./internal/load
func BenchmarkRoundTrip(b *testing.B) {
	address := rawServer(b, func(conn net.Conn) {
		defer conn.Close()
		br := bufio.NewReader(conn)
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			writeOK(conn, "bench")
			if req.Close {
				return
			}
		}
	})
	for _, mode := range []struct {
		name        string
		connections int
	}{{"keep-alive", 1}, {"new-conn", 0}} {
		b.Run("conn="+mode.name, func(b *testing.B) {
			c := testClient(address, mode.connections)
			defer c.close()
			var log attemptLog
			req, err := http.NewRequestWithContext(withAttemptLog(context.Background(), &log), http.MethodGet, "http://"+address+"/work", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				log.attempts = log.attempts[:0]
				if _, err := c.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
