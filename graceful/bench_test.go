package graceful_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/closingtime-dev/closingtime/graceful"
)

// BenchmarkServe measures requests per second through a graceful.Server
// against plain net/http with the same handler, on keep-alive connections
// and on a new connection per request. Compare the two with benchstat:
//
//	go test -run '^$' -bench Serve -count 10 ./graceful > bench.txt
//	benchstat -col /server bench.txt
func BenchmarkServe(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	servers := []struct {
		name  string
		serve func(ctx context.Context, ln net.Listener) error
	}{
		{"net-http", func(ctx context.Context, ln net.Listener) error {
			srv := &http.Server{Handler: handler}
			go func() { <-ctx.Done(); srv.Close() }()
			return srv.Serve(ln)
		}},
		{"graceful", func(ctx context.Context, ln net.Listener) error {
			srv := &graceful.Server{HTTP: &http.Server{Handler: handler}}
			return srv.Serve(ctx, ln)
		}},
	}
	for _, conn := range []string{"keep-alive", "new-conn"} {
		for _, server := range servers {
			b.Run("conn="+conn+"/server="+server.name, func(b *testing.B) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				ctx, stop := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- server.serve(ctx, ln) }()
				defer func() { stop(); <-done }()

				tr := &http.Transport{DisableKeepAlives: conn == "new-conn", MaxIdleConnsPerHost: 64}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				url := "http://" + ln.Addr().String() + "/"
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := client.Get(url)
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
				b.StopTimer() // not the teardown
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			})
		}
	}
}
