package testbinary

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// WaitLimit bounds every wait of the helpers of this package, and of the
// tests that use them; reaching it is a failure, so it is far longer than
// anything should take.
const WaitLimit = 15 * time.Second

// Event is one line of the command's JSON log, as decoded into a map.
type Event map[string]any

// Name returns the event's name, its "event" field.
func (e Event) Name() string { return fmt.Sprint(e["event"]) }

// Time returns the event's time, its "time" field. It fails the test if
// the time is not in the log's format, milliseconds in UTC, so that every
// test that reads a time also checks the format.
func (e Event) Time(t *testing.T) time.Time {
	t.Helper()
	s, _ := e["time"].(string)
	tm, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("event %s: time %q is not milliseconds in UTC", e.Name(), s)
	}
	return tm
}

// Events collects the lines of a JSON log as they are written, so that
// tests can wait for an event while the command runs.
type Events struct {
	mu      sync.Mutex
	all     []Event
	changed chan struct{} // closed and replaced at each line, closed at the end
	ended   bool
}

func newEvents() *Events { return &Events{changed: make(chan struct{})} }

// ReadEvents collects the JSON log written to r, reading it in a new
// goroutine until it ends, for tests that run the server in their own
// process rather than with Start. The test's cleanup waits for r to end,
// since the reading reports lines that are not JSON to t: whatever writes
// to r must close it by then, in a cleanup registered after ReadEvents
// (cleanups run last registered first).
func ReadEvents(t *testing.T, r io.Reader) *Events {
	es := newEvents()
	done := make(chan struct{})
	go func() {
		es.read(t, r)
		close(done)
	}()
	t.Cleanup(func() { <-done })
	return es
}

// read parses the JSON lines of r until it ends.
func (es *Events) read(t *testing.T, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Errorf("log line %q is not JSON: %v", sc.Text(), err)
			continue
		}
		es.mu.Lock()
		es.all = append(es.all, e)
		close(es.changed)
		es.changed = make(chan struct{})
		es.mu.Unlock()
	}
	es.mu.Lock()
	es.ended = true
	close(es.changed)
	es.mu.Unlock()
}

// Wait returns the first event named name, waiting for it to be logged. It
// fails the test, with the log so far, if the log ends without one or none
// comes within WaitLimit.
func (es *Events) Wait(t *testing.T, name string) Event {
	t.Helper()
	limit := time.After(WaitLimit)
	for {
		es.mu.Lock()
		var found Event
		if i := slices.IndexFunc(es.all, func(e Event) bool { return e.Name() == name }); i >= 0 {
			found = es.all[i]
		}
		ended, changed := es.ended, es.changed
		es.mu.Unlock()
		if found != nil {
			return found
		}
		if ended {
			t.Fatalf("log ended without a %s event:\n%s", name, es)
		}
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("no %s event within %v:\n%s", name, WaitLimit, es)
		}
	}
}

// Named returns the events named name logged so far, in order.
func (es *Events) Named(name string) []Event {
	es.mu.Lock()
	defer es.mu.Unlock()
	var out []Event
	for _, e := range es.all {
		if e.Name() == name {
			out = append(out, e)
		}
	}
	return out
}

// Names returns the names of the events logged so far, in order.
func (es *Events) Names() []string {
	es.mu.Lock()
	defer es.mu.Unlock()
	names := make([]string, len(es.all))
	for i, e := range es.all {
		names[i] = e.Name()
	}
	return names
}

// String returns the events logged so far, one JSON line each, indented by
// a tab, for the messages of failed tests.
func (es *Events) String() string {
	es.mu.Lock()
	defer es.mu.Unlock()
	var b strings.Builder
	for _, e := range es.all {
		line, _ := json.Marshal(e)
		fmt.Fprintf(&b, "\t%s\n", line)
	}
	return b.String()
}

// Proc is a running command whose standard output is a JSON log.
type Proc struct {
	// Cmd is the command, for its arguments and, once Wait has returned,
	// its ProcessState.
	Cmd *exec.Cmd
	// Log collects the lines of the command's standard output.
	Log *Events

	stderr *SyncBuffer
	exited chan struct{} // closed when the process has exited and its log ended
}

