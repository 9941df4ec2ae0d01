package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestH2ServeExit sends GETs over HTTP/2 to `closingtime serve --shutdown
// exit` from both clients and stops it with SIGTERM with requests in
// flight: see serveExitCuts.
func TestH2ServeExit(t *testing.T) {
	serveExitCuts(t, "h2c://%s/work")
}

// TestH2ServeGraceful: a graceful server's Shutdown says GOAWAY on its
// HTTP/2 connections and lets every request it took finish: the clients
// see no request cut, only, once its listener has closed, refused
// connects.
func TestH2ServeGraceful(t *testing.T) {
	if testing.Short() {
		t.Skip("builds closingtime and runs it for seconds")
	}
	cmd, address, _ := startServe(t, "--work", "300ms", "--shutdown", "graceful", "--drain-timeout", "10s")
	var failures []string
	report := callThroughSIGTERM(t, cmd, "h2c://"+address+"/work", func(r Result) {
		if r.Class.Failed() && r.Class != Refused {
			failures = append(failures, fmt.Sprintf("%s: %v", r.Class, r.Err))
		}
	})
	for _, c := range report.Clients {
		if c.Totals[OK] == 0 || c.Totals.Failed() != c.Totals[Refused] {
			t.Errorf("%s: totals %s, want requests answered, and no failure but refused connects after the drain; the others: %q", c.Kind, formatCounts(&c.Totals), failures)
		}
	}
}

// serveH2 serves h on l over HTTP/2 without TLS, and over HTTP/1.1 if
// http1, until the test ends.
func serveH2(t *testing.T, l net.Listener, http1 bool, h http.HandlerFunc) {
	t.Helper()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(!http1)
	protocols.SetHTTP1(http1)
	srv := &http.Server{Handler: h, Protocols: &protocols}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

func podHandler(w http.ResponseWriter, _ *http.Request) { w.Header().Set(PodHeader, "bench") }

// TestH2TransparentRetryAbsorbed: the first connection of a keep-alive
// client says GOAWAY, last stream 0, to the request's stream, which it
// never processed; net/http's Transport sends the request again by itself
// on a new connection, to the real server, which answers. The request is
// OK with its first attempt closed: absorbed, counted, not hidden.
func TestH2TransparentRetryAbsorbed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refuser := &refuseFirst{Listener: ln, refused: make(chan uint32, 1)}
	serveH2(t, refuser, false, podHandler)

	c := newH2Client((&net.Dialer{}).DialContext, 5*time.Second, 5*time.Second, 1, Limits{})
	defer c.close()
	s := &httpSender{rt: c, fresh: c, closeIdle: c.close, template: h2Template(t, ln.Addr())}
	var log attemptLog
	start := time.Now()
	err = s.send("retried-id", &log, false)
	if err != nil {
		t.Fatalf("request: %v, want OK after a transparent retry", err)
	}
	if id := <-refuser.refused; id == 0 {
		t.Fatal("the first connection saw no stream")
	}
	r := newResult(KeepAlive, "retried-id", start, start, log.attempts, err)
	if r.Attempts != 2 || !r.Absorbed() || r.FirstClass != Closed || r.Pod != "bench" || r.ConnRequests != 0 || !log.attempts[0].addr.IsValid() {
		t.Errorf("result: %d attempts, class %s, first %s, pod %q, %d requests on its connection before; want 2 attempts, the first closed on its connection's address, the last OK from bench on a new connection",
			r.Attempts, r.Class, r.FirstClass, r.Pod, r.ConnRequests)
	}
	if r.FirstFailure == nil || !errors.Is(r.FirstFailure.Err, ErrTransparentRetry) {
		t.Errorf("first failure %+v, want the transparent retry's", r.FirstFailure)
	}
}

