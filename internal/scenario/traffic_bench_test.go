//go:build unix

package scenario

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// BenchmarkLocalTraffic measures the lab's in-process traffic path end to
// end: a run of the traffic source of the embedded cluster (LocalTraffic)
// against `closingtime serve` in a process of its own, as a pod runs it,
// then the run's figures from what the source returns. It reports this
// process's CPU time per request (cpu-ns/request: user and system time
// from getrusage, which leaves the server's out), the user part of it
// alone (user-ns/request: the system part is mostly the network's), and
// its allocations per request. One op is one run of 2 s at 400 requests per second, half from
// a new-conn client and half from a keep-alive one; its ns/op is wall
// time, mostly the run's duration. Each new-conn request holds an
// ephemeral port in TIME_WAIT for 60 s, so keep the count low:
//
//	go test -run '^$' -bench LocalTraffic -count 6 ./internal/scenario
func BenchmarkLocalTraffic(b *testing.B) {
	address := startServe(b, "--pod-name", "bench-pod")
	cfg := load.Config{
		URL:      "http://" + address + DefaultPath,
		Clients:  []load.Client{{Kind: load.NewConn, Rate: 200}, {Kind: load.KeepAlive, Rate: 200}},
		Duration: 2 * time.Second,
	}
	source := LocalTraffic((&net.Dialer{}).DialContext, nil)
	var user, system time.Duration
	var requests int64
	var allocs uint64
	for b.Loop() {
		userBefore, systemBefore := cpuTime(b)
		allocsBefore := mallocs()
		report, requested, err := source.Run(b.Context(), cfg, func() {})
		if err != nil {
			b.Fatal(err)
		}
		run := &results.Run{Start: report.Start}
		figures(run, report, requested, nil, podAddresses{}, nil, proxyLogs{}, time.Time{})
		userAfter, systemAfter := cpuTime(b)
		user += userAfter - userBefore
		system += systemAfter - systemBefore
		allocs += mallocs() - allocsBefore
		if run.Totals.Failed() > 0 || run.Totals.Requests == 0 {
			b.Fatalf("totals %+v: want requests, none failed", run.Totals)
		}
		requests += run.Totals.Requests
	}
	b.ReportMetric(float64((user+system).Nanoseconds())/float64(requests), "cpu-ns/request")
	b.ReportMetric(float64(user.Nanoseconds())/float64(requests), "user-ns/request")
	b.ReportMetric(float64(allocs)/float64(requests), "allocs/request")
}

// cpuTime returns the user and the system CPU time this process has used.
func cpuTime(b *testing.B) (user, system time.Duration) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano()), time.Duration(u.Stime.Nano())
}

// mallocs returns the number of heap objects allocated so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// startServe starts `closingtime serve` with args on a free loopback port,
// to be killed when b ends, and returns its address once it listens.
func startServe(b *testing.B, args ...string) string {
	b.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	address := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e struct{ Event, Address string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "listening" {
				address <- e.Address
			}
		}
	}()
	select {
	case a := <-address:
		return a
	case <-time.After(30 * time.Second):
		b.Fatal("closingtime serve did not listen within 30s")
		return ""
	}
}
