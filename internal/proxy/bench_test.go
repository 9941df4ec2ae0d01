package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkForward measures a request through each role, in process,
// from a keep-alive client to an upstream that answers at once: the
// proxy's own cost per request, and its allocations.
func BenchmarkForward(b *testing.B) {
	upstream := listenHTTP(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	for _, role := range Roles() {
		b.Run(string(role), func(b *testing.B) {
			cfg := Config{Role: role, Upstream: upstream, PodName: "bench"}
			if role == RoleEdge {
				cfg.Upstreams = []string{upstream}
			}
			cfg, err := cfg.withDefaults()
			if err != nil {
				b.Fatal(err)
			}
			p := newServer(cfg)
			p.fwd.bal.set([]Endpoint{{Addr: upstream}})
			defer p.fwd.pool.closeIdle()
			p.state.Store(stateLive)
			url := "http://" + listenHTTP(b, p.hs.Handler) + "/"
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// listenHTTP serves h on a loopback port until b ends, and returns the
// port's address.
func listenHTTP(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}