func h2Template(t *testing.T, addr net.Addr) *http.Request {
	t.Helper()
	target, err := parseTarget("h2c://" + addr.String() + "/work")
	if err != nil {
		t.Fatal(err)
	}
	req, err := newTemplate(target)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestH2Failures: what the HTTP/2 client makes of a server that answers in
// HTTP/1.1 or in HTML (an error that says it does not speak HTTP/2), of
// one that answers too late (a response timeout), and of a port where
// nothing listens (refused).
func TestH2Failures(t *testing.T) {
	http1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveH2(t, http1, true, podHandler)
	slow, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveH2(t, slow, false, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	// A server that answers anything with a page of HTML and no status
	// line, as Python's http.server answers the HTTP/2 preface.
	html, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { html.Close() })
	go func() {
		for {
			c, err := html.Accept()
			if err != nil {
				return
			}
			// It reads the request line, "PRI * HTTP/2.0", before it
			// answers, so that closing sends a FIN, not a reset.
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("<!DOCTYPE HTML>\n<html><body>505</body></html>\n"))
			c.Close()
		}
	}()

	for _, tt := range []struct {
		name    string
		addr    net.Addr
		want    Class
		wantErr error
	}{
		{"http1", http1.Addr(), Error, ErrNotH2C},
		{"html", html.Addr(), Error, ErrNotH2C},
		{"slow", slow.Addr(), ResponseTimeout, nil},
		{"closed", closed.Addr(), Refused, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newH2Client((&net.Dialer{}).DialContext, time.Second, 300*time.Millisecond, 1, Limits{})
			defer c.close()
			s := &httpSender{rt: c, fresh: c, closeIdle: c.close, template: h2Template(t, tt.addr)}
			var log attemptLog
			err := s.send("id", &log, false)
			if len(log.attempts) != 1 {
				t.Fatalf("%d attempts, want 1", len(log.attempts))
			}
			a := log.attempts[0]
			if a.class != tt.want || err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("class %s, error %v; want %s, %v", a.class, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestWaitServingNotH2C: WaitServing gives up at once on a server that
// answers an h2c URL in HTTP/1.1: waiting would not change it.
func TestWaitServingNotH2C(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveH2(t, ln, true, podHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = WaitServing(ctx, Config{URL: "h2c://" + ln.Addr().String() + "/"}, nil)
	if !errors.Is(err, ErrNotH2C) || ctx.Err() != nil {
		t.Errorf("WaitServing after %v: %v; want ErrNotH2C at once", time.Since(start), err)
	}
	if !strings.Contains(err.Error(), `its first bytes were "HTTP/1.1 `) {
		t.Errorf("error %q: want the server's first bytes quoted", err)
	}
}

// TestH2ConnectTimeoutNamesTheAddress: a connect that times out is a
// connect-timeout whose attempt keeps the address its dial tried, by which
// the diagnosis finds the pod, from a client with a connection per request
// and from one that keeps them.
func TestH2ConnectTimeoutNamesTheAddress(t *testing.T) {
	// A dialer whose connects are never answered, as a gone pod's
	// address's: it gives up at ctx's end as net.Dialer does.
	hang := func(ctx context.Context, network, address string) (net.Conn, error) {
		<-ctx.Done()
		ap := netip.MustParseAddrPort(address)
		return nil, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: os.ErrDeadlineExceeded}
	}
	for _, connections := range []int{0, 1} {
		c := newH2Client(hang, 200*time.Millisecond, time.Second, connections, Limits{})
		s := &httpSender{rt: c, fresh: c, closeIdle: c.close, template: h2Template(t, &net.TCPAddr{IP: net.IPv4(10, 244, 1, 9), Port: 8080})}
		var log attemptLog
		err := s.send("id", &log, false)
		c.close()
		a := log.attempts[len(log.attempts)-1]
		if a.class != ConnectTimeout || a.addr.String() != "10.244.1.9:8080" || err == nil {
			t.Errorf("%d connections: class %s, address %v, error %v; want a connect-timeout to 10.244.1.9:8080", connections, a.class, a.addr, err)
		}
	}
}

// TestH2NewConnClosesWhatItGaveUp: a client with a connection per request
// leaves none open after requests that its response timeout ended.
func TestH2NewConnClosesWhatItGaveUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	counted := &countingListener{Listener: ln, open: &open}
	serveH2(t, counted, false, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	})
	c := newH2Client((&net.Dialer{}).DialContext, time.Second, 100*time.Millisecond, 0, Limits{})
	s := &httpSender{rt: c, fresh: c, closeIdle: c.close, template: h2Template(t, ln.Addr())}
	for i := range 5 {
		var log attemptLog
		s.send(strconv.Itoa(i), &log, false)
		if cl := log.attempts[0].class; cl != ResponseTimeout {
			t.Fatalf("request %d: class %s, want response-timeout", i, cl)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open.Load(); n > 0 {
		t.Errorf("%d connections still open 10 s after their requests gave up", n)
	}
}

// countingListener counts its connections that are open.
type countingListener struct {
	net.Listener
	open *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, open: l.open}, nil
}

type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
