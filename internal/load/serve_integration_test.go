package load

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// startServe starts `closingtime serve` with args on
// a free loopback port. It returns the process, its address, and a
// function that returns its log lines once it has exited.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, func() []map[string]any) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan map[string]any, 1<<16)
	address := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			if e["event"] == "listening" {
				address <- e["address"].(string)
			}
			lines <- e
		}
	}()
	select {
	case a := <-address:
		logs := func() []map[string]any {
			cmd.Wait()
			var all []map[string]any
			for e := range lines {
				all = append(all, e)
			}
			return all
		}
		return cmd, a, logs
	case <-time.After(30 * time.Second):
		t.Fatal("closingtime serve did not listen within 30s")
	}
	return nil, "", nil
}

// TestServeExit runs both clients against `closingtime serve --shutdown
// exit` and kills it with SIGTERM in the middle of the run: the requests
// before are served by the pod and logged under their ids, those after are
// refused (new-conn) or fail on the connections the pod dropped
// (keep-alive).
func TestServeExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds closingtime and runs it for seconds")
	}
	cmd, address, logs := startServe(t, "--work", "5ms", "--pod-name", "pod-int", "--shutdown", "exit", "--access-log")
	g, err := New(Config{
		URL:      "http://" + address + "/work",
		Clients:  []Client{{Kind: NewConn, Rate: 100}, {Kind: KeepAlive, Rate: 100, Connections: 4}},
		Duration: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(700*time.Millisecond, func() { cmd.Process.Signal(syscall.SIGTERM) })
	report, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	served := make(map[string]bool)
	for _, e := range logs() {
		if e["event"] == "request" {
			served[e["id"].(string)] = true
		}
	}
	var ok int64
	for _, c := range report.Clients {
		if c.Totals[OK] == 0 || c.Totals.Failed() == 0 {
			t.Errorf("%s: totals %s, want requests served before the SIGTERM and failed after", c.Kind, formatCounts(&c.Totals))
		}
		if c.Pods["pod-int"] != c.Totals[OK] {
			t.Errorf("%s: pods %v, want every ok request from pod-int (%d)", c.Kind, c.Pods, c.Totals[OK])
		}
		ok += c.Totals[OK]
	}
	if nc := report.Clients[0]; nc.Totals[Refused] == 0 {
		t.Errorf("new-conn: totals %s, want refused connects after the pod exited", formatCounts(&nc.Totals))
	}
	if int64(len(served)) < ok {
		t.Errorf("pod logged %d request ids, fewer than the %d ok requests", len(served), ok)
	}
}