// Start starts binary with the arguments args, the whole command line
// after the command's name (say "serve", "--listen", "127.0.0.1:0"), with
// env added to the environment and, if attr is not nil, those process
// attributes. Since the command runs on real time, Start skips the test
// under -short. The test's cleanup kills the process and waits for it;
// if the test failed, it logs the process's log and standard error.
func Start(t *testing.T, binary string, attr *syscall.SysProcAttr, env []string, args ...string) *Proc {
	t.Helper()
	if testing.Short() {
		name := filepath.Base(binary)
		if len(args) > 0 {
			name += " " + args[0]
		}
		t.Skipf("runs %s as a process on real time; skipped under -short", name)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = attr
	p := &Proc{Cmd: cmd, Log: newEvents(), stderr: new(SyncBuffer), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		p.Log.read(t, stdout)
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("log of %v:\n%sstandard error:\n%s", cmd.Args, p.Log, p.stderr)
		}
	})
	return p
}

// Addr waits for the "listening" event and returns its address, the one
// the server's port is open at.
func (p *Proc) Addr(t *testing.T) string {
	t.Helper()
	addr, _ := p.Log.Wait(t, "listening")["address"].(string)
	return addr
}

// Signal sends sig to the process, failing the test if it cannot.
func (p *Proc) Signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %v: %v", sig, err)
	}
}

// Wait waits for the process to exit and returns how it did. It fails the
// test if the process is still running after WaitLimit.
func (p *Proc) Wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(WaitLimit):
		t.Fatalf("process still running %v after it should have exited", WaitLimit)
	}
	return p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// Running reports whether the process is still running.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stderr returns what the process has written to its standard error so
// far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// SyncBuffer is a bytes.Buffer safe for concurrent use: a process, or a
// server run in the test's own, writes to it while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Conn is one HTTP/1.1 connection driven by hand, so that tests choose
// when each request is sent and read, and nothing is retried behind their
// back as http.Transport would.
type Conn struct {
	conn net.Conn
	br   *bufio.Reader
}

// Dial opens a connection to addr, failing the test if it cannot. The
// test's cleanup closes it.
func Dial(t *testing.T, addr string) *Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Conn{conn: conn, br: bufio.NewReader(conn)}
}

// Send writes a GET request for path with the request id id, its
// X-Request-Id header, by which tests find the request in the log.
func (c *Conn) Send(t *testing.T, path, id string) {
	t.Helper()
	_, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: lab\r\nX-Request-Id: %s\r\n\r\n", path, id)
	if err != nil {
		t.Fatalf("send %s: %v", path, err)
	}
}

// Response is a complete response.
type Response struct {
	Status int
	Header http.Header
	Close  bool // the server asked to close the connection
	Body   string
}

// Read reads a complete response, or returns the error that prevented it,
// within WaitLimit. Tests that expect the server to fail the request check
// the error themselves.
func (c *Conn) Read() (Response, error) {
	c.conn.SetReadDeadline(time.Now().Add(WaitLimit))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return Response{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Close: resp.Close, Body: string(body)}, nil
}

// Get sends a request and reads its response, failing the test if there is
// none.
func (c *Conn) Get(t *testing.T, path, id string) Response {
	t.Helper()
	c.Send(t, path, id)
	resp, err := c.Read()
	if err != nil {
		t.Fatalf("GET %s (%s): %v", path, id, err)
	}
	return resp
}

// ClosedWithin reports whether the server closed the connection within d,
// with no byte sent.
func (c *Conn) ClosedWithin(d time.Duration) bool {
	c.conn.SetReadDeadline(time.Now().Add(d))
	_, err := c.br.Peek(1)
	return err != nil && !os.IsTimeout(err)
}

// Close closes the connection, for tests whose client hangs up before the
// test ends; closing it again in the test's cleanup does no harm.
func (c *Conn) Close() error { return c.conn.Close() }

// Refused reports whether a new connection to addr is refused, as it is
// once the server has closed its port.
func Refused(addr string) bool {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	conn.Close()
	return false
}

// ClosedAddr returns a loopback address where nothing listens: a port
// that was free a moment ago.
func ClosedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
