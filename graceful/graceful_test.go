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
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/closingtime-dev/closingtime/graceful"
)

// The tests below send real signals to the test process; graceful.Server
// has installed its handler by the time start returns. They must not run in
// parallel with each other: a signal reaches every running Server.

// newMux serves the probes and /work?ms=N, which sleeps N ms and answers
// "done". As each /work request enters the handler, its URI is sent on
// entered if the channel has room; see waitEntered.
func newMux(s *graceful.Server) (mux *http.ServeMux, entered <-chan string) {
	mux = http.NewServeMux()
	mux.Handle("/ready", s.ReadyHandler())
	mux.Handle("/live", s.LiveHandler())
	in := make(chan string, 64)
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		select {
		case in <- r.URL.RequestURI():
		default:
		}
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done")
	})
	return mux, in
}

// waitEntered waits until a request for uri has entered newMux's /work
// handler.
func waitEntered(t *testing.T, entered <-chan string, uri string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-entered:
			if got == uri {
				return
			}
		case <-timeout:
			t.Fatalf("%s never entered its handler", uri)
		}
	}
}

// accepts records, through an http.Server's ConnState hook, the client
// address of every connection that the server has accepted.
type accepts struct {
	mu   sync.Mutex
	seen map[string]bool
}

// watchAccepts chains a recorder to hs's ConnState hook; hs must not be
// serving yet.
func watchAccepts(hs *http.Server) *accepts {
	a := &accepts{seen: make(map[string]bool)}
	next := hs.ConnState
	hs.ConnState = func(c net.Conn, state http.ConnState) {
		if state == http.StateNew {
			a.mu.Lock()
			a.seen[c.RemoteAddr().String()] = true
			a.mu.Unlock()
		}
		if next != nil {
			next(c, state)
		}
	}
	return a
}

// wait waits until the server has accepted c.
func (a *accepts) wait(t *testing.T, c *rawConn) {
	t.Helper()
	addr := c.LocalAddr().String()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		a.mu.Lock()
		ok := a.seen[addr]
		a.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection from %s never accepted", addr)
		}
	}
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

// startOn runs s.Serve on ln and waits until it is ready. If the test ends
// with Serve still running, ctx is cancelled, so that the Server does not
// catch the signals of the tests that follow.
func startOn(t *testing.T, ctx context.Context, s *graceful.Server, ln net.Listener) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
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
		cancel()
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

// listenerClosed reports whether dials to addr are refused within the given
// time.
func listenerClosed(addr string, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
		if err == nil {
			c.Close()
		}
	}
	return false
}

