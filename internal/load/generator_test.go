package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
	"github.com/closingtime-dev/closingtime/retry"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero clients", cfg: Config{URL: "http://127.0.0.1:8080/work"}},
		{name: "both kinds", cfg: Config{URL: "http://127.0.0.1/", Clients: []Client{{Kind: NewConn, Rate: 5}, {Kind: KeepAlive}}}},
		{name: "unparsable URL", cfg: Config{URL: "http://[::1"}, wantErr: `target URL "http://[::1": want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD]: missing ']' in host`},
		// net/url takes "127.0.0.1" for a scheme, and rejects a path
		// after the port.
		{name: "no scheme", cfg: Config{URL: "127.0.0.1:8080"}, wantErr: `target URL "127.0.0.1:8080": want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD], such as http://127.0.0.1:8080`},
		{name: "no scheme with a path", cfg: Config{URL: "127.0.0.1:18080/work"}, wantErr: `target URL "127.0.0.1:18080/work": want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD], such as http://127.0.0.1:18080/work`},
		{name: "host name without scheme", cfg: Config{URL: "localhost:8080"}, wantErr: "such as http://localhost:8080"},
		{name: "grpc without a port", cfg: Config{URL: "grpc://127.0.0.1"}, wantErr: ": a gRPC target names its port"},
		{name: "grpc, the lab's method", cfg: Config{URL: "grpc://127.0.0.1:50051/"}},
		{name: "grpc, a method", cfg: Config{URL: "grpc://127.0.0.1:50051/grpc.health.v1.Health/Check"}},
		{name: "grpc, a service without a package", cfg: Config{URL: "grpc://127.0.0.1:50051/Shop/Get_2"}},
		{name: "grpc with a path", cfg: Config{URL: "grpc://127.0.0.1:50051/work"}, wantErr: `gRPC method "/work": want /SERVICE/METHOD, such as /grpc.health.v1.Health/Check`},
		{name: "grpc, a method of three parts", cfg: Config{URL: "grpc://127.0.0.1:50051/a.B/C/D"}, wantErr: `gRPC method "/a.B/C/D"`},
		{name: "grpc, an empty package part", cfg: Config{URL: "grpc://127.0.0.1:50051/a..B/C"}, wantErr: `gRPC method "/a..B/C"`},
		{name: "grpc, an escaped method", cfg: Config{URL: "grpc://127.0.0.1:50051/a.B%2FC"}, wantErr: "a gRPC target's method is written as it is, with no escapes"},
		{name: "grpc, an empty query", cfg: Config{URL: "grpc://127.0.0.1:50051/a.B/C?"}, wantErr: "a gRPC target has no query or fragment"},
		{name: "grpc, an empty fragment", cfg: Config{URL: "grpc://127.0.0.1:50051/a.B/C#"}, wantErr: "a gRPC target has no query or fragment"},
		{name: "grpc, a method beginning with a digit", cfg: Config{URL: "grpc://127.0.0.1:50051/a.B/9C"}, wantErr: `gRPC method "/a.B/9C"`},
		{name: "port out of range", cfg: Config{URL: "grpc://127.0.0.1:99999"}, wantErr: `port "99999" is not a port from 1 to 65535`},
		{name: "port zero", cfg: Config{URL: "http://127.0.0.1:0/work"}, wantErr: `port "0" is not a port from 1 to 65535`},
		{name: "no host", cfg: Config{URL: "grpc://:50051"}, wantErr: "no host"},
		{name: "user information", cfg: Config{URL: "http://me@127.0.0.1/"}, wantErr: "no user information"},
		{name: "grpc with a query", cfg: Config{URL: "grpc://127.0.0.1:50051?x=1"}, wantErr: "a gRPC target has no query or fragment"},
		{name: "grpc with retries", cfg: Config{URL: "grpc://127.0.0.1:50051", Retry: &retry.Policy{}}, wantErr: "retries (--retry) are the HTTP client's"},
		{name: "https", cfg: Config{URL: "https://127.0.0.1/"}, wantErr: "want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD]: the requests are plain HTTP/1.1, HTTP/2 without TLS (h2c) or gRPC, not https"},
		{name: "negative rate", cfg: Config{URL: "http://127.0.0.1/", Clients: []Client{{Rate: -1}}}, wantErr: "rate -1"},
		{name: "unknown kind", cfg: Config{URL: "http://127.0.0.1/", Clients: []Client{{Kind: 7}}}, wantErr: "unknown kind"},
		{name: "kind twice", cfg: Config{URL: "http://127.0.0.1/", Clients: []Client{{}, {}}}, wantErr: "given twice"},
		{name: "negative duration", cfg: Config{URL: "http://127.0.0.1/", Duration: -time.Second}, wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("New: %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("New: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// modes runs f once per client kind, as net/http's tests run once per
// protocol.
func modes(t *testing.T, f func(t *testing.T, kind Kind)) {
	for _, kind := range []Kind{NewConn, KeepAlive} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// idServer is an HTTP server that counts the request ids it received.
type idServer struct {
	*httptest.Server
	mu  sync.Mutex
	ids map[string]int
}

func newIDServer(t *testing.T, handler http.HandlerFunc) *idServer {
	s := &idServer{ids: make(map[string]int)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ids[r.Header.Get(RequestIDHeader)]++
		s.mu.Unlock()
		w.Header().Set(PodHeader, "pod-a")
		if handler != nil {
			handler(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	report, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// TestRunCounts: every scheduled request is sent once, with its own id, and
// counted once: in the totals, in its second, per pod and in the events.
func TestRunCounts(t *testing.T) {
	modes(t, func(t *testing.T, kind Kind) {
		srv := newIDServer(t, nil)
		var events bytes.Buffer
		report := run(t, Config{
			URL:      srv.URL + "/work",
			Clients:  []Client{{Kind: kind, Rate: 200}},
			Duration: 500 * time.Millisecond,
			Events:   &events,
		})
		const want = 100 // 200/s for 0.5 s
		c := report.Clients[0]
		if got := c.Totals[OK]; got != want || c.Totals.Failed() != 0 {
			t.Errorf("totals %s, want ok=%d", formatCounts(&c.Totals), want)
		}
		var perSecond int64
		for _, s := range c.Seconds {
			perSecond += s.Counts.Total()
		}
		if perSecond != want {
			t.Errorf("seconds add up to %d requests, want %d", perSecond, want)
		}
		if c.Pods["pod-a"] != want {
			t.Errorf("pods %v, want pod-a=%d", c.Pods, want)
		}
		if c.Latency.P50 <= 0 || c.Latency.Max < c.Latency.P99 || c.Latency.P99 < c.Latency.P50 {
			t.Errorf("latency %+v: want 0 < p50 <= p99 <= max", c.Latency)
		}
		srv.mu.Lock()
		if len(srv.ids) != want {
			t.Errorf("server saw %d distinct request ids, want %d", len(srv.ids), want)
		}
		for id, n := range srv.ids {
			if n != 1 {
				t.Errorf("server saw request %s %d times, want 1", id, n)
			}
		}
		srv.mu.Unlock()

		lines := 0
		sc := bufio.NewScanner(&events)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("event line %q: %v", sc.Text(), err)
			}
			if e.Class != OK || e.Client != kind || e.Pod != "pod-a" || e.Status != 200 || e.Attempts != 1 {
				t.Errorf("event %+v: want an ok %s request served by pod-a", e, kind)
			}
			if e.ConnectMS > e.FirstByteMS || e.FirstByteMS > e.TotalMS {
				t.Errorf("event %+v: want connect <= first byte <= total", e)
			}
			lines++
		}
		if lines != want {
			t.Errorf("%d event lines, want %d", lines, want)
		}
	})
}

// TestOpenLoop: requests start on schedule while earlier ones hang; a
// closed-loop client would have sent only a few.
func TestOpenLoop(t *testing.T) {
	modes(t, func(t *testing.T, kind Kind) {
		srv := newIDServer(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(300 * time.Millisecond)
		})
		report := run(t, Config{
			URL:      srv.URL,
			Clients:  []Client{{Kind: kind, Rate: 100, Connections: 64}},
			Duration: 500 * time.Millisecond,
		})
		c := report.Clients[0]
		if got := c.Totals[OK]; got != 50 {
			t.Errorf("totals %s, want ok=50", formatCounts(&c.Totals))
		}
		if c.Latency.P50 < 300*time.Millisecond {
			t.Errorf("latency p50 %v, want at least the server's 300ms", c.Latency.P50)
		}
		// A client that waited for earlier responses would start a later
		// request at least the server's 300ms late; p99 of 50 requests is
		// about their slowest start, so the bound leaves room for one
		// request delayed by a loaded machine.
		if c.ScheduleLag.P99 > 250*time.Millisecond {
			t.Errorf("schedule lag p99 %v: requests waited for earlier ones", c.ScheduleLag.P99)
		}
	})
}

// TestRunStops: a run ends soon after its context is done, and counts what
// it sent.
func TestRunStops(t *testing.T) {
	srv := newIDServer(t, nil)
	g, err := New(Config{URL: srv.URL, Clients: []Client{{Rate: 100}}, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	report, err := g.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Run returned %v after start, want soon after its context ended at 200ms", elapsed)
	}
	c := report.Clients[0]
	if n := c.Totals.Total(); n < 1 || n > 100 {
		t.Errorf("%d requests in a run stopped after 200ms at 100/s, want between 1 and 100", n)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if int64(len(srv.ids)) != c.Totals[OK] {
		t.Errorf("server saw %d requests, report counts %d ok", len(srv.ids), c.Totals[OK])
	}
}

// resettingServer serves keep-alive connections and resets each one on its
// third request, as a pod killed with busy connections does. It counts the
// resets and the times it read each request id.
type resettingServer struct {
	keepAliveServer
	resets int
}

func (s *resettingServer) start(t *testing.T) string {
	return s.keepAliveServer.start(t, 3, func(conn net.Conn) {
		s.mu.Lock()
		s.resets++
		s.mu.Unlock()
		abort(conn)
	})
}

// TestResetsCounted: in a keep-alive run without retries, each reset on a
// reused connection is counted, and no request is sent twice.
func TestResetsCounted(t *testing.T) {
	var srv resettingServer
	address := srv.start(t)
	report := run(t, Config{
		URL:      "http://" + address + "/work",
		Clients:  []Client{{Kind: KeepAlive, Rate: 200, Connections: 2}},
		Duration: 300 * time.Millisecond,
	})
	c := report.Clients[0]
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.resets == 0 {
		t.Fatal("server reset no connection")
	}
	// A request whose connection the server reset in the same instant
	// may read EOF rather than the reset: count both.
	if got := c.Totals[Reset] + c.Totals[Closed]; got != int64(srv.resets) {
		t.Errorf("report counts %d resets (%s), server reset %d connections", got, formatCounts(&c.Totals), srv.resets)
	}
	if c.Totals.Total() != 60 || c.Absorbed.Total() != 0 {
		t.Errorf("totals %s absorbed %s, want 60 requests and none absorbed", formatCounts(&c.Totals), formatCounts(&c.Absorbed))
	}
	for id, n := range srv.ids {
		if n != 1 {
			t.Errorf("request %s sent %d times, want 1", id, n)
		}
	}
}

// TestRetryAbsorbs: with retries, the GETs reset on busy keep-alive
// connections are sent again on new connections, succeed, and are reported
// as absorbed resets.
func TestRetryAbsorbs(t *testing.T) {
	var srv resettingServer
	address := srv.start(t)
	report := run(t, Config{
		URL:      "http://" + address + "/work",
		Clients:  []Client{{Kind: KeepAlive, Rate: 200, Connections: 2}},
		Duration: 300 * time.Millisecond,
		Retry:    &retry.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
	})
	c := report.Clients[0]
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.resets == 0 {
		t.Fatal("server reset no connection")
	}
	if c.Totals[OK] != 60 {
		t.Errorf("totals %s, want ok=60", formatCounts(&c.Totals))
	}
	if got := c.Absorbed[Reset] + c.Absorbed[Closed]; got != int64(srv.resets) {
		t.Errorf("absorbed %s, want %d resets", formatCounts(&c.Absorbed), srv.resets)
	}
	twice := 0
	for _, n := range srv.ids {
		if n == 2 {
			twice++
		}
	}
	if twice != srv.resets {
		t.Errorf("%d requests sent twice, want one per reset (%d)", twice, srv.resets)
	}
}

// TestFirstFailure: with retries, a request that a retry saved carries
// what its first attempt saw, the reset on its connection's third request,
// its FailedAttempt is that, and it is re-probed; a request that succeeded the first time
// carries none and has no failed attempt; one that failed on every attempt
// carries its first failure, and its FailedAttempt is its last.
func TestFirstFailure(t *testing.T) {
	policy := &retry.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	var srv resettingServer
	address := srv.start(t)
	var results []Result
	run(t, Config{
		URL:      "http://" + address + "/work",
		Clients:  []Client{{Kind: KeepAlive, Rate: 200, Connections: 2}},
		Duration: 300 * time.Millisecond,
		Retry:    policy,
		OnResult: func(r Result) { results = append(results, r) },
	})
	absorbed := 0
	for _, r := range results {
		failed, ok := r.FailedAttempt()
		switch {
		case r.Absorbed():
			absorbed++
			f := r.FirstFailure
			if f == nil || (f.Class != Reset && f.Class != Closed) || f.ConnRequests != 2 || f.ConnAge <= 0 || f.Err == nil {
				t.Fatalf("absorbed request %s (first class %s): first failure %+v, want a reset on a connection that carried 2 requests", r.ID, r.FirstClass, f)
			}
			if f.Addr.String() != address || f.Connect <= 0 || f.Total < f.Connect || f.Total > r.Connect {
				t.Errorf("absorbed request %s: first failure at %v, connected %v, ended %v, before the retry's connect %v; want the server's address and that order",
					r.ID, f.Addr, f.Connect, f.Total, r.Connect)
			}
			if !ok || failed != *f {
				t.Errorf("absorbed request %s: FailedAttempt %+v, %t; want its first failure", r.ID, failed, ok)
			}
			if r.ConnRequests != 0 {
				t.Errorf("absorbed request %s: retried on a connection that carried %d requests, want a new one", r.ID, r.ConnRequests)
			}
			// Its first failure was on a reused connection.
			if p := r.Reprobe; p == nil || p.Class != OK || p.At < r.Total {
				t.Errorf("absorbed request %s, ended at %v: re-probe %+v; want an ok one after it", r.ID, r.Total, p)
			}
		case r.Class == OK:
			if r.FirstFailure != nil || ok || r.Reprobe != nil {
				t.Errorf("request %s, ok the first time: first failure %+v, FailedAttempt %t, re-probe %+v; want none", r.ID, r.FirstFailure, ok, r.Reprobe)
			}
		default:
			t.Errorf("request %s: %s (%v), want ok", r.ID, r.Class, r.Err)
		}
	}
	if absorbed == 0 {
		t.Fatal("no request absorbed")
	}

	refused := testbinary.ClosedAddr(t)
	results = nil
	run(t, Config{URL: "http://" + refused + "/", Clients: []Client{{Rate: 100}}, Duration: 30 * time.Millisecond, Retry: policy,
		OnResult: func(r Result) { results = append(results, r) }})
	for _, r := range results {
		failed, ok := r.FailedAttempt()
		f := r.FirstFailure
		if r.Class != Refused || r.Attempts != 3 || f == nil || f.Class != Refused || f.Addr.String() != refused || f.Total > r.Total {
			t.Errorf("request %s to a closed port: %s after %d attempts, first failure %+v; want refused three times, the first at %s", r.ID, r.Class, r.Attempts, f, refused)
		}
		if !ok || failed.Total != r.Total || failed.Class != r.Class || failed.Addr != r.Addr {
			t.Errorf("request %s: FailedAttempt %+v, %t; want its last attempt (ended %v)", r.ID, failed, ok, r.Total)
		}
	}
}

// TestDialSeam: a Config.Dial routes a name that no resolver knows, as the
// local cluster routes a Service through its routing view.
func TestDialSeam(t *testing.T) {
	srv := newIDServer(t, nil)
	var (
		mu     sync.Mutex
		dialed []string
	)
	d := &net.Dialer{}
	report := run(t, Config{
		URL:      "http://app.svc.invalid/work",
		Clients:  []Client{{Kind: NewConn, Rate: 100}},
		Duration: 100 * time.Millisecond,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, address)
			mu.Unlock()
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		},
	})
	if c := report.Clients[0]; c.Totals[OK] != 10 {
		t.Errorf("totals %s, want ok=10", formatCounts(&c.Totals))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 10 || dialed[0] != "app.svc.invalid:80" {
		t.Errorf("dialed %v, want app.svc.invalid:80 ten times", dialed)
	}
}

// TestProxyAnswers: a 503 whose body is a proxy's answer (Envoy's, the
// lab sidecar's) keeps the proxy's reason, in the results, the event
// lines and the report; a server's own 503 has none.
func TestProxyAnswers(t *testing.T) {
	const envoyRefused = "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111"
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		if n.Add(1)%2 == 0 {
			io.WriteString(w, envoyRefused)
		} else {
			io.WriteString(w, "overloaded")
		}
	}))
	t.Cleanup(srv.Close)
	var events bytes.Buffer
	report := run(t, Config{URL: srv.URL, Clients: []Client{{Kind: NewConn, Rate: 100}}, Duration: 200 * time.Millisecond, Events: &events})
	c := report.Clients[0]
	if got, all := c.ProxyReasons[proxy.UpstreamRefused], c.Totals[HTTP5xx]; got == 0 || got >= all {
		t.Errorf("proxy reasons %v of %d http5xx: want some, not all, upstream-refused", c.ProxyReasons, all)
	}
	sc := bufio.NewScanner(&events)
	proxied := 0
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Proxy == proxy.UpstreamRefused {
			proxied++
		} else if e.Proxy != "" {
			t.Errorf("event %+v: proxy %q, want upstream-refused or none", e, e.Proxy)
		}
	}
	if int64(proxied) != c.ProxyReasons[proxy.UpstreamRefused] {
		t.Errorf("%d event lines with the proxy's reason, want %d", proxied, c.ProxyReasons[proxy.UpstreamRefused])
	}
}
