package retry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fastPolicy keeps tests quick: three attempts a few milliseconds apart.
var fastPolicy = Policy{BaseDelay: 2 * time.Millisecond, MaxDelay: 10 * time.Millisecond}

// resetConn aborts the connection of w with a TCP RST (SO_LINGER 0), as a
// killed process's kernel does.
func resetConn(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
}

// connCounter counts the connections a test server accepted.
type connCounter struct {
	mu    sync.Mutex
	conns map[string]bool // by remote address
}

func (c *connCounter) hook(conn net.Conn, state http.ConnState) {
	if state != http.StateNew {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		c.conns = make(map[string]bool)
	}
	c.conns[conn.RemoteAddr().String()] = true
}

func (c *connCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

func get(t *testing.T, client *http.Client, url string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200", url, resp.StatusCode)
	}
}

// TestResetAfterSend sends each method to a server that reads the request
// and resets the connection without answering: the request reached the
// server, so only idempotent ones may be sent again.
func TestResetAfterSend(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		header    string
		wantCalls int32
	}{
		{name: "GET", method: http.MethodGet, wantCalls: 3},
		{name: "PUT", method: http.MethodPut, wantCalls: 3},
		{name: "DELETE", method: http.MethodDelete, wantCalls: 3},
		{name: "POST", method: http.MethodPost, wantCalls: 1},
		{name: "PATCH", method: http.MethodPatch, wantCalls: 1},
		{name: "POST with Idempotency-Key", method: http.MethodPost, header: "Idempotency-Key", wantCalls: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				io.Copy(io.Discard, r.Body)
				resetConn(t, w)
			}))
			defer srv.Close()
			client := &http.Client{Transport: &Transport{Policy: fastPolicy}}
			req, err := http.NewRequest(tt.method, srv.URL, strings.NewReader("order=42"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set(tt.header, "k-42")
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s: got status %d, want an error", tt.method, resp.StatusCode)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("%s reached the server %d times, want %d", tt.name, got, tt.wantCalls)
			}
		})
	}
}

// TestPostTimeoutNotRetried: a POST whose response does not come in time
// may have been processed; it is sent once.
func TestPostTimeoutNotRetried(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	base := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &Transport{Base: base, Policy: fastPolicy}}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("order=42"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("POST succeeded, want a response timeout")
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("POST reached the server %d times, want 1", got)
	}
}

// TestKeepAliveResetRetriedOnNewConn: a GET on a busy keep-alive
// connection is reset, as by a pod killed while the connection is in use;
// it is sent again on a new connection, not on the other pooled one, and
// succeeds.
func TestKeepAliveResetRetriedOnNewConn(t *testing.T) {
	var (
		mu      sync.Mutex
		served  []string // remote address of each request
		counter connCounter
		both    sync.WaitGroup
	)
	both.Add(2)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.RemoteAddr)
		n := len(served)
		mu.Unlock()
		switch n {
		case 1, 2:
			// Hold both first requests so that they need two connections.
			both.Done()
			both.Wait()
		case 3:
			resetConn(t, w)
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = counter.hook
	srv.Start()
	defer srv.Close()

	tr := &Transport{Policy: fastPolicy}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { get(t, client, srv.URL) })
	}
	wg.Wait()
	get(t, client, srv.URL) // reset on a pooled connection, then retried

	mu.Lock()
	defer mu.Unlock()
	if len(served) != 4 {
		t.Fatalf("server saw %d requests (%v), want 4", len(served), served)
	}
	pooled := served[:2]
	if !slices.Contains(pooled, served[2]) {
		t.Errorf("third request came on %s, want one of the kept-alive connections %v", served[2], pooled)
	}
	if slices.Contains(pooled, served[3]) {
		t.Errorf("retry came on pooled connection %s, want a new one", served[3])
	}
	if got := counter.count(); got != 3 {
		t.Errorf("server accepted %d connections, want 3", got)
	}
}