func terminate(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// termination records when a Server's termination began, through its
// OnTerminate hook: the signal reaches the Server some time after the test
// sends it, longer on a loaded machine.
type termination chan time.Time

func newTermination() termination { return make(termination, 1) }

func (tc termination) hook(os.Signal) { tc <- time.Now() }

// wait waits until termination has begun and says when it did.
func (tc termination) wait(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-tc:
		return at
	case <-time.After(5 * time.Second):
		t.Fatal("termination never began")
		return time.Time{}
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
// few seconds.
func (c *rawConn) closedByPeer() bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestInFlightRequestCompletes(t *testing.T) {
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 10 * time.Second}
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if err := c.send("/work?ms=400"); err != nil {
		t.Fatal(err)
	}
	waitEntered(t, entered, "/work?ms=400")
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
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if _, _, err := c.get("/work?ms=0"); err != nil { // the connection is now a reused keep-alive one
		t.Fatal(err)
	}
	uri := fmt.Sprintf("/work?ms=%d", work.Milliseconds())
	if err := c.send(uri); err != nil {
		t.Fatal(err)
	}
	waitEntered(t, entered, uri)
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
		t.Skip("takes 6 s")
	}
	began := newTermination()
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second, OnTerminate: began.hook}
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	// Idle for well over a second at the signal, which once closed a
	// connection at once: one stays silent, one speaks as the drain begins.
	silent, speaks := dial(t, sv.addr), dial(t, sv.addr)
	for _, c := range []*rawConn{silent, speaks} {
		if _, _, err := c.get("/work?ms=0"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1700 * time.Millisecond)
	recent := dial(t, sv.addr) // idle for a moment only
	if _, _, err := recent.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	busy := dial(t, sv.addr) // keeps the drain going past the quiet rule
	if err := busy.send("/work?ms=4000"); err != nil {
		t.Fatal(err)
	}
	waitEntered(t, entered, "/work?ms=4000")
	terminate(t)
	beganAt := began.wait(t)
	// However long a connection was idle before, the drain gives it a
	// second to speak: its client may be sending right now.
	resp, body, err := speaks.get("/work?ms=0")
	if err != nil || body != "done" {
		t.Fatalf("request on a long-idle connection as the drain began: %q, %v", body, err)
	}
	if !resp.Close {
		t.Error("response during the drain lacks Connection: close")
	}
	// Closed once quiet, about a second after termination began, well
	// before the busy request ends.
	for name, c := range map[string]*rawConn{"long-idle": silent, "recently idle": recent} {
		if !c.closedByPeer() {
			t.Fatalf("%s connection still open", name)
		}
		if took := time.Since(beganAt); took > 3*time.Second {
			t.Errorf("%s connection closed %v after termination began, want about a second", name, took)
		}
	}
	if _, _, err := busy.receive(); err != nil {
		t.Errorf("busy request: %v", err)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestRequestInKernelDuringStallIsAnswered stalls the server's reading of a
// keep-alive connection, as a throttled or descheduled process is stalled,
// while its client's next request waits in the kernel: the connection looks
// idle for longer than a second, and closing it would drop that request.
func TestRequestInKernelDuringStallIsAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the one-second quiet rule")
	}
	began := newTermination()
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second, OnTerminate: began.hook}
	s.HTTP.Handler, _ = newMux(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stalling := &stallingListener{Listener: ln, release: make(chan struct{})}
	// Once a connection is idle after its first response, its next read
	// stalls until released.
	s.HTTP.ConnState = func(nc net.Conn, state http.ConnState) {
		if state == http.StateIdle {
			stalling.stall(nc.RemoteAddr().String())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sv := startOn(t, ctx, s, stalling)

	c := dial(t, sv.addr)
	if _, _, err := c.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	if err := c.send("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	cancel()
	began.wait(t)
	// Well past the quiet rule's second of drain time.
	time.Sleep(3 * graceful.QuietGrace)
	close(stalling.release)
	resp, body, err := c.receive()
	if err != nil {
		_, serveErr := sv.wait(t, 5*time.Second)
		t.Fatalf("request that waited in the kernel during the stall was dropped: %v (Serve: %v)", err, serveErr)
	}
	if resp.StatusCode != http.StatusOK || body != "done" || !resp.Close {
		t.Errorf("got %d %q close=%v, want 200 \"done\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestPartialRequestDuringDrainIsAnswered: a keep-alive client whose next
// request arrives in two parts, a pause longer than the quiet rule's second
// between them (a lost segment's retransmission, a slow client), is
// answered: an idle connection that has read part of a request carries one.
func TestPartialRequestDuringDrainIsAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the one-second quiet rule")
	}
	began := newTermination()
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 20 * time.Second, OnTerminate: began.hook}
	s.HTTP.Handler, _ = newMux(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sv := start(t, ctx, s)

	c := dial(t, sv.addr)
	if _, _, err := c.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	cancel()
	began.wait(t)
	if _, err := io.WriteString(c, "GET /work?ms=0 HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * graceful.QuietGrace)
	if _, err := io.WriteString(c, "Host: test\r\n\r\n"); err != nil {
		t.Fatalf("rest of the request: %v", err)
	}
	resp, body, err := c.receive()
	if err != nil {
		t.Fatalf("request that arrived in two parts during the drain was dropped: %v", err)
	}
	if resp.StatusCode != http.StatusOK || body != "done" || !resp.Close {
		t.Errorf("got %d %q close=%v, want 200 \"done\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// stallingListener hands out connections whose next read, once stall has
// named them, waits until release is closed, without taking anything from
// the kernel meanwhile.
type stallingListener struct {
	net.Listener
	release chan struct{}
	mu      sync.Mutex
	conns   map[string]*stallingConn // by client address
}

func (l *stallingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &stallingConn{TCPConn: nc.(*net.TCPConn), release: l.release}
	l.mu.Lock()
	if l.conns == nil {
		l.conns = make(map[string]*stallingConn)
	}
	l.conns[nc.RemoteAddr().String()] = c
	l.mu.Unlock()
	return c, nil
}

// stall makes the next read of the connection from client wait, once.
func (l *stallingListener) stall(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[client]; c != nil {
		c.once.Do(func() { c.armed.Store(true) })
	}
}

type stallingConn struct {
	*net.TCPConn
	release chan struct{}
	once    sync.Once
	armed   atomic.Bool
}

func (c *stallingConn) Read(b []byte) (int, error) {
	if c.armed.Swap(false) {
		<-c.release
	}
	return c.TCPConn.Read(b)
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
		// The drain begins 20 ms after the connection is known to be
		// accepted, during the requests that follow.
		if resp, _, err := c.get("/"); err != nil || resp.Close {
			t.Fatalf("trial %d: first request: %v, %v", trial, resp, err)
		}
		time.AfterFunc(20*time.Millisecond, cancel)
		for n := 1; ; n++ {
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
	const preStop = 1500 * time.Millisecond
	began := newTermination()
	s := &graceful.Server{
		HTTP:         &http.Server{},
		PreStopDelay: preStop,
		DrainTimeout: 5 * time.Second,
		OnTerminate:  began.hook,
	}
	s.HTTP.Handler, _ = newMux(s)
	sv := start(t, context.Background(), s)

	keep := dial(t, sv.addr)
	if _, _, err := keep.get("/work?ms=0"); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	terminate(t)

	// During the pre-stop delay: readiness 503 and live 200 on new
	// connections (the listener is open), work served with Connection: close.
	beganAt := began.wait(t)
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
	if time.Since(beganAt) >= preStop {
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
	// Termination waits in OnTerminate, before the listener closes, for the
	// quiet connection to be accepted: from then on the drain gives it a
	// second to send its request, a margin that the signal's delivery,
	// however late, does not eat into.
	began, proceed := make(chan struct{}), make(chan struct{})
	s := &graceful.Server{
		HTTP:         &http.Server{},
		DrainTimeout: 5 * time.Second,
		OnTerminate: func(os.Signal) {
			close(began)
			select {
			case <-proceed:
			case <-time.After(5 * time.Second):
			}
		},
	}
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	accepted := watchAccepts(s.HTTP)
	sv := start(t, context.Background(), s)

	busy := dial(t, sv.addr) // keeps the drain going while quiet speaks
	if err := busy.send("/work?ms=1500"); err != nil {
		t.Fatal(err)
	}
	waitEntered(t, entered, "/work?ms=1500")
	terminate(t)
	select {
	case <-began:
	case <-time.After(5 * time.Second):
		t.Fatal("termination never began")
	}
	quiet := dial(t, sv.addr)
	accepted.wait(t, quiet)
	close(proceed)
	if !listenerClosed(sv.addr, 3*time.Second) {
		t.Fatal("listener still accepting 3 s after the signal")
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
	s.HTTP.Handler, _ = newMux(s)
	accepted := watchAccepts(s.HTTP)
	sv := start(t, context.Background(), s)

	silent := dial(t, sv.addr)
	accepted.wait(t, silent)
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
	mux, _ := newMux(s)
	stuckIn := make(chan struct{})
	block := make(chan struct{})
	defer close(block)
	mux.HandleFunc("/stuck", func(w http.ResponseWriter, r *http.Request) {
		close(stuckIn)
		<-block // ignores its context, as careless handlers do
	})
	s.HTTP.Handler = mux
	accepted := watchAccepts(s.HTTP)
	sv := start(t, context.Background(), s)

	stuck := dial(t, sv.addr)
	if err := stuck.send("/stuck"); err != nil {
		t.Fatal(err)
	}
	half := dial(t, sv.addr) // sends half a request and stalls
	if _, err := io.WriteString(half, "GET /work HTTP/1.1\r\nHost: te"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stuckIn:
	case <-time.After(5 * time.Second):
		t.Fatal("/stuck never entered its handler")
	}
	accepted.wait(t, half)
	signalled := time.Now()
	terminate(t)
	_, err := sv.wait(t, 10*time.Second)
	took := time.Since(signalled)
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
	began := newTermination()
	s := &graceful.Server{
		HTTP:         &http.Server{},
		DrainTimeout: 20 * time.Second,
		OnTerminate:  began.hook,
	}
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	sv := start(t, context.Background(), s)

	c := dial(t, sv.addr)
	if err := c.send("/work?ms=10000"); err != nil {
		t.Fatal(err)
	}
	waitEntered(t, entered, "/work?ms=10000")
	terminate(t)
	began.wait(t) // a signal sent before the first is received merges with it
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
	s.HTTP.Handler, _ = newMux(s)
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
	mux, _ := newMux(s)
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
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
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
	waitEntered(t, entered, "/work?ms=600")
	terminate(t)
	if err := <-result; err != nil {
		t.Errorf("in-flight HTTP/2 stream: %v", err)
	}
	if took, err := sv.wait(t, 5*time.Second); err != nil || took > 3*time.Second {
		t.Errorf("Serve: %v after %v", err, took)
	}
}

// TestConnectionAcceptedAsListenerClosesIsServed covers a connection that
// the kernel has accepted but the Server's listener has not yet handed to
// http.Server when the drain closes the listener: Serve must wait for the
// accept loop to hand it over and answer its request, not count no open
// connection and return while the request is still to be served.
func TestConnectionAcceptedAsListenerClosesIsServed(t *testing.T) {
	s := &graceful.Server{HTTP: &http.Server{}, DrainTimeout: 10 * time.Second}
	mux, entered := newMux(s)
	s.HTTP.Handler = mux
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowToHand{Listener: ln, accepted: make(chan string, 64)}
	sv := startOn(t, context.Background(), s, slow)

	c := dial(t, sv.addr)
	if err := c.send("/work?ms=1000"); err != nil {
		t.Fatal(err)
	}
	for timeout := time.After(5 * time.Second); ; {
		select {
		case addr := <-slow.accepted:
			if addr != c.LocalAddr().String() {
				continue
			}
		case <-timeout:
			t.Fatal("connection never accepted")
		}
		break
	}
	terminate(t) // while the connection is in slowToHand's hands
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v, want nil", err)
	}
	waitEntered(t, entered, "/work?ms=1000")
	// The response was written before Serve returned: it is already here.
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("no response when Serve returned: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("got %d close=%v, want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
}

// slowToHand is a listener whose Accept hands a connection over 300 ms after
// the kernel accepted it, as a loaded machine's scheduler can make it; it
// sends the client's address on accepted, if the channel has room, as soon
// as the kernel has accepted a connection.
type slowToHand struct {
	net.Listener
	accepted chan string
}

func (l *slowToHand) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.accepted <- c.RemoteAddr().String():
		default:
		}
		time.Sleep(300 * time.Millisecond)
	}
	return c, err
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
		{"no server", &graceful.Server{}, "set one of Server.HTTP and Server.GRPC"},
		{"both servers", &graceful.Server{HTTP: &http.Server{}, GRPC: grpc.NewServer()}, "set one of Server.HTTP and Server.GRPC"},
		{"health without gRPC", &graceful.Server{HTTP: &http.Server{}, Health: health.NewServer()}, "Server.Health is a gRPC server's"},
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
		s.HTTP.Handler, _ = newMux(s)
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
