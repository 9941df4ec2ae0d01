package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests
// run as real processes: the proxy and its upstream, the lab server.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// sidecar is a running closingtime proxy and its admin address.
type sidecar struct {
	*testbinary.Proc
	addr, admin string
}

// startProxy starts `closingtime proxy` on free loopback ports in front
// of upstream, with the further flags args.
func startProxy(t *testing.T, upstream string, args ...string) *sidecar {
	t.Helper()
	p := testbinary.Start(t, binary, nil, nil, append([]string{"proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--upstream", upstream, "--pod-name", "pod-a"}, args...)...)
	admin, _ := p.Log.Wait(t, "admin_listening")["address"].(string)
	s := &sidecar{Proc: p, admin: admin}
	if !containsFlag(args, "--hold-file") {
		s.addr = p.Addr(t)
	}
	return s
}

func containsFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

// startServe starts the lab server on a free loopback port with args and
// returns it and its address.
func startServe(t *testing.T, args ...string) (*testbinary.Proc, string) {
	t.Helper()
	p := testbinary.Start(t, binary, nil, nil, append([]string{"serve", "--listen", "127.0.0.1:0", "--pod-name", "pod-a"}, args...)...)
	return p, p.Addr(t)
}

// admin posts path to the sidecar's admin listener.
func (s *sidecar) post(t *testing.T, path string) {
	t.Helper()
	if err := proxy.Call(context.Background(), s.admin, path, testbinary.WaitLimit, io.Discard); err != nil {
		t.Fatalf("admin %s: %v", path, err)
	}
}

// ready returns the status and body of the admin's /ready.
func (s *sidecar) ready(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/ready")
	if err != nil {
		t.Fatalf("GET /ready: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// checkReply checks that resp is the sidecar's own answer for reason.
func checkReply(t *testing.T, resp testbinary.Response, reason proxy.Reason, status int) {
	t.Helper()
	if resp.Status != status {
		t.Errorf("status %d, want %d", resp.Status, status)
	}
	if got := proxy.Recognize(resp.Status, resp.Header, []byte(resp.Body)); got != reason {
		t.Errorf("body %q is recognized as %q, want %q", resp.Body, got, reason)
	}
	if pod := resp.Header.Get("X-Pod-Name"); pod != "pod-a" {
		t.Errorf("X-Pod-Name %q, want the proxy's pod-a", pod)
	}
}

func TestRefusedUpstream(t *testing.T) {
	p := startProxy(t, testbinary.ClosedAddr(t))
	resp := testbinary.Dial(t, p.addr).Get(t, "/work", "r1")
	checkReply(t, resp, proxy.UpstreamRefused, http.StatusServiceUnavailable)
	if want := "delayed connect error: 111"; !strings.HasSuffix(resp.Body, want) {
		t.Errorf("body %q does not end with Envoy's %q", resp.Body, want)
	}
	e := p.Log.Wait(t, "request")
	if e["outcome"] != string(proxy.UpstreamRefused) || e["id"] != "r1" {
		t.Errorf("request event %v, want outcome %s of r1", e, proxy.UpstreamRefused)
	}
}

// fakeUpstream accepts connections on a free loopback port and, for each,
// reads the request and then does what answer says.
func fakeUpstream(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	return listenUpstream(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			answer(c)
		}
	})
}

// listenUpstream accepts connections on a free loopback port and serves
// each with serve, which the connection's close follows; it stops when
// the test ends.
func listenUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return ln.Addr().String()
}

func TestResetUpstream(t *testing.T) {
	upstream := fakeUpstream(t, func(c net.Conn) {
		// A server that dies with the request read: the kernel resets.
		c.(*net.TCPConn).SetLinger(0)
	})
	p := startProxy(t, upstream)
	checkReply(t, testbinary.Dial(t, p.addr).Get(t, "/work", "r1"), proxy.UpstreamReset, http.StatusServiceUnavailable)
}