// TestRefusedRetriedForPost: a refused connect never reached the server, so
// even a POST is sent again.
func TestRefusedRetriedForPost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the first connect is refused

	var (
		calls    atomic.Int32
		dials    atomic.Int32
		firstErr error
		srv      *http.Server
	)
	defer func() {
		if srv != nil {
			srv.Close()
		}
	}()
	d := &net.Dialer{}
	base := &http.Transport{DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, address)
		if dials.Add(1) == 1 {
			firstErr = err
			// The server comes up after the first connect failed.
			ln, lerr := net.Listen("tcp", addr)
			if lerr != nil {
				t.Errorf("listen %s again: %v", addr, lerr)
				return conn, err
			}
			srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				io.WriteString(w, "created")
			})}
			go srv.Serve(ln)
		}
		return conn, err
	}}
	defer base.CloseIdleConnections()

	client := &http.Client{Transport: &Transport{Base: base, Policy: fastPolicy}}
	resp, err := client.Post("http://"+addr+"/orders", "text/plain", bytes.NewReader([]byte("order=42")))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if !errors.Is(firstErr, syscall.ECONNREFUSED) {
		t.Errorf("first connect: %v, want connection refused", firstErr)
	}
	if got := dials.Load(); got != 2 {
		t.Errorf("%d connects, want 2", got)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("POST reached the server %d times, want 1", got)
	}
}

// TestUnprocessedResponse: a 503 that the policy recognizes as made by a
// proxy that reached no upstream is retried, even for a POST; without the
// predicate it is returned.
func TestUnprocessedResponse(t *testing.T) {
	fromProxy := func(resp *http.Response) bool {
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("X-Upstream") == "none"
	}
	tests := []struct {
		name        string
		unprocessed func(*http.Response) bool
		wantStatus  int
		wantCalls   int32
	}{
		{name: "predicate", unprocessed: fromProxy, wantStatus: http.StatusOK, wantCalls: 2},
		{name: "no predicate", wantStatus: http.StatusServiceUnavailable, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.Header().Set("X-Upstream", "none")
					http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
					return
				}
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			policy := fastPolicy
			policy.Unprocessed = tt.unprocessed
			tr := &Transport{Policy: policy}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("server saw %d requests, want %d", got, tt.wantCalls)
			}
		})
	}
}

// TestRetryAfter: the wait before retrying a 503 is at least what its
// Retry-After asks for, and a Retry-After past MaxDelay is not waited for.
func TestRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("waits one second")
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", r.URL.Query().Get("after"))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	policy := Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Second,
		Unprocessed: func(r *http.Response) bool { return r.StatusCode == http.StatusServiceUnavailable }}
	client := &http.Client{Transport: &Transport{Policy: policy}}

	start := time.Now()
	get(t, client, srv.URL+"?after=1")
	if elapsed := time.Since(start); elapsed < 900*time.Millisecond {
		t.Errorf("retried after %v, want at least the 1s of Retry-After", elapsed)
	}

	calls.Store(0)
	resp, err := client.Get(srv.URL + "?after=30")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || calls.Load() != 1 {
		t.Errorf("Retry-After 30 with MaxDelay 2s: status %d after %d requests, want 503 after 1", resp.StatusCode, calls.Load())
	}
}

