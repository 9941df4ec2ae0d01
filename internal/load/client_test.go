package load

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// rawServer accepts connections on a loopback port and hands each to
// handle, which owns it. It stops when the test ends.
func rawServer(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, handle)
	return ln.Addr().String()
}

// serveOn accepts connections on ln and hands each to handle, which owns
// it, until ln is closed; the test's end closes it.
func serveOn(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { handle(conn) })
		}
	})
}

// abort closes conn with a TCP RST (SO_LINGER 0), as the kernel of a killed
// process does.
func abort(conn net.Conn) {
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
}

// readRequest reads one request from br and discards its body.
func readRequest(br *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, req.Body)
	return req, nil
}

func writeOK(conn net.Conn, pod string) {
	io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Pod-Name: "+pod+"\r\nContent-Length: 2\r\n\r\nok")
}

// fullBacklog returns a loopback address whose listener never accepts and
// whose accept queue is full, so that the kernel drops new SYNs and a
// connect hangs until it times out.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the queue until a connect hangs.
	for range 16 {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if !timedOut(err) {
				t.Fatalf("filling the backlog of %s: %v", addr, err)
			}
			return addr
		}
		t.Cleanup(func() { conn.Close() })
	}
	t.Fatalf("the backlog of %s never filled", addr)
	return ""
}

// roundTrip sends a GET to address with c and returns the attempts it
// logged.
func roundTrip(t *testing.T, c *client, address, id string) []attempt {
	t.Helper()
	var log attemptLog
	req, err := http.NewRequestWithContext(withAttemptLog(context.Background(), &log), http.MethodGet, "http://"+address+"/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(RequestIDHeader, id)
	resp, err := c.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	if len(log.attempts) != 1 {
		t.Fatalf("request %s logged %d attempts, want 1", id, len(log.attempts))
	}
	return log.attempts
}

func testClient(address string, connections int) *client {
	return newClient((&net.Dialer{}).DialContext, address, time.Second, 500*time.Millisecond, connections, Limits{})
}

// TestClasses provokes each class with a real socket and checks how the
// client sorts it, in both connection modes.
func TestClasses(t *testing.T) {
	tests := []struct {
		name   string
		target func(t *testing.T) string
		want   Class
	}{
		{name: "ok", want: OK, target: func(t *testing.T) string {
			return rawServer(t, func(conn net.Conn) {
				defer conn.Close()
				if _, err := readRequest(bufio.NewReader(conn)); err == nil {
					writeOK(conn, "pod-a")
				}
			})
		}},
		{name: "refused", want: Refused, target: testbinary.ClosedAddr},
		{name: "reset", want: Reset, target: func(t *testing.T) string {
			return rawServer(t, func(conn net.Conn) {
				readRequest(bufio.NewReader(conn))
				abort(conn)
			})
		}},
		{name: "closed", want: Closed, target: func(t *testing.T) string {
			return rawServer(t, func(conn net.Conn) {
				readRequest(bufio.NewReader(conn))
				conn.Close()
			})
		}},
		{name: "truncated", want: Reset, target: func(t *testing.T) string {
			return rawServer(t, func(conn net.Conn) {
				readRequest(bufio.NewReader(conn))
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
				conn.Close()
			})
		}},
		{name: "connect timeout", want: ConnectTimeout, target: fullBacklog},
		{name: "response timeout", want: ResponseTimeout, target: func(t *testing.T) string {
			done := make(chan struct{})
			address := rawServer(t, func(conn net.Conn) {
				defer conn.Close()
				readRequest(bufio.NewReader(conn))
				<-done
			})
			t.Cleanup(func() { close(done) }) // runs before rawServer's
			return address
		}},
		{name: "http5xx", want: HTTP5xx, target: func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "draining", http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().String()
		}},
		{name: "not HTTP", want: Error, target: func(t *testing.T) string {
			return rawServer(t, func(conn net.Conn) {
				defer conn.Close()
				readRequest(bufio.NewReader(conn))
				io.WriteString(conn, "SSH-2.0-OpenSSH_9.6\r\n\r\n")
			})
		}},
	}
	for _, tt := range tests {
		for _, mode := range []struct {
			name        string
			connections int
		}{{"new-conn", 0}, {"keep-alive", 2}} {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				address := tt.target(t)
				c := testClient(address, mode.connections)
				defer c.close()
				a := roundTrip(t, c, address, "r1")[0]
				if a.class != tt.want {
					t.Errorf("class %s (error %v), want %s", a.class, a.err, tt.want)
				}
				if (a.err != nil) != tt.want.Failed() && tt.want != HTTP5xx {
					t.Errorf("error %v with class %s", a.err, a.class)
				}
				if a.end.Before(a.start) {
					t.Errorf("attempt ended at %v, before its start %v", a.end, a.start)
				}
			})
		}
	}
}