// TestPooledConnectionCloses: both roles keep their upstream connections
// for the next request. When the upstream closes one as a request comes
// on it, the sidecar answers Envoy's 503 "connection termination" (Envoy
// retries nothing unless a route says so: Istio's "503 UC"), where the
// edge gives the failed pooled connection a try of its own, on a new
// connection, unseen by the client.
func TestPooledConnectionCloses(t *testing.T) {
	var conns atomic.Int64
	// Each connection: one request answered, the next read and the
	// connection closed, as a server whose idle timeout fired.
	upstream := listenUpstream(t, func(c net.Conn) {
		conns.Add(1)
		c.SetDeadline(time.Now().Add(testbinary.WaitLimit))
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		http.ReadRequest(br)
	})

	p := startProxy(t, upstream)
	client := testbinary.Dial(t, p.addr)
	if resp := client.Get(t, "/work", "r1"); resp.Status != http.StatusOK {
		t.Fatalf("first request: %d %q, want 200", resp.Status, resp.Body)
	}
	checkReply(t, client.Get(t, "/work", "r2"), proxy.UpstreamReset, http.StatusServiceUnavailable)
	if n := conns.Load(); n != 1 {
		t.Errorf("the sidecar made %d upstream connections for 2 requests, want 1, reused", n)
	}

	conns.Store(0)
	_, addr := startEdge(t, []string{upstream})
	for i := range 2 {
		if resp := send(t, addr, http.MethodGet); resp.Status != http.StatusOK {
			t.Errorf("request %d through the edge: %d %q, want 200", i, resp.Status, resp.Body)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("the edge made %d upstream connections for 2 requests, want 2: the second's retry", n)
	}
}

// TestLargeBody: the sidecar streams a body of any size to its app, as
// Envoy does; the edge reads it whole first, as NGINX buffers it, and
// refuses one over its client_max_body_size.
func TestLargeBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})}
	go upstream.Serve(ln)
	t.Cleanup(func() { upstream.Close() })
	post := func(addr string) (int, string) {
		resp, err := http.Post("http://"+addr+"/work", "application/octet-stream", strings.NewReader(strings.Repeat("x", 2<<20)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	p := startProxy(t, ln.Addr().String())
	if status, body := post(p.addr); status != http.StatusOK || body != fmt.Sprint(2<<20) {
		t.Errorf("a 2 MiB POST through the sidecar: %d %q, want 200 and all of it at the app", status, body)
	}
	_, edge := startEdge(t, []string{ln.Addr().String()})
	if status, _ := post(edge); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB POST through the edge: %d, want 413", status)
	}
}

func TestUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	upstream := fakeUpstream(t, func(net.Conn) { <-release })
	p := startProxy(t, upstream, "--timeout", "300ms")
	start := time.Now()
	checkReply(t, testbinary.Dial(t, p.addr).Get(t, "/work", "r1"), proxy.UpstreamTimeout, http.StatusGatewayTimeout)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the 504 came after %v, before the route timeout", took)
	}
}