// TestDeadlineStopsRetries: no retry starts after the context's deadline.
func TestDeadlineStopsRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		resetConn(t, w)
	}))
	defer srv.Close()
	// The backoff (at least 1s) does not fit in the deadline.
	tr := &Transport{Policy: Policy{BaseDelay: 2 * time.Second, MaxDelay: 2 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatal("RoundTrip succeeded, want the reset")
	}
	if elapsed := time.Since(start); elapsed > 400*time.Millisecond {
		t.Errorf("RoundTrip took %v; it should have returned at once, without waiting to retry", elapsed)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}

// TestMaxConnLifetime: a connection past its lifetime is not reused, and a
// request in flight when the lifetime ends is not cut.
func TestMaxConnLifetime(t *testing.T) {
	var counter connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("work")); err == nil {
			time.Sleep(d)
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = counter.hook
	srv.Start()
	defer srv.Close()

	// The lifetime, less its jitter of up to a tenth, leaves the first two
	// requests ample time on a loaded machine; the waits below are each a
	// little longer than the whole lifetime.
	const lifetime = time.Second
	tr := &Transport{MaxConnLifetime: lifetime}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	get(t, client, srv.URL)
	get(t, client, srv.URL)
	if got := counter.count(); got != 1 {
		t.Fatalf("two quick requests used %d connections, want 1", got)
	}
	time.Sleep(lifetime + 100*time.Millisecond)
	get(t, client, srv.URL)
	if got := counter.count(); got != 2 {
		t.Fatalf("request after the lifetime used %d connections in all, want 2", got)
	}
	// This request outlives its connection's lifetime and still completes.
	// It is a POST, which would not be retried if the lifetime cut it.
	resp, err := client.Post(srv.URL+"?work="+(lifetime+100*time.Millisecond).String(), "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatalf("POST across the end of the lifetime: %v", err)
	}
	resp.Body.Close()
	get(t, client, srv.URL)
	if got := counter.count(); got != 3 {
		t.Errorf("request after a long one used %d connections in all, want 3", got)
	}
}

// TestPoolReuse: with no lifetime limit, sequential requests share one
// connection.
func TestPoolReuse(t *testing.T) {
	var counter connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = counter.hook
	srv.Start()
	defer srv.Close()
	tr := &Transport{MaxConnLifetime: -1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range 5 {
		get(t, client, srv.URL)
	}
	if got := counter.count(); got != 1 {
		t.Errorf("5 sequential requests used %d connections, want 1", got)
	}
}

// TestNoFreshConn: a Base that cannot make a fresh connection for a retry,
// with no Fresh, is a configuration error reported on the first request.
func TestNoFreshConn(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.EOF })
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if _, err := (&Transport{Base: base}).RoundTrip(req); !errors.Is(err, ErrNoFreshConn) {
		t.Errorf("RoundTrip: %v, want ErrNoFreshConn", err)
	}
	var fresh atomic.Int32
	tr := &Transport{Base: base, Fresh: roundTripFunc(func(*http.Request) (*http.Response, error) {
		fresh.Add(1)
		return nil, io.EOF
	}), Policy: fastPolicy}
	if _, err := tr.RoundTrip(req); !errors.Is(err, io.EOF) {
		t.Errorf("RoundTrip: %v, want EOF", err)
	}
	if got := fresh.Load(); got != 2 {
		t.Errorf("Fresh sent %d retries, want 2", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestBackoff(t *testing.T) {
	p := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for _, tt := range []struct {
		retry    int
		min, max time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{10, 500 * time.Millisecond, time.Second},
	} {
		for range 100 {
			if d := p.backoff(tt.retry); d < tt.min || d > tt.max {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", tt.retry, d, tt.min, tt.max)
			}
		}
	}
}

func TestIdempotent(t *testing.T) {
	for _, tt := range []struct {
		method, key string
		want        bool
	}{
		{"GET", "", true}, {"HEAD", "", true}, {"OPTIONS", "", true}, {"TRACE", "", true},
		{"PUT", "", true}, {"DELETE", "", true}, {"POST", "", false}, {"PATCH", "", false},
		{"POST", "Idempotency-Key", true}, {"PATCH", "X-Idempotency-Key", true},
	} {
		req := httptest.NewRequest(tt.method, "http://127.0.0.1/", nil)
		if tt.key != "" {
			req.Header.Set(tt.key, "k")
		}
		if got := idempotent(req); got != tt.want {
			t.Errorf("idempotent(%s with %q) = %v, want %v", tt.method, tt.key, got, tt.want)
		}
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 11, 29, 13, 43, 30, 0, time.UTC)
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"-1", 0}, {"soon", 0},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{now.Add(-5 * time.Second).Format(http.TimeFormat), 0},
	} {
		resp := &http.Response{Header: http.Header{"Retry-After": {tt.value}}}
		if got := retryAfter(resp, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}
