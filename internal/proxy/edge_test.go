package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// startEdge starts `closingtime proxy --role edge` on a free loopback
// port in front of the fixed upstreams, with the further flags args, and
// returns it and its address.
func startEdge(t *testing.T, upstreams []string, args ...string) (*testbinary.Proc, string) {
	t.Helper()
	p := testbinary.Start(t, binary, nil, nil, append([]string{"proxy", "--role", "edge", "--listen", "127.0.0.1:0", "--admin", "none",
		"--upstreams", strings.Join(upstreams, ","), "--pod-name", "edge"}, args...)...)
	return p, p.Addr(t)
}

// send sends method to the edge at addr on a new connection and returns
// the response.
func send(t *testing.T, addr, method string) testbinary.Response {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+"/work", strings.NewReader("body"))
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testbinary.WaitLimit}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s through the edge: %v", method, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return testbinary.Response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// checkNGINX checks that resp is the edge's own answer with status for
// reason, after attempts at the upstreams tried.
func checkNGINX(t *testing.T, resp testbinary.Response, status int, reason proxy.Reason, tried ...string) {
	t.Helper()
	if resp.Status != status {
		t.Errorf("status %d, want %d", resp.Status, status)
	}
	if got := proxy.Recognize(resp.Status, resp.Header, []byte(resp.Body)); got != reason {
		t.Errorf("answer %q (X-Proxy-Reason %q) is recognized as %q, want %q", resp.Body, resp.Header.Get("X-Proxy-Reason"), got, reason)
	}
	if got, want := resp.Header.Get("X-Upstream-Addr"), strings.Join(tried, ", "); got != want {
		t.Errorf("X-Upstream-Addr %q, want %q", got, want)
	}
	if !strings.Contains(resp.Body, "<center>nginx</center>") {
		t.Errorf("body %q is not NGINX's page", resp.Body)
	}
}

func TestEdgeRefusedUpstream(t *testing.T) {
	closed := testbinary.ClosedAddr(t)
	p, addr := startEdge(t, []string{closed})
	checkNGINX(t, send(t, addr, http.MethodGet), http.StatusBadGateway, proxy.UpstreamRefused, closed)
	if e := p.Log.Wait(t, "request"); e["outcome"] != string(proxy.UpstreamRefused) || e["status"] != float64(http.StatusBadGateway) {
		t.Errorf("request event %v, want outcome %s, status 502", e, proxy.UpstreamRefused)
	}
}

func TestEdgeUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	upstream := fakeUpstream(t, func(net.Conn) { <-release })
	_, addr := startEdge(t, []string{upstream}, "--read-timeout", "300ms")
	start := time.Now()
	checkNGINX(t, send(t, addr, http.MethodGet), http.StatusGatewayTimeout, proxy.UpstreamTimeout, upstream)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the 504 came after %v, before the read timeout", took)
	}
}

// TestEdgeNextUpstream: a GET whose upstream reset it is tried on the next
// endpoint and ends well; a POST that reached the resetting upstream is
// not tried again (502), and with --next-upstream off neither is the GET.
func TestEdgeNextUpstream(t *testing.T) {
	var resets atomic.Int64
	resetter := fakeUpstream(t, func(c net.Conn) {
		resets.Add(1)
		c.(*net.TCPConn).SetLinger(0)
	})
	_, good := startServe(t)

	// Round-robin from a random start: of two requests, one or both meet
	// the resetter first.
	_, addr := startEdge(t, []string{resetter, good}, "--keepalive", "0")
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var first []testbinary.Response
		for range 2 {
			resp := send(t, addr, method)
			if strings.HasPrefix(resp.Header.Get("X-Upstream-Addr"), resetter) {
				first = append(first, resp)
			}
		}
		if len(first) == 0 {
			t.Fatalf("%s: none of 2 requests went first to the resetter, round-robin", method)
		}
		switch method {
		case http.MethodGet:
			if r := first[0]; r.Status != http.StatusOK || r.Header.Get("X-Upstream-Addr") != resetter+", "+good || r.Header.Get("X-Pod-Name") != "pod-a" {
				t.Errorf("GET after a reset: %d from %q via %q, want 200 from pod-a, the next upstream", r.Status, r.Header.Get("X-Pod-Name"), r.Header.Get("X-Upstream-Addr"))
			}
		case http.MethodPost:
			checkNGINX(t, first[0], http.StatusBadGateway, proxy.UpstreamReset, resetter)
		}
	}

	_, off := startEdge(t, []string{resetter, good}, "--keepalive", "0", "--next-upstream", "off")
	var failed int
	for range 2 {
		if resp := send(t, off, http.MethodGet); resp.Status != http.StatusOK {
			checkNGINX(t, resp, http.StatusBadGateway, proxy.UpstreamReset, resetter)
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("with --next-upstream off, %d of 2 GETs failed, want the 1 that met the resetter (round-robin)", failed)
	}
}

// TestEdgeKeepalive: the edge reuses its upstream connections; when the
// upstream closes an idle one, the edge drops it unseen by the client;
// it closes one that carried --keepalive-requests.
func TestEdgeKeepalive(t *testing.T) {
	for _, tt := range []struct {
		name       string
		closeAfter int // requests after which the upstream closes a connection; 0: never
		args       []string
		want       int64 // connections for 7 requests
	}{
		{"upstream closes after 2", 2, nil, 4},
		{"keepalive-requests 3", 0, []string{"--keepalive-requests", "3"}, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var conns atomic.Int64
			upstream := fakeKeepaliveUpstream(t, tt.closeAfter, &conns)
			_, addr := startEdge(t, []string{upstream}, tt.args...)
			for i := range 7 {
				if resp := send(t, addr, http.MethodGet); resp.Status != http.StatusOK {
					t.Fatalf("request %d: %d %q via %q, want 200", i, resp.Status, resp.Body, resp.Header.Get("X-Upstream-Addr"))
				}
				// Time for the edge to see an upstream's close.
				time.Sleep(50 * time.Millisecond)
			}
			if n := conns.Load(); n != tt.want {
				t.Errorf("the edge made %d upstream connections for 7 requests, want %d", n, tt.want)
			}
		})
	}
}

// fakeKeepaliveUpstream answers every request of each of its connections
// 200, and closes a connection once it has answered closeAfter (never if
// 0); conns counts the connections.
func fakeKeepaliveUpstream(t *testing.T, closeAfter int, conns *atomic.Int64) string {
	t.Helper()
	return listenUpstream(t, func(c net.Conn) {
		conns.Add(1)
		// The edge's pool closes its connections when it exits.
		c.SetDeadline(time.Now().Add(testbinary.WaitLimit))
		br := bufio.NewReader(c)
		for n := 1; n != closeAfter+1 || closeAfter == 0; n++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
}

// TestEdgeInformational: an upstream's 103 before its response is not
// passed on, and the response is, whole.
func TestEdgeInformational(t *testing.T) {
	upstream := fakeUpstream(t, func(c net.Conn) {
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
	})
	_, addr := startEdge(t, []string{upstream})
	if resp := send(t, addr, http.MethodGet); resp.Status != http.StatusOK || resp.Body != "final" {
		t.Errorf("got %d %q, want 200 \"final\"", resp.Status, resp.Body)
	}
}