func TestRecognize(t *testing.T) {
	const connectError = "upstream connect error or disconnect/reset before headers. reset reason: "
	// nginx is NGINX's page for a status, as NGINX 1.22 writes it.
	nginx := func(title string) string {
		return "<html>\r\n<head><title>" + title + "</title></head>\r\n<body>\r\n<center><h1>" + title +
			"</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n"
	}
	for _, tt := range []struct {
		status int
		header http.Header
		body   string
		want   proxy.Reason
	}{
		{http.StatusServiceUnavailable, nil, connectError + "connection failure, transport failure reason: delayed connect error: 111", proxy.UpstreamRefused},
		// Envoy versions that name the errno.
		{http.StatusServiceUnavailable, nil, connectError + "remote connection failure, transport failure reason: delayed connect error: Connection refused", proxy.UpstreamRefused},
		{http.StatusServiceUnavailable, nil, connectError + "remote connection failure, transport failure reason: delayed connect error: 110", proxy.UpstreamConnectTimeout},
		{http.StatusServiceUnavailable, nil, connectError + "connection timeout", proxy.UpstreamConnectTimeout},
		{http.StatusServiceUnavailable, nil, connectError + "connection termination", proxy.UpstreamReset},
		{http.StatusServiceUnavailable, nil, connectError + "remote reset\n", proxy.UpstreamReset},
		{http.StatusGatewayTimeout, nil, "upstream request timeout", proxy.UpstreamTimeout},
		{http.StatusServiceUnavailable, nil, "unavailable", ""},
		{http.StatusServiceUnavailable, nil, connectError + "overflow", ""},
		{http.StatusOK, nil, "upstream request timeout", ""},
		{http.StatusBadGateway, nil, "upstream request timeout", ""},
		// NGINX, and the edge, which names its reason.
		{http.StatusBadGateway, nil, nginx("502 Bad Gateway"), proxy.UpstreamError},
		{http.StatusGatewayTimeout, nil, nginx("504 Gateway Time-out"), proxy.UpstreamTimeout},
		{http.StatusBadGateway, http.Header{"X-Proxy-Reason": {"upstream-refused"}}, nginx("502 Bad Gateway"), proxy.UpstreamRefused},
		{http.StatusServiceUnavailable, http.Header{"X-Proxy-Reason": {"no-endpoints"}}, nginx("503 Service Temporarily Unavailable"), proxy.NoEndpoints},
		{http.StatusBadGateway, http.Header{"X-Proxy-Reason": {"made-up"}}, nginx("502 Bad Gateway"), proxy.UpstreamError},
		{http.StatusServiceUnavailable, nil, nginx("503 Service Temporarily Unavailable"), ""},
		{http.StatusBadGateway, nil, "<html><body>bad gateway</body></html>", ""},
	} {
		if got := proxy.Recognize(tt.status, tt.header, []byte(tt.body)); got != tt.want {
			t.Errorf("Recognize(%d, %q) = %q, want %q", tt.status, tt.body, got, tt.want)
		}
	}
}

// heldUpstream is an upstream whose requests wait until release: arrived
// gets one value per request that reached it, and each then answers 200,
// or, with cut, its headers and part of its body, then a reset.
type heldUpstream struct {
	addr    string
	arrived chan struct{}
	release chan struct{}
}

func newHeldUpstream(t *testing.T, cut bool) *heldUpstream {
	t.Helper()
	u := &heldUpstream{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	u.addr = fakeUpstream(t, func(c net.Conn) {
		u.arrived <- struct{}{}
		<-u.release
		if cut {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nwor")
			time.Sleep(50 * time.Millisecond)
			c.(*net.TCPConn).SetLinger(0)
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nworked")
	})
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
	})
	return u
}

// await waits for n requests to reach u.
func (u *heldUpstream) await(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-u.arrived:
		case <-time.After(testbinary.WaitLimit):
			t.Fatal("a request never reached the upstream")
		}
	}
}

// inFlight sends n requests for /work on connections of their own and
// returns a channel that gets each one's response, or its error.
func inFlight(t *testing.T, addr string, n int) <-chan result {
	out := make(chan result, n)
	for i := range n {
		c := testbinary.Dial(t, addr)
		c.Send(t, "/work", "flight-"+string(rune('a'+i)))
		go func() {
			resp, err := c.Read()
			out <- result{resp, err}
		}()
	}
	return out
}

type result struct {
	resp testbinary.Response
	err  error
}