// keepAliveServer serves requests on each connection until the request
// number drop (counted from 1 per connection), on which it does what drop
// says; it records every request id it read.
type keepAliveServer struct {
	mu  sync.Mutex
	ids map[string]int // request id → times seen
}

func (s *keepAliveServer) seen(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func (s *keepAliveServer) start(t *testing.T, dropAt int, drop func(net.Conn)) string {
	s.ids = make(map[string]int)
	return rawServer(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for n := 1; ; n++ {
			req, err := readRequest(br)
			if err != nil {
				conn.Close()
				return
			}
			s.mu.Lock()
			s.ids[req.Header.Get(RequestIDHeader)]++
			s.mu.Unlock()
			if n == dropAt {
				drop(conn)
				return
			}
			writeOK(conn, "pod-a")
		}
	})
}

// TestReusedConnResetCounted: a reset on a reused keep-alive connection is
// counted as a reset, and the request is not sent again. net/http's
// Transport would resend this GET on a new connection by itself and report
// success.
func TestReusedConnResetCounted(t *testing.T) {
	for _, drop := range []struct {
		name string
		do   func(net.Conn)
		want Class
	}{
		{"reset", abort, Reset},
		{"close", func(c net.Conn) { c.Close() }, Closed},
	} {
		t.Run(drop.name, func(t *testing.T) {
			var srv keepAliveServer
			address := srv.start(t, 2, drop.do)
			c := testClient(address, 1)
			defer c.close()
			if a := roundTrip(t, c, address, "r1")[0]; a.class != OK || a.connRequests != 0 {
				t.Fatalf("first request: %s (%v), on a connection that carried %d requests; want ok on a new connection", a.class, a.err, a.connRequests)
			}
			a := roundTrip(t, c, address, "r2")[0]
			if a.class != drop.want || a.connRequests != 1 {
				t.Errorf("request on the reused connection: %s (%v), on a connection that carried %d requests; want %s, after 1", a.class, a.err, a.connRequests, drop.want)
			}
			if n := srv.seen("r2"); n != 1 {
				t.Errorf("server read the failed request %d times, want 1", n)
			}
		})
	}
}

// TestConnEvidence: the requests on one keep-alive connection record how
// many requests it had carried before each, 0, 1 and 2, and an age that
// grows from 0 for the new connection; a new-conn client's are all new.
func TestConnEvidence(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	address := srv.Listener.Addr().String()
	k := testClient(address, 1)
	defer k.close()
	var age time.Duration
	for n, id := range []string{"r0", "r1", "r2"} {
		a := roundTrip(t, k, address, id)[0]
		if a.class != OK || a.connRequests != n {
			t.Fatalf("request %s: %s (%v) on a connection that carried %d requests, want ok after %d", id, a.class, a.err, a.connRequests, n)
		}
		if (n == 0 && a.connAge != 0) || (n > 0 && a.connAge <= age) {
			t.Errorf("request %s: connection %v old, after %v for the one before; want 0 for a new one, then growing", id, a.connAge, age)
		}
		age = a.connAge
	}
	c := testClient(address, 0)
	for _, id := range []string{"n0", "n1"} {
		if a := roundTrip(t, c, address, id)[0]; a.connRequests != 0 || a.connAge != 0 {
			t.Errorf("new-conn request %s: on a connection that carried %d requests, %v old; want a new one", id, a.connRequests, a.connAge)
		}
	}
}

// TestIdleCloseNotCounted: a keep-alive connection that the server closed
// while it was idle is dropped before use, as net/http and Node drop it,
// and the request goes out on a new connection.
func TestIdleCloseNotCounted(t *testing.T) {
	closed := make(chan struct{}, 3)
	address := rawServer(t, func(conn net.Conn) {
		if _, err := readRequest(bufio.NewReader(conn)); err == nil {
			writeOK(conn, "pod-a")
		}
		conn.Close() // idle close, after the response
		closed <- struct{}{}
	})
	c := testClient(address, 1)
	defer c.close()
	for _, id := range []string{"r1", "r2", "r3"} {
		if a := roundTrip(t, c, address, id)[0]; a.class != OK || a.connRequests != 0 || a.connAge != 0 {
			t.Fatalf("request %s: %s (%v), on a connection that carried %d requests, %v old; want ok on a new connection", id, a.class, a.err, a.connRequests, a.connAge)
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("server did not close the connection")
		}
	}
}

