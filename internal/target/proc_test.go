package target_test

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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests
// run as real processes.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// waitLimit bounds every wait of these tests; reaching it is a failure, so it
// is far longer than anything should take.
const waitLimit = 15 * time.Second

// event is one log line.
type event map[string]any

func (e event) name() string { return fmt.Sprint(e["event"]) }

// time returns the event's time; it fails the test if it is not in the
// log's format.
func (e event) time(t *testing.T) time.Time {
	t.Helper()
	s, _ := e["time"].(string)
	tm, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("event %s: time %q is not milliseconds in UTC", e.name(), s)
	}
	return tm
}

// events collects the log lines of a process as they are written.
type events struct {
	mu      sync.Mutex
	all     []event
	changed chan struct{} // closed and replaced at each line, closed at the end
	ended   bool
}

func newEvents() *events { return &events{changed: make(chan struct{})} }

// read parses the JSON lines of r until it ends.
func (es *events) read(t *testing.T, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e event
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

// wait returns the first event named name, waiting for it to be logged.
func (es *events) wait(t *testing.T, name string) event {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		es.mu.Lock()
		var found event
		if i := slices.IndexFunc(es.all, func(e event) bool { return e.name() == name }); i >= 0 {
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
			t.Fatalf("no %s event within %v:\n%s", name, waitLimit, es)
		}
	}
}

// names returns the names of the events logged so far, in order.
func (es *events) names() []string {
	es.mu.Lock()
	defer es.mu.Unlock()
	names := make([]string, len(es.all))
	for i, e := range es.all {
		names[i] = e.name()
	}
	return names
}

func (es *events) String() string {
	es.mu.Lock()
	defer es.mu.Unlock()
	var b strings.Builder
	for _, e := range es.all {
		line, _ := json.Marshal(e)
		fmt.Fprintf(&b, "\t%s\n", line)
	}
	return b.String()
}

// proc is a running `closingtime serve`.
type proc struct {
	cmd    *exec.Cmd
	log    *events
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited and its log ended
}

// serve starts `closingtime serve args...` with env added to the
// environment and, if attr is not nil, those process attributes.
func serve(t *testing.T, attr *syscall.SysProcAttr, env []string, args ...string) *proc {
	t.Helper()
	if testing.Short() {
		t.Skip("runs closingtime serve as a process on real time; skipped under -short")
	}
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = attr
	p := &proc{cmd: cmd, log: newEvents(), stderr: new(syncBuffer), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	go func() {
		p.log.read(t, stdout)
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("log of %v:\n%sstandard error:\n%s", cmd.Args, p.log, p.stderr)
		}
	})
	return p
}

// addr waits for the "listening" event and returns its address.
func (p *proc) addr(t *testing.T) string {
	t.Helper()
	addr, _ := p.log.wait(t, "listening")["address"].(string)
	return addr
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns how it did.
func (p *proc) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(waitLimit):
		t.Fatalf("process still running %v after it should have exited", waitLimit)
	}
	return p.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// running reports whether the process is still running.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// client is one HTTP/1.1 connection driven by hand, so that tests choose
// when each request is sent and read, and nothing is retried behind their
// back as http.Transport would.
type client struct {
	conn net.Conn
	br   *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn: conn, br: bufio.NewReader(conn)}
}

// send writes a GET request for path with the request id id.
func (c *client) send(t *testing.T, path, id string) {
	t.Helper()
	_, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: lab\r\nX-Request-Id: %s\r\n\r\n", path, id)
	if err != nil {
		t.Fatalf("send %s: %v", path, err)
	}
}

// response is a complete response.
type response struct {
	status int
	header http.Header
	close  bool // the server asked to close the connection
	body   string
}

// read reads a complete response, or returns the error that prevented it.
func (c *client) read() (response, error) {
	c.conn.SetReadDeadline(time.Now().Add(waitLimit))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return response{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, close: resp.Close, body: string(body)}, nil
}

// get sends a request and reads its response, failing the test if there is
// none.
func (c *client) get(t *testing.T, path, id string) response {
	t.Helper()
	c.send(t, path, id)
	resp, err := c.read()
	if err != nil {
		t.Fatalf("GET %s (%s): %v", path, id, err)
	}
	return resp
}

// closedWithin reports whether the server closed the connection within d,
// with no byte sent.
func (c *client) closedWithin(d time.Duration) bool {
	c.conn.SetReadDeadline(time.Now().Add(d))
	_, err := c.br.Peek(1)
	return err != nil && !os.IsTimeout(err)
}

// refused reports whether a new connection to addr is refused.
func refused(addr string) bool {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	conn.Close()
	return false
}