// TestDrainListenersThenQuit drains as seed 003's fixed order does: a
// graceful drain_listeners, the app's requests finished, quitquitquit.
// Nothing in flight is cut, and the listener closes after the drain time.
func TestDrainListenersThenQuit(t *testing.T) {
	u := newHeldUpstream(t, false)
	p := startProxy(t, u.addr, "--drain-time", "2s")
	flights := inFlight(t, p.addr, 4)
	u.await(t, 4)
	p.post(t, "/drain_listeners?graceful")
	if status, body := p.ready(t); status != http.StatusOK || body != "LIVE" {
		t.Errorf("/ready after a graceful drain_listeners: %d %q, want 200 LIVE, as Envoy's", status, body)
	}
	// During the drain time the listener takes new requests, and asks
	// their clients to leave.
	c := testbinary.Dial(t, p.addr)
	c.Send(t, "/live", "during")
	u.await(t, 1)
	close(u.release)
	if resp, err := c.Read(); err != nil || resp.Status != http.StatusOK || !resp.Close {
		t.Errorf("a request during the drain: %+v %v, want 200 with Connection: close", resp, err)
	}
	for range 4 {
		r := <-flights
		if r.err != nil || r.resp.Status != http.StatusOK || !r.resp.Close {
			t.Errorf("a request in flight: %+v %v, want 200 with Connection: close", r.resp, r.err)
		}
	}
	p.Log.Wait(t, "listener_closed")
	if !testbinary.Refused(p.addr) {
		t.Error("a new connection after the drain time was not refused")
	}
	p.post(t, "/quitquitquit")
	if ws := p.Wait(t); ws.ExitStatus() != 0 {
		t.Errorf("exit %v after quitquitquit, want 0", ws)
	}
}

// TestDrainListenersAtOnce: a drain_listeners that is not graceful closes
// the listener at once, and the requests in flight go on.
func TestDrainListenersAtOnce(t *testing.T) {
	u := newHeldUpstream(t, false)
	p := startProxy(t, u.addr)
	flights := inFlight(t, p.addr, 1)
	u.await(t, 1)
	p.post(t, "/drain_listeners")
	if !testbinary.Refused(p.addr) {
		t.Error("a new connection after drain_listeners was not refused")
	}
	close(u.release)
	if r := <-flights; r.err != nil || r.resp.Status != http.StatusOK {
		t.Errorf("the request in flight: %+v %v, want 200", r.resp, r.err)
	}
}

// TestHealthCheck: a failed health check fails /ready, and /healthcheck/ok
// undoes it; neither closes anything.
func TestHealthCheck(t *testing.T) {
	_, upstream := startServe(t)
	p := startProxy(t, upstream)
	p.post(t, "/healthcheck/fail")
	if status, body := p.ready(t); status != http.StatusServiceUnavailable || body != "DRAINING" {
		t.Errorf("/ready after /healthcheck/fail: %d %q, want 503 DRAINING", status, body)
	}
	if resp := testbinary.Dial(t, p.addr).Get(t, "/live", "r1"); resp.Status != http.StatusOK || !resp.Close {
		t.Errorf("a request with the health check failed: %d, close %v, want 200 with Connection: close", resp.Status, resp.Close)
	}
	p.post(t, "/healthcheck/ok")
	if status, body := p.ready(t); status != http.StatusOK || body != "LIVE" {
		t.Errorf("/ready after /healthcheck/ok: %d %q, want 200 LIVE", status, body)
	}
	if resp := testbinary.Dial(t, p.addr).Get(t, "/live", "r2"); resp.Status != http.StatusOK || resp.Close {
		t.Errorf("a request with the health check passing again: %d, close %v, want 200 keeping the connection", resp.Status, resp.Close)
	}
}

// TestSIGTERMExit is Envoy's own SIGTERM: everything closes at once, and
// the log says the proxy cut what was in flight.
func TestSIGTERMExit(t *testing.T) {
	u := newHeldUpstream(t, false)
	p := startProxy(t, u.addr)
	flights := inFlight(t, p.addr, 1)
	u.await(t, 1)
	p.Signal(t, syscall.SIGTERM)
	if r := <-flights; r.err == nil {
		t.Errorf("a request in flight at SIGTERM got %d, want it cut", r.resp.Status)
	}
	if ws := p.Wait(t); ws.ExitStatus() != 0 {
		t.Errorf("exit %v, want 0", ws)
	}
}

