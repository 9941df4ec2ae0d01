package target_test

import (
	"encoding/json"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// The tests in this file run `closingtime serve` as a real process on
// loopback, send it SIGTERM with requests in flight, and check what each
// shutdown mode does to them.

// settle is how long the tests leave the server to read the requests they
// sent before they send SIGTERM; the "sigterm" event's counts check that it
// did. The server logs nothing when a request arrives, so the tests wait:
// a second is ample even on a loaded machine, and the work of the requests
// in flight at SIGTERM is longer still.
const settle = time.Second

// inFlight is the traffic of a shutdown test at SIGTERM: a /work request on
// a new connection, one on a keep-alive connection that has already served
// a request, and a keep-alive connection with nothing to do.
type inFlight struct{ fresh, busy, idle *testbinary.Conn }

func startInFlight(t *testing.T, addr string) inFlight {
	t.Helper()
	f := inFlight{fresh: testbinary.Dial(t, addr), busy: testbinary.Dial(t, addr), idle: testbinary.Dial(t, addr)}
	for _, c := range []*testbinary.Conn{f.busy, f.idle} {
		if r := c.Get(t, "/live", "warm-up"); r.Status != 200 || r.Close {
			t.Fatalf("warm-up: status %d, close %v; want 200 on a keep-alive connection", r.Status, r.Close)
		}
	}
	f.fresh.Send(t, "/work", "fresh")
	f.busy.Send(t, "/work", "busy")
	time.Sleep(settle)
	return f
}

// checkSigterm checks the fields of a "sigterm" event: six per-second counts
// that add up to requests, and the last request's time.
func checkSigterm(t *testing.T, e testbinary.Event, requests int) {
	t.Helper()
	counts, _ := e["work_per_second"].([]any)
	sum := 0
	for _, c := range counts {
		n, _ := c.(float64)
		sum += int(n)
	}
	if len(counts) != 6 || sum != requests {
		t.Errorf("sigterm: work_per_second = %v, want 6 counts adding up to %d", e["work_per_second"], requests)
	}
	if requests > 0 {
		if _, err := time.Parse(time.RFC3339Nano, e["last_request"].(string)); err != nil {
			t.Errorf("sigterm: last_request: %v", err)
		}
	}
}

// checkExit checks that the process exited with code, not by a signal, and
// that its log has an event named event that says so: "exiting", or
// "wrapper_exiting" for a wrapper.
func checkExit(t *testing.T, p *testbinary.Proc, event string, code int) {
	t.Helper()
	if ws := p.Wait(t); ws.Signaled() || ws.ExitStatus() != code {
		t.Errorf("process ended with %v, want exit code %d", p.Cmd.ProcessState, code)
	}
	if got, _ := p.Log.Wait(t, event)["code"].(float64); int(got) != code {
		t.Errorf("%s: code = %v, want %d", event, got, code)
	}
}

// checkNames compares the names of the events logged with want.
func checkNames(t *testing.T, p *testbinary.Proc, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, p.Log.Names()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// eventually reports whether cond became true within testbinary.WaitLimit.
func eventually(cond func() bool) bool {
	for limit := time.Now().Add(testbinary.WaitLimit); time.Now().Before(limit); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func TestExitDropsInFlight(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--listen", "127.0.0.1:0", "--shutdown", "exit", "--work", "3s")
	f := startInFlight(t, p.Addr(t))
	p.Signal(t, syscall.SIGTERM)

	for name, c := range map[string]*testbinary.Conn{"fresh": f.fresh, "busy": f.busy} {
		if r, err := c.Read(); err == nil {
			t.Errorf("%s: request in flight at SIGTERM completed with %d, want it dropped", name, r.Status)
		}
	}
	if !f.idle.ClosedWithin(testbinary.WaitLimit) {
		t.Error("idle connection still open")
	}
	checkExit(t, p, "exiting", 143)
	checkSigterm(t, p.Log.Wait(t, "sigterm"), 2)
	checkNames(t, p, "started", "listening", "sigterm", "exiting")
}

func TestGracefulFinishesInFlight(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--listen", "127.0.0.1:0", "--shutdown", "graceful", "--work", "3s", "--drain-timeout", "10s")
	addr := p.Addr(t)
	f := startInFlight(t, addr)
	p.Signal(t, syscall.SIGTERM)

	if !f.idle.ClosedWithin(testbinary.WaitLimit) {
		t.Error("idle connection still open")
	}
	for name, c := range map[string]*testbinary.Conn{"fresh": f.fresh, "busy": f.busy} {
		r, err := c.Read()
		if err != nil || r.Status != 200 || !r.Close {
			t.Errorf("%s: response %d, close %v, error %v; want 200 with Connection: close", name, r.Status, r.Close, err)
		}
	}
	if !f.busy.ClosedWithin(testbinary.WaitLimit) {
		t.Error("busy keep-alive connection still open after its response")
	}
	if !testbinary.Refused(addr) {
		t.Error("new connection accepted after the drain")
	}
	checkExit(t, p, "exiting", 143)
	checkSigterm(t, p.Log.Wait(t, "sigterm"), 2)
	drained := p.Log.Wait(t, "drained")
	if drained["requests_after_sigterm"] != 0.0 || drained["outcome"] != "complete" {
		t.Errorf("drained = %v, want no request after SIGTERM and outcome complete", drained)
	}
	checkNames(t, p, "started", "listening", "sigterm", "listener_closed", "drained", "exiting")
}

func TestGracefulPreStopDelay(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--listen", "127.0.0.1:0", "--shutdown", "graceful", "--work", "100ms",
		"--pre-stop-delay", "1500ms", "--drain-timeout", "10s")
	addr := p.Addr(t)
	idle := testbinary.Dial(t, addr)
	idle.Get(t, "/live", "warm-up")
	p.Signal(t, syscall.SIGTERM)
	p.Log.Wait(t, "sigterm")

	// During the pre-stop delay the server still accepts and serves, with
	// readiness failing and every connection asked to close.
	if r := testbinary.Dial(t, addr).Get(t, "/ready", "ready"); r.Status != 503 || !r.Close {
		t.Errorf("/ready during the pre-stop delay: %d, close %v; want 503 with Connection: close", r.Status, r.Close)
	}
	if r := testbinary.Dial(t, addr).Get(t, "/work", "new"); r.Status != 200 || !r.Close {
		t.Errorf("/work on a new connection during the pre-stop delay: %d, close %v; want 200 with Connection: close", r.Status, r.Close)
	}
	if r := idle.Get(t, "/work", "kept"); r.Status != 200 || !r.Close {
		t.Errorf("/work on a keep-alive connection during the pre-stop delay: %d, close %v; want 200 with Connection: close", r.Status, r.Close)
	}
	checkExit(t, p, "exiting", 143)
	if d := p.Log.Wait(t, "drained"); d["requests_after_sigterm"] != 2.0 {
		t.Errorf("drained: requests_after_sigterm = %v, want 2", d["requests_after_sigterm"])
	}
}

func TestHostageKeepsBusyConnections(t *testing.T) {
	t.Parallel()
	const idleTimeout = 3 * time.Second
	p := serve(t, nil, nil, "--listen", "127.0.0.1:0", "--shutdown", "hostage", "--work", "2s",
		"--idle-timeout", idleTimeout.String())
	addr := p.Addr(t)
	f := startInFlight(t, addr)
	p.Signal(t, syscall.SIGTERM)

	// server.close() closes the idle connection at once, long before its
	// idle timeout would.
	if !f.idle.ClosedWithin(idleTimeout - settle - 500*time.Millisecond) {
		t.Error("idle connection not closed at SIGTERM")
	}
	if !eventually(func() bool { return testbinary.Refused(addr) }) {
		t.Error("new connections still accepted after SIGTERM")
	}
	// Busy connections finish their request without Connection: close ...
	for name, c := range map[string]*testbinary.Conn{"fresh": f.fresh, "busy": f.busy} {
		r, err := c.Read()
		if err != nil || r.Status != 200 || r.Close {
			t.Errorf("%s: response %d, close %v, error %v; want 200 keeping the connection", name, r.Status, r.Close, err)
		}
	}
	f.fresh.Close()
	// ... and go on serving whatever their client sends.
	if r := f.busy.Get(t, "/work", "hostage"); r.Status != 200 || r.Close {
		t.Errorf("/work on the hostage connection: %d, close %v; want 200 keeping the connection", r.Status, r.Close)
	}
	if r := f.busy.Get(t, "/ready", "hostage-ready"); r.Status != 503 || r.Close {
		t.Errorf("/ready on the hostage connection: %d, close %v; want 503 keeping the connection", r.Status, r.Close)
	}
	lastResponse := time.Now()
	if !p.Running() {
		t.Fatal("process exited while a hostage connection was open")
	}
	// Once the client pauses, the idle timeout ends the connection and the
	// process.
	if !f.busy.ClosedWithin(testbinary.WaitLimit) {
		t.Error("hostage connection still open after its idle timeout")
	}
	checkExit(t, p, "exiting", 143)
	checkSigterm(t, p.Log.Wait(t, "sigterm"), 2)
	drained := p.Log.Wait(t, "drained")
	if drained["requests_after_sigterm"] != 1.0 {
		t.Errorf("drained: requests_after_sigterm = %v, want 1", drained["requests_after_sigterm"])
	}
	if d := drained.Time(t); d.Before(lastResponse.Truncate(time.Millisecond)) {
		t.Errorf("drained at %v, before the hostage connection's last response at %v", d, lastResponse)
	}
	checkNames(t, p, "started", "listening", "sigterm", "drained", "exiting")
}

func TestSigtermDuringStartup(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exit", "graceful", "hostage"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p := serve(t, nil, nil, "--listen", "127.0.0.1:0", "--shutdown", mode, "--startup-delay", "1m")
			p.Log.Wait(t, "started")
			p.Signal(t, syscall.SIGTERM)
			checkExit(t, p, "exiting", 143)
			checkSigterm(t, p.Log.Wait(t, "sigterm"), 0)
			checkNames(t, p, "started", "sigterm", "exiting")
		})
	}
}

func TestCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantNames []string
	}{
		{"at start", []string{"--crash-code", "3"}, 3, []string{"started", "crash", "exiting"}},
		{"after a while", []string{"--crash-code", "4", "--crash-after", "300ms"}, 4,
			[]string{"started", "listening", "crash", "exiting"}},
		{"during the start-up delay", []string{"--crash-code", "5", "--crash-after", "300ms", "--startup-delay", "1m"}, 5,
			[]string{"started", "crash", "exiting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := serve(t, nil, nil, append([]string{"--listen", "127.0.0.1:0"}, tt.args...)...)
			checkExit(t, p, "exiting", tt.wantCode)
			if got, _ := p.Log.Wait(t, "crash")["code"].(float64); int(got) != tt.wantCode {
				t.Errorf("crash: code = %v, want %d", got, tt.wantCode)
			}
			checkNames(t, p, tt.wantNames...)
		})
	}
}

// TestEnvironment sets every knob it can see from outside through seed
// 001's environment variables and the downward API's.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, []string{
		"SHUTDOWN_MODE=graceful", "STARTUP_DELAY=0.5", "WORK_MS=100-200", "POD_NAME=pod-x",
		"CT_LISTEN=127.0.0.1:0", "CT_ACCESS_LOG=true", "CT_IDLE_TIMEOUT=3",
	})
	started := p.Log.Wait(t, "started")
	addr := p.Addr(t)
	if gap := p.Log.Wait(t, "listening").Time(t).Sub(started.Time(t)); gap < 500*time.Millisecond {
		t.Errorf("listening %v after started, want at least the start-up delay of 500ms", gap)
	}
	r := testbinary.Dial(t, addr).Get(t, "/", "config-1")
	if r.Status != 200 || r.Header.Get("X-Pod-Name") != "pod-x" || r.Header.Get("X-Request-Id") != "config-1" {
		t.Errorf("GET /: status %d, headers %v; want 200 with X-Pod-Name pod-x and X-Request-Id config-1", r.Status, r.Header)
	}
	var config map[string]any
	if err := json.Unmarshal([]byte(r.Body), &config); err != nil {
		t.Fatalf("GET /: %v in %q", err, r.Body)
	}
	want := map[string]any{
		"shutdown": "graceful", "startup_delay": "500ms", "work": "100ms-200ms", "pod": "pod-x",
		"access_log": true, "idle_timeout": "3s", "listen": "127.0.0.1:0",
	}
	for k, v := range want {
		if config[k] != v {
			t.Errorf("GET /: %s = %v, want %v", k, config[k], v)
		}
	}
	if diff := cmp.Diff(config, started["config"]); diff != "" {
		t.Errorf("started event's config differs from GET / (-GET +started):\n%s", diff)
	}
	for _, e := range []testbinary.Event{started, p.Log.Wait(t, "listening")} {
		if e["pod"] != "pod-x" {
			t.Errorf("%s: pod = %v, want pod-x", e.Name(), e["pod"])
		}
	}
	req := p.Log.Wait(t, "request")
	if req["id"] != "config-1" || req["path"] != "/" || req["status"] != 200.0 || req["method"] != "GET" {
		t.Errorf("request event = %v, want id config-1, GET /, status 200", req)
	}
	p.Signal(t, syscall.SIGTERM)
	checkExit(t, p, "exiting", 143)
	if i := slices.Index(p.Log.Names(), "drained"); i < 0 {
		t.Error("no drained event in graceful mode")
	}
}
