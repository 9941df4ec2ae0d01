package graceful_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/graceful"
)

// The tests below send real signals to the test process; graceful.Server
// has installed its handler by the time start returns. They must not run in
// parallel with each other: a signal reaches every running Server.

// newMux serves the probes and /work?ms=N, which sleeps N ms and answers
// "done".
func newMux(s *graceful.Server) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/ready", s.ReadyHandler())
	mux.Handle("/live", s.LiveHandler())
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done")
	})
	return mux
}

// serving is a Server running in the background.
type serving struct {
	addr string
	done chan struct{} // closed when Serve returns
	err  error         // Serve's result, once done is closed
}

// start serves s on a loopback port and waits until it is ready.
func start(t *testing.T, ctx context.Context, s *graceful.Server) *serving {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, ctx, s, ln)
}

// startOn runs s.Serve on ln and waits until it is ready.
func startOn(t *testing.T, ctx context.Context, s *graceful.Server, ln net.Listener) *serving {
	t.Helper()
	sv := &serving{addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		sv.err = s.Serve(ctx, ln)
		close(sv.done)
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if code, err := statusOf("http://" + sv.addr + "/ready"); err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server never became ready")
		}
	}
	t.Cleanup(func() {
		select {
		case <-sv.done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return sv
}

// wait waits for Serve to return and says how long that took.
func (sv *serving) wait(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	begin := time.Now()
	select {
	case <-sv.done:
		return time.Since(begin), sv.err
	case <-time.After(within):
		t.Fatalf("Serve still running after %v", within)
		return 0, nil
	}
}

// statusOf GETs url on a new connection and returns the status code.
func statusOf(url string) (int, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func terminate(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// rawConn is an HTTP/1.1 client connection under the test's control, with
// no hidden retries and no pooling.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(path string) error {
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path)
	return err
}

// receive reads one response and its body.
func (c *rawConn) receive() (*http.Response, string, error) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

func (c *rawConn) get(path string) (*http.Response, string, error) {
	if err := c.send(path); err != nil {
		return nil, "", err
	}
	return c.receive()
}

// closedByPeer reports whether the server closes the connection within a
// couple of seconds.
func (c *rawConn) closedByPeer() bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestInFlightRequestCompletes(t *testing.T) {
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 10 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if err := c.send("/work?ms=400"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the request is in the handler
	terminate(t)
	resp, body, err := c.receive()
	if err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	if resp.StatusCode != http.StatusOK || body != "done" {
		t.Errorf("in-flight request: got %d %q, want 200 \"done\"", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Error("in-flight response on a keep-alive connection lacks Connection: close")
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v, want nil", err)
	}
}

func TestBusyKeepAliveClosesAfterResponse(t *testing.T) {
	const work = 500 * time.Millisecond
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if _, _, err := c.get("/work?ms=0"); err != nil { // the connection is now a reused keep-alive one
		t.Fatal(err)
	}
	if err := c.send(fmt.Sprintf("/work?ms=%d", work.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	terminate(t)
	signalled := time.Now()
	resp, _, err := c.receive()
	if err != nil {
		t.Fatalf("busy request: %v", err)
	}
	if !resp.Close {
		t.Error("busy response lacks Connection: close")
	}
	if !c.closedByPeer() {
		t.Error("server kept the busy connection open after its response")
	}
	_, err = sv.wait(t, 5*time.Second)
	if err != nil {
		t.Errorf("Serve: %v, want nil", err)
	}
	// Gone within the work time plus a margin, far from the 20 s deadline.
	if took := time.Since(signalled); took > work+2*time.Second {
		t.Errorf("server took %v after the signal, want under %v", took, work+2*time.Second)
	}
}

func TestIdleKeepAliveClosesWhenQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 3.5 s")
	}
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	quiet := dial(t, sv.addr) // idle for well over a second at the signal
	if _, _, err := quiet.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	recent := dial(t, sv.addr) // idle for a moment only
	if _, _, err := recent.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	busy := dial(t, sv.addr)
	if err := busy.send("/work?ms=2000"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	terminate(t)
	signalled := time.Now()
	if !quiet.closedByPeer() {
		t.Fatal("long-idle connection still open")
	}
	if took := time.Since(signalled); took > 500*time.Millisecond {
		t.Errorf("long-idle connection closed %v after the signal, want at once", took)
	}
	if !recent.closedByPeer() {
		t.Fatal("recently idle connection still open")
	}
	// Closed once quiet, before the busy request ends.
	if took := time.Since(signalled); took > 1900*time.Millisecond {
		t.Errorf("recently idle connection closed %v after the signal, want about a second", took)
	}
	if _, _, err := busy.receive(); err != nil {
		t.Errorf("busy request: %v", err)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestBackToBackKeepAliveNotDropped sends requests back to back on one
// keep-alive connection while the drain begins: the connection is idle for
// an instant between them, and none may be dropped.
func TestBackToBackKeepAliveNotDropped(t *testing.T) {
	for trial := range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &graceful.Server{HTTP: &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx, ln) }()
		c := dial(t, ln.Addr().String())
		time.AfterFunc(20*time.Millisecond, cancel)
		for n := 0; ; n++ {
			resp, _, err := c.get("/")
			if err != nil {
				t.Fatalf("trial %d: request %d dropped without a response: %v", trial, n, err)
			}
			if resp.Close {
				break
			}
		}
		if !c.closedByPeer() {
			t.Errorf("trial %d: connection open after Connection: close", trial)
		}
		if err := <-served; err != nil {
			t.Errorf("trial %d: Serve: %v", trial, err)
		}
	}
}

func TestReadinessFailsBeforeListenerCloses(t *testing.T) {
	const preStop = 600 * time.Millisecond
	s := &graceful.Server{HTTP: &http.Server{}, PreStopDelay: preStop, DrainTimeout: 5 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	keep := dial(t, sv.addr)
	if _, _, err := keep.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	terminate(t)
	signalled := time.Now()

	// During the pre-stop delay: readiness 503 and live 200 on new
	// connections (the listener is open), work served with Connection: close.
	time.Sleep(100 * time.Millisecond)
	if code, err := statusOf("http://" + sv.addr + "/ready"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/ready during pre-stop: %d, %v; want 503", code, err)
	}
	if code, err := statusOf("http://" + sv.addr + "/live"); err != nil || code != http.StatusOK {
		t.Errorf("/live during pre-stop: %d, %v; want 200", code, err)
	}
	resp, body, err := keep.get("/work?ms=0")
	if err != nil || body != "done" {
		t.Fatalf("request on a keep-alive connection during pre-stop: %q, %v", body, err)
	}
	if !resp.Close {
		t.Error("response during pre-stop lacks Connection: close")
	}
	if time.Since(signalled) >= preStop {
		t.Fatal("checks ran past the pre-stop delay; the machine is too slow for this test")
	}

	// After it: new connections are refused.
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if took := time.Since(signalled); took < preStop {
		t.Errorf("Serve returned %v after the signal, before the %v pre-stop delay", took, preStop)
	}
	if _, err := net.Dial("tcp", sv.addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after the drain: %v, want connection refused", err)
	}
}

// TestRequestOnAcceptedConnectionIsAnswered is the case that
// http.Server.Shutdown gets wrong (golang/go#75591): a connection accepted
// before the listener closed sends its first request after.
func TestRequestOnAcceptedConnectionIsAnswered(t *testing.T) {
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 5 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	quiet := dial(t, sv.addr)
	busy := dial(t, sv.addr) // keeps the drain going while quiet speaks
	if err := busy.send("/work?ms=800"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	terminate(t)
	time.Sleep(200 * time.Millisecond) // the listener is closed now
	if _, err := net.DialTimeout("tcp", sv.addr, time.Second); err == nil {
		t.Error("listener still accepting after the signal")
	}
	resp, body, err := quiet.get("/work?ms=0")
	if err != nil {
		t.Fatalf("request on a connection accepted before the drain: %v", err)
	}
	if resp.StatusCode != http.StatusOK || body != "done" || !resp.Close {
		t.Errorf("got %d %q close=%v, want 200 \"done\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if _, _, err := busy.receive(); err != nil {
		t.Errorf("busy request: %v", err)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestSilentConnectionDoesNotHoldDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the one-second quiet rule")
	}
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	silent := dial(t, sv.addr)
	time.Sleep(50 * time.Millisecond)
	terminate(t)
	if took, err := sv.wait(t, 10*time.Second); err != nil || took > 5*time.Second {
		t.Errorf("Serve: %v after %v; want nil within a few seconds", err, took)
	}
	if !silent.closedByPeer() {
		t.Error("silent connection left open")
	}
}

func TestStuckClientCannotHoldPastDeadline(t *testing.T) {
	const drain = 400 * time.Millisecond
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: drain}
	mux := newMux(s)
	block := make(chan struct{})
	defer close(block)
	mux.HandleFunc("/stuck", func(w http.ResponseWriter, r *http.Request) {
		<-block // ignores its context, as careless handlers do
	})
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	stuck := dial(t, sv.addr)
	if err := stuck.send("/stuck"); err != nil {
		t.Fatal(err)
	}
	half := dial(t, sv.addr) // sends half a request and stalls
	if _, err := io.WriteString(half, "GET /work HTTP/1.1\r\nHost: te"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	terminate(t)
	took, err := sv.wait(t, 10*time.Second)
	if !errors.Is(err, graceful.ErrDrainTimeout) {
		t.Errorf("Serve: %v, want ErrDrainTimeout", err)
	}
	if took < drain || took > drain+3*time.Second {
		t.Errorf("Serve returned %v after the signal, want about the %v deadline", took, drain)
	}
	for name, c := range map[string]*rawConn{"stuck handler": stuck, "half request": half} {
		if !c.closedByPeer() {
			t.Errorf("%s: connection left open after the deadline", name)
		}
	}
}

func TestSecondSignalStopsAtOnce(t *testing.T) {
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second}
	s.HTTP.Handler = newMux(s)
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if err := c.send("/work?ms=10000"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	terminate(t)
	time.Sleep(200 * time.Millisecond)
	terminate(t)
	took, err := sv.wait(t, 5*time.Second)
	if !errors.Is(err, graceful.ErrInterrupted) {
		t.Errorf("Serve: %v, want ErrInterrupted", err)
	}
	if took > 3*time.Second {
		t.Errorf("Serve returned %v after the second signal", took)
	}
	if !c.closedByPeer() {
		t.Error("connection left open after the second signal")
	}
}

func TestContextBeginsTermination(t *testing.T) {
	terminated := make(chan os.Signal, 1)
	s := &graceful.Server{
		HTTP:         &http.Server{},
		DrainTimeout: 5 * time.Second,
		OnTerminate:  func(sig os.Signal) { terminated <- sig },
	}
	s.HTTP.Handler = newMux(s)
	ctx, cancel := context.WithCancel(context.Background())
	sv := start(t, ctx, s)
	cancel()
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if sig := <-terminated; sig != nil {
		t.Errorf("OnTerminate got %v, want nil for a done context", sig)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background(), ln); !errors.Is(err, graceful.ErrServerUsed) {
		t.Errorf("second Serve: %v, want ErrServerUsed", err)
	}
	if _, err := net.Dial("tcp", sv.addr); err == nil {
		t.Error("listener still open")
	}
}

func TestHijackedConnectionIsDrained(t *testing.T) {
	drained := make(chan net.Conn, 1)
	s := &graceful.Server{
		HTTP:          &http.Server{},
		DrainTimeout:  5 * time.Second,
		DrainHijacked: func(c net.Conn) { drained <- c },
	}
	mux := newMux(s)
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil || line == "bye\n" {
				rw.WriteString("bye\n")
				rw.Flush()
				return
			}
			rw.WriteString(line)
			rw.Flush()
		}
	})
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if err := c.send("/echo"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(c.r, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	terminate(t)
	select {
	case <-drained:
	case <-time.After(3 * time.Second):
		t.Fatal("DrainHijacked not called")
	}
	// The application still talks on the hijacked connection, and Serve
	// waits for it.
	io.WriteString(c, "ping\n")
	if line, err := c.r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo during drain: %q, %v", line, err)
	}
	select {
	case <-sv.done:
		t.Fatalf("Serve returned %v with a hijacked connection open", sv.err)
	case <-time.After(300 * time.Millisecond):
	}
	io.WriteString(c, "bye\n")
	if _, err := sv.wait(t, 3*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestHTTP2StreamCompletes(t *testing.T) {
	var protocols, h2c http.Protocols
	protocols.SetHTTP1(true) // for start's readiness check
	protocols.SetUnencryptedHTTP2(true)
	h2c.SetUnencryptedHTTP2(true)
	s := &graceful.Server{HTTP: &http.Server{Protocols: &protocols}, DrainTimeout: 10 * time.Second}
	s.HTTP.Handler = newMux(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sv := startOn(t, context.Background(), s, &slowToNotice{Listener: ln})

	tr := &http.Transport{Protocols: &h2c}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(ms int) (*http.Response, error) {
		resp, err := client.Get(fmt.Sprintf("http://%s/work?ms=%d", sv.addr, ms))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := get(0); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("first request: %v, %v; want HTTP/2", resp, err)
	}
	result := make(chan error, 1)
	go func() {
		resp, err := get(600)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		result <- err
	}()
	time.Sleep(100 * time.Millisecond)
	terminate(t)
	if err := <-result; err != nil {
		t.Errorf("in-flight HTTP/2 stream: %v", err)
	}
	if took, err := sv.wait(t, 5*time.Second); err != nil || took > 3*time.Second {
		t.Errorf("Serve: %v after %v", err, took)
	}
}

// slowToNotice is a listener whose Accept notices its closing 200 ms late,
// as a loaded machine's scheduler can make it: http.Server.Serve then still
// holds the listener when the drain calls Shutdown, which closes it again.
type slowToNotice struct{ net.Listener }

func (l *slowToNotice) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		time.Sleep(200 * time.Millisecond)
	}
	return c, err
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		s    *graceful.Server
		want string
	}{
		{"no HTTP", &graceful.Server{}, "HTTP is nil"},
		{"pre-stop eats the budget", &graceful.Server{HTTP: &http.Server{}, PreStopDelay: 29 * time.Second}, "no drain time"},
		{"negative", &graceful.Server{HTTP: &http.Server{}, PreStopDelay: -time.Second}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			err = tt.s.Serve(context.Background(), ln)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Serve: %v, want an error containing %q", err, tt.want)
			}
			if _, err := ln.Accept(); err == nil {
				t.Error("listener left open")
			}
		})
	}
}

// A request already waiting when Serve begins must find the server ready:
// Serve marks itself serving before its first Accept. Without that order
// the first request races Serve's own start and loses only when the
// scheduler delays Serve's goroutine, as a loaded CI machine did; the
// rounds make that likelier, not certain.
func TestReadyFromFirstRequest(t *testing.T) {
	for round := range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c := dial(t, ln.Addr().String())
		if err := c.send("/ready"); err != nil {
			t.Fatal(err)
		}
		s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: time.Second}
		s.HTTP.Handler = newMux(s)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		resp, _, err := c.receive()
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Serve: %v", round, err)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: first /ready answered %d, want 200", round, resp.StatusCode)
		}
	}
}
