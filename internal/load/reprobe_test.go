package load

import (
	"bufio"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// closingListener answers the first request of each connection and, on
// the second, closes its listener and then resets the connection: a
// Service whose only pod is gone. It stops when the test ends.
func closingListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		if _, err := readRequest(br); err == nil {
			writeOK(conn, "pod-a")
		}
		readRequest(br)
		ln.Close()
		abort(conn)
	})
	return ln.Addr().String()
}

// TestReprobe: a request that fails on a reused keep-alive connection is
// re-probed at once on a new connection, whose outcome is the server's
// state: ok from a server that closed the connection but accepts new ones,
// refused once the listener is closed. The probe carries the request's id
// with "-reprobe", and is in no count of the report. Two requests are sent
// on a pool of one connection, so that the second reuses the first's.
func TestReprobe(t *testing.T) {
	for _, tt := range []struct {
		name string
		// target starts the server; seen, if not nil, counts the
		// requests it read with an id.
		target   func(t *testing.T) (address string, seen func(id string) int)
		failed   []Class // the second request's class, either
		want     Class
		wantPod  string
		wantStat int
	}{
		{name: "connection closed, server up", failed: []Class{Closed}, want: OK, wantPod: "pod-a", wantStat: 200,
			target: func(t *testing.T) (string, func(string) int) {
				srv := new(keepAliveServer)
				return srv.start(t, 2, func(c net.Conn) { c.Close() }), srv.seen
			}},
		{name: "listener closed", failed: []Class{Reset, Closed}, want: Refused,
			target: func(t *testing.T) (string, func(string) int) { return closingListener(t), nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			address, seen := tt.target(t)
			var results []Result
			report := run(t, Config{URL: "http://" + address + "/work", Clients: []Client{{Kind: KeepAlive, Rate: 10, Connections: 1}},
				Duration: 200 * time.Millisecond, OnResult: func(r Result) { results = append(results, r) }})
			slices.SortFunc(results, func(a, b Result) int { return a.Time.Compare(b.Time) })
			if len(results) != 2 {
				t.Fatalf("%d results, want 2", len(results))
			}
			if first := results[0]; first.Class != OK || first.Reprobe != nil {
				t.Fatalf("first request: %s (%v), re-probe %+v; want ok, none", first.Class, first.Err, first.Reprobe)
			}
			r := results[1]
			if !slices.Contains(tt.failed, r.Class) || r.ConnRequests != 1 {
				t.Fatalf("second request: %s (%v) on a connection that carried %d requests; want one of %v after 1", r.Class, r.Err, r.ConnRequests, tt.failed)
			}
			p := r.Reprobe
			if p == nil {
				t.Fatal("a request that failed on a reused connection has no re-probe")
			}
			if p.Class != tt.want || p.Pod != tt.wantPod || p.Status != tt.wantStat || p.Addr != netip.MustParseAddrPort(address) {
				t.Errorf("re-probe %+v, want %s from %s, pod %q, status %d", p, tt.want, address, tt.wantPod, tt.wantStat)
			}
			if p.At < r.Total || p.Total <= 0 {
				t.Errorf("re-probe sent at %v for %v, the request ended at %v; want it sent after", p.At, p.Total, r.Total)
			}
			if seen != nil {
				if n := seen(r.ID + "-reprobe"); n != 1 {
					t.Errorf("server read the re-probe %d times, want once", n)
				}
			}
			notCounted(t, report, 2)
		})
	}
}

// TestNoReprobe: a request that fails on a new connection, of either kind
// of client, is not re-probed.
func TestNoReprobe(t *testing.T) {
	modes(t, func(t *testing.T, kind Kind) {
		var srv keepAliveServer
		address := srv.start(t, 1, func(c net.Conn) { c.Close() })
		var results []Result
		report := run(t, Config{URL: "http://" + address + "/", Clients: []Client{{Kind: kind, Rate: 100, Connections: 1}},
			Duration: 50 * time.Millisecond, OnResult: func(r Result) { results = append(results, r) }})
		if len(results) == 0 {
			t.Fatal("no request")
		}
		for _, r := range results {
			if r.Class != Closed || r.ConnRequests != 0 || r.Reprobe != nil {
				t.Errorf("request %s: %s (%v) on a connection that carried %d requests, re-probe %+v; want closed on a new one, no re-probe",
					r.ID, r.Class, r.Err, r.ConnRequests, r.Reprobe)
			}
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for id := range srv.ids {
			if strings.HasSuffix(id, "-reprobe") {
				t.Errorf("server read re-probe %s", id)
			}
		}
		if got := report.Clients[0].Totals.Total(); got != int64(len(results)) {
			t.Errorf("report counts %d requests, %d results", got, len(results))
		}
	})
}

// notCounted checks that report, of one client, counts requests requests
// and one response, from pod-a: no re-probe in its totals, seconds,
// latency, statuses or pods.
func notCounted(t *testing.T, report *Report, requests int64) {
	t.Helper()
	c := report.Clients[0]
	var perSecond int64
	for _, s := range c.Seconds {
		perSecond += s.Counts.Total()
	}
	if c.Totals.Total() != requests || c.Totals[OK] != 1 || perSecond != requests {
		t.Errorf("totals %s, seconds add up to %d; want %d requests, 1 ok", formatCounts(&c.Totals), perSecond, requests)
	}
	if c.Pods["pod-a"] != 1 || c.Statuses[200] != 1 || c.Absorbed.Total() != 0 {
		t.Errorf("pods %v, statuses %v, absorbed %s; want the one response only", c.Pods, c.Statuses, formatCounts(&c.Absorbed))
	}
	latency, err := decodeHistogram("latency", c.LatencyHistogram)
	if err != nil {
		t.Fatal(err)
	}
	if n := latency.h.TotalCount(); n != 1 {
		t.Errorf("latency of %d responses, want 1", n)
	}
}