// TestNewConnAsksServerToClose: a new-conn client asks the server to close
// the connection, so that TIME_WAIT lands on the server; a keep-alive
// client does not.
func TestNewConnAsksServerToClose(t *testing.T) {
	var (
		mu         sync.Mutex
		closeAsked = make(map[string]bool)
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		closeAsked[r.Header.Get(RequestIDHeader)] = r.Close
		mu.Unlock()
	}))
	defer srv.Close()
	address := srv.Listener.Addr().String()
	roundTrip(t, testClient(address, 0), address, "new-conn")
	k := testClient(address, 1)
	defer k.close()
	roundTrip(t, k, address, "keep-alive")
	mu.Lock()
	defer mu.Unlock()
	if !closeAsked["new-conn"] || closeAsked["keep-alive"] {
		t.Errorf("Connection: close asked by new-conn %t, keep-alive %t; want true, false", closeAsked["new-conn"], closeAsked["keep-alive"])
	}
}

// TestPoolWaitTimesOut: a request that finds every pooled connection busy
// waits at most the connect timeout, and is then a connect-timeout.
func TestPoolWaitTimesOut(t *testing.T) {
	// entered has room for a second request, so that a client that wrongly
	// let one through fails the test instead of blocking the handler.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	defer srv.Close()
	address := srv.Listener.Addr().String()
	c := newClient((&net.Dialer{}).DialContext, address, 100*time.Millisecond, 5*time.Second, 1, Limits{})
	defer c.close()
	var busy sync.WaitGroup
	defer busy.Wait()
	defer close(release)
	busy.Go(func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+address+"/", nil)
		c.RoundTrip(req)
	})
	<-entered // the busy request holds the only connection
	a := roundTrip(t, c, address, "waiting")[0]
	if a.class != ConnectTimeout || !errors.Is(a.err, os.ErrDeadlineExceeded) {
		t.Errorf("request waiting for the only connection: %s (%v), want connect-timeout", a.class, a.err)
	}
}

// TestPoolLimits: a keep-alive client's idle limit retires a connection
// that waited in the pool longer, never one kept busy; its lifetime limit
// retires a connection once it is that old, busy or not.
func TestPoolLimits(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close) // after the parallel subtests
	address := srv.Listener.Addr().String()
	const limit = 300 * time.Millisecond
	// send sends a request every 50 ms until the client has been in use
	// for 4 limits, and returns the number of connections it used.
	send := func(t *testing.T, c *client) int {
		conns := 0
		for start := time.Now(); time.Since(start) < 4*limit; time.Sleep(limit / 6) {
			a := roundTrip(t, c, address, "r")[0]
			if a.class != OK {
				t.Fatalf("%s (%v), want ok", a.class, a.err)
			}
			if a.connRequests == 0 {
				conns++
			}
		}
		return conns
	}
	newPooled := func(limits Limits) *client {
		return newClient((&net.Dialer{}).DialContext, address, time.Second, time.Second, 1, limits)
	}

	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		c := newPooled(Limits{MaxIdle: limit})
		defer c.close()
		if n := send(t, c); n != 1 {
			t.Errorf("a connection kept busy: %d connections, want 1, never retired by the idle limit", n)
		}
		time.Sleep(2 * limit)
		if a := roundTrip(t, c, address, "after-idle")[0]; a.connRequests != 0 {
			t.Errorf("after %v idle, the request went on a connection that had carried %d requests, want a new one", 2*limit, a.connRequests)
		}
	})
	t.Run("lifetime", func(t *testing.T) {
		t.Parallel()
		c := newPooled(Limits{MaxIdle: limit, MaxLifetime: limit})
		defer c.close()
		if n := send(t, c); n < 2 {
			t.Errorf("over 4 lifetimes, %d connections, want a new one at least once a lifetime", n)
		}
	})
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		c := newPooled(Limits{})
		defer c.close()
		send(t, c)
		time.Sleep(2 * limit)
		if a := roundTrip(t, c, address, "after-idle")[0]; a.connRequests == 0 {
			t.Error("without limits, the idle connection was not reused")
		}
	})
}
