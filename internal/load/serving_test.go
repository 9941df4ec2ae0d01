package load

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWaitServing: WaitServing returns once the target has answered ten
// requests in a row, each on a new connection; a refused connect or a 5xx
// starts the count again.
func TestWaitServing(t *testing.T) {
	t.Parallel()
	// A port where nothing listens yet: every connect is refused until the
	// server starts on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var mu sync.Mutex
	var statuses []int // of every request, in order
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		status := http.StatusOK
		if len(statuses) < 15 && len(statuses)%5 == 4 {
			// Ten in a row are needed: the 5th, 10th and 15th fail.
			status = http.StatusServiceUnavailable
		}
		statuses = append(statuses, status)
		w.WriteHeader(status)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dials, refused int
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, address)
		mu.Lock()
		dials++
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
		}
		mu.Unlock()
		return c, err
	}
	done := make(chan error, 1)
	var failures []error
	go func() {
		done <- WaitServing(ctx, Config{URL: "http://" + addr + "/", Dial: dial}, func(err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("WaitServing returned %v while nothing listened", err)
	case <-time.After(500 * time.Millisecond):
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv.Listener = ln
	srv.Start()
	if err := <-done; err != nil {
		t.Fatalf("WaitServing: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Refused (every 100 ms for 500 ms), then three times 4 ok and a 503,
	// then the 10 ok in a row.
	if refused < 2 {
		t.Errorf("%d refused connects before the server started, want some", refused)
	}
	if len(statuses) != 25 {
		t.Errorf("%d requests answered (%v), want 25: three times 4 ok and a 503, then 10 ok", len(statuses), statuses)
	}
	if conns != len(statuses) || dials != refused+len(statuses) {
		t.Errorf("%d connections for %d answers (%d dials, %d refused): want a new connection for each request", conns, len(statuses), dials, refused)
	}
	// Each failure is told: the refused connects, then the three 503s.
	if len(failures) != refused+3 || !strings.Contains(failures[0].Error(), "connection refused") || failures[len(failures)-1].Error() != "status 503 Service Unavailable" {
		t.Errorf("failures told %q, want the %d refused connects, then three times status 503 Service Unavailable", failures, refused)
	}
}

// TestWaitServingTimeout: a target that never answers ten in a row is an
// error once ctx ends, that says what it waited for and the last failure.
func TestWaitServingTimeout(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if n++; n%9 == 0 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := WaitServing(ctx, Config{URL: srv.URL}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "10 requests in a row") || !strings.Contains(err.Error(), "502") {
		t.Errorf("WaitServing: %v, want the deadline, the rule and the last status", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("WaitServing took %v with a 1 s deadline", elapsed)
	}
	if err := WaitServing(context.Background(), Config{URL: "::"}, nil); err == nil || !strings.Contains(err.Error(), "want http://HOST:PORT/PATH") {
		t.Errorf("WaitServing of a URL that does not parse: %v, want the form wanted", err)
	}
}

// TestWaitServingTimeouts: each request of WaitServing is bounded by the
// run's own timeouts, not the defaults: a target that answers in 300 ms
// never serves within a 100 ms response timeout, nor a target that is not
// dialed within a 100 ms connect timeout, and the failures told, and the
// error once ctx ends, name the timeout that passed. Both answer well
// within the defaults.
func TestWaitServingTimeouts(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	slowDial := func(ctx context.Context, network, address string) (net.Conn, error) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		}
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "response", cfg: Config{URL: srv.URL + "/work", ResponseTimeout: 100 * time.Millisecond},
			want: "no complete response within 100ms of connecting, the response timeout"},
		{name: "connect", cfg: Config{URL: srv.URL + "/work", ConnectTimeout: 100 * time.Millisecond, Dial: slowDial},
			want: "no connection within 100ms, the connect timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var mu sync.Mutex
			var failures []string
			err := WaitServing(ctx, tt.cfg, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				failures = append(failures, err.Error())
			})
			if !errors.Is(err, context.DeadlineExceeded) || !strings.HasSuffix(err.Error(), "(last failure: "+tt.want+")") {
				t.Errorf("WaitServing: %v, want the deadline and the last failure %q", err, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(failures) < 2 || failures[0] != tt.want {
				t.Errorf("failures told %q, want several, each %q", failures, tt.want)
			}
		})
	}
}