// TestSIGTERMDrain is Istio's agent: the listener stays for the
// termination drain, a second signal is ignored, and with
// exit-on-zero-connections the proxy exits once the last connection has
// gone, after the drain.
func TestSIGTERMDrain(t *testing.T) {
	u := newHeldUpstream(t, false)
	p := startProxy(t, u.addr, "--on-sigterm", "drain", "--termination-drain", "500ms", "--exit-on-zero-connections")
	flights := inFlight(t, p.addr, 2)
	u.await(t, 2)
	p.Signal(t, syscall.SIGTERM)
	p.Log.Wait(t, "draining")
	if status, body := p.ready(t); status != http.StatusServiceUnavailable || body != "DRAINING" {
		t.Errorf("/ready after SIGTERM: %d %q, want 503 DRAINING", status, body)
	}
	p.Signal(t, syscall.SIGTERM)
	p.Log.Wait(t, "signal_ignored")
	// The requests are held past the drain: the exit waits for them.
	time.Sleep(time.Second)
	if !p.Running() {
		t.Fatal("the proxy exited with connections open")
	}
	released := time.Now()
	close(u.release)
	for range 2 {
		if r := <-flights; r.err != nil || r.resp.Status != http.StatusOK || !r.resp.Close {
			t.Errorf("a request in flight: %+v %v, want 200 with Connection: close", r.resp, r.err)
		}
	}
	if ws := p.Wait(t); ws.ExitStatus() != 0 {
		t.Errorf("exit %v, want 0", ws)
	}
	if e := p.Log.Wait(t, "exiting"); e["reason"] != "no connections" || e.Time(t).Before(released.Truncate(time.Millisecond)) {
		t.Errorf("exiting %v, want it for no connections, after the requests were released", e)
	}
}

// TestCutAfterHeaders: an upstream that fails after its headers cuts the
// response at the client, which gets what had come.
func TestCutAfterHeaders(t *testing.T) {
	u := newHeldUpstream(t, true)
	p := startProxy(t, u.addr)
	flights := inFlight(t, p.addr, 1)
	u.await(t, 1)
	close(u.release)
	if r := <-flights; r.err == nil {
		t.Errorf("a response cut after its headers arrived whole: %+v", r.resp)
	}
	if e := p.Log.Wait(t, "request"); e["outcome"] != "aborted" || e["status"] != float64(http.StatusOK) {
		t.Errorf("request event %v, want outcome aborted with status 200", e)
	}
}

// TestHoldFile holds the listener until the app's ready file exists.
func TestHoldFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "start_success")
	_, upstream := startServe(t)
	p := startProxy(t, upstream, "--hold-file", file)
	p.Log.Wait(t, "holding")
	if status, body := p.ready(t); status != http.StatusServiceUnavailable || body != "PRE_INITIALIZING" {
		t.Errorf("/ready while held: %d %q, want 503 PRE_INITIALIZING", status, body)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr(t)
	if resp := testbinary.Dial(t, addr).Get(t, "/live", "after"); resp.Status != http.StatusOK {
		t.Errorf("after the hold: %d, want 200 from the app", resp.Status)
	}
	if status, body := p.ready(t); status != http.StatusOK || body != "LIVE" {
		t.Errorf("/ready after the hold: %d %q, want 200 LIVE", status, body)
	}
}

// TestQuitWhileHeld: /quitquitquit ends a held proxy, which never listened.
func TestQuitWhileHeld(t *testing.T) {
	p := startProxy(t, testbinary.ClosedAddr(t), "--hold-file", filepath.Join(t.TempDir(), "never"))
	p.Log.Wait(t, "holding")
	p.post(t, "/quitquitquit")
	if ws := p.Wait(t); ws.ExitStatus() != 0 {
		t.Errorf("exit %v, want 0", ws)
	}
	if names := p.Log.Names(); slices.Contains(names, "listening") {
		t.Errorf("log %v: the held proxy listened", names)
	}
}

func TestAdminWantsPOST(t *testing.T) {
	p := startProxy(t, testbinary.ClosedAddr(t))
	resp, err := http.Get("http://" + p.admin + "/quitquitquit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /quitquitquit: %d, want 405", resp.StatusCode)
	}
	if status, _ := p.ready(t); status != http.StatusOK {
		t.Errorf("/ready after a GET of /quitquitquit: %d, want the proxy live", status)
	}
}
