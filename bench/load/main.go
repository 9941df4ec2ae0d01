// Command loadbench compares `closingtime load` with vegeta on this machine:
// for each connection mode (keep-alive, a new connection per request) it
// finds the highest constant rate that each tool sustains against the same
// target, `closingtime serve --work 0s`, and prints the ratio.
//
// A rate is sustained when the 99th percentile of the schedule lag (how
// late a request starts after its scheduled time) is under a bound, 1 ms by
// default, at least 99.9% of the scheduled requests are sent, and 99.9% of
// them succeed. With -lag 1ms,10ms
// the search runs for each bound: vegeta paces with Go timers, which wake
// up to a millisecond late when the process is idle, so its p99 lag is
// about 1.1 ms at any rate and only a looser bound compares throughput.
//
// Each trial runs the tool in its own process, so that both get the same
// share of the machine, and starts only once the machine is idle and the
// ephemeral ports of earlier trials are free again. vegeta's schedule lag
// is computed from its results: the k-th hit was due at began + k/rate,
// where began is estimated as late as the results allow, which can only
// flatter vegeta.
//
// With -ghz, it compares gRPC instead: `closingtime load grpc://…` against
// ghz (github.com/bojand/ghz, its --rps mode), both calling Work of
// `closingtime serve --grpc --work 0s` over -connections connections.
// ghz tells no schedule lag: its rate is sustained when it sends 99.9% of
// the schedule within the trial's length, and closingtime's when its p99
// lag stays under -lag (10 ms by default here), which a tool that fell
// behind by more would not meet either.
//
// Run it with bench/load.sh, or from this directory:
//
//	go run . -closingtime /path/to/closingtime
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "vegeta" {
		if err := runVegeta(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench vegeta:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// A trial is the outcome of one run of a tool at one rate.
type trial struct {
	P99LagMS float64 `json:"p99LagMs"`
	OK       int64   `json:"ok"`
	Total    int64   `json:"total"`
	// Ended counts the calls still in flight when the tool ended its run
	// and cancelled them itself (ghz closes its connections at its
	// duration's end, "the client connection is closing"): sent, but
	// neither ok nor failed by the server.
	Ended int64 `json:"ended,omitempty"`
}

// sustained reports whether the trial kept its schedule: a p99 lag under
// lag, at least 99.9% of the scheduled requests sent, and 99.9% of those
// ok.
func (t trial) sustained(lag time.Duration, scheduled float64) bool {
	// One request short of the schedule is a fencepost (ghz's rate
	// limiter sends its first at the first tick), not a miss.
	return t.Total > 0 && t.P99LagMS < ms(lag) &&
		float64(t.Total) >= 0.999*scheduled-1 && float64(t.OK) >= 0.999*float64(t.Total-t.Ended)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isFlagSet reports whether the command line gave the flag name.
func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type config struct {
	closingtime string
	duration    time.Duration
	connections int
	maxRate     float64
	lags        []time.Duration
	url         string
	port        int
	self        string
	// ghz, if set, is the ghz binary, and the comparison is gRPC's;
	// proto is the lab's service definition, for ghz.
	ghz, proto string
}

func run() error {
	var cfg config
	flag.StringVar(&cfg.closingtime, "closingtime", "closingtime", "the closingtime binary")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "length of each trial (with -ghz, 10s unless given)")
	flag.IntVar(&cfg.connections, "connections", 32, "keep-alive connections of closingtime load (vegeta keeps its default, up to 10000)")
	flag.Float64Var(&cfg.maxRate, "max-rate", 64000, "highest rate tried")
	lags := flag.String("lag", "1ms", "comma-separated bounds on the p99 schedule lag")
	flag.StringVar(&cfg.ghz, "ghz", "", "compare gRPC calls against this ghz binary instead of HTTP against vegeta")
	flag.StringVar(&cfg.proto, "proto", "../../internal/labpb/lab.proto", "with -ghz, the lab's service definition")
	flag.Parse()
	if cfg.ghz != "" && !isFlagSet("lag") {
		*lags = "10ms"
	}
	if cfg.ghz != "" && !isFlagSet("duration") {
		// ghz's connects count in its duration: a short trial loses a
		// larger share of its schedule to them.
		cfg.duration = 10 * time.Second
	}
	for _, v := range strings.Split(*lags, ",") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("-lag: %w", err)
		}
		cfg.lags = append(cfg.lags, d)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.self = self

	target, address, err := startTarget(cfg.closingtime, cfg.ghz != "")
	if err != nil {
		return err
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	cfg.url = "http://" + address + "/work"
	peer, modes := "vegeta", []string{"keep-alive", "new-conn"}
	if cfg.ghz != "" {
		cfg.url, peer, modes = "grpc://"+address, "ghz", []string{"keep-alive"}
	}
	_, port, _ := strings.Cut(address, ":")
	if cfg.port, err = strconv.Atoi(port); err != nil {
		return fmt.Errorf("target address %q: %w", address, err)
	}
	fmt.Printf("target: closingtime serve --work 0s at %s (%s); trials of %v; sustained = p99 schedule lag under the bound (ghz's from its calls' start times against its rate), >= 99.9%% of the schedule sent and >= 99.9%% of those the server answered ok (the calls ghz cancels itself as its run ends left out)\n", address, cfg.url, cfg.duration)

	type row struct {
		mode        string
		lag         time.Duration
		ours, their float64
	}
	var rows []row
	for _, lag := range cfg.lags {
		for _, mode := range modes {
			ours := search(fmt.Sprintf("closingtime %s", mode), lag, cfg.duration, cfg.maxRate, func(rate float64) (trial, error) {
				settle(cfg.port)
				quiet()
				return trialClosingtime(cfg, mode, rate)
			})
			their := search(fmt.Sprintf("%s %s", peer, mode), lag, cfg.duration, cfg.maxRate, func(rate float64) (trial, error) {
				settle(cfg.port)
				quiet()
				if cfg.ghz != "" {
					return trialGHZ(cfg, rate)
				}
				return trialVegeta(cfg, mode == "keep-alive", rate)
			})
			rows = append(rows, row{mode, lag, ours, their})
		}
	}
	fmt.Printf("\n%-11s %8s %14s %14s %8s\n", "mode", "p99 lag", "closingtime/s", peer+"/s", "ratio")
	for _, r := range rows {
		ratio := "n/a (" + peer + ": not even 250/s)"
		if r.their > 0 {
			ratio = fmt.Sprintf("%.2fx", r.ours/r.their)
		}
		fmt.Printf("%-11s %8s %14.0f %14.0f %8s\n", r.mode, "<"+r.lag.String(), r.ours, r.their, ratio)
	}
	return nil
}

// settle waits, at most 70 s, until fewer than 2,000 client-side
// connections to the target's port are in TIME_WAIT: a tool that closed
// its connections first (vegeta with keep-alive past its idle pool) holds
// ephemeral ports for 60 s, and the next trial, of either tool, would fail
// for lack of them. It reads /proc/net/tcp; elsewhere it returns at once.
func settle(port int) {
	for deadline := time.Now().Add(70 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		n, err := timeWaitTo(port)
		if err != nil || n < 2000 {
			return
		}
	}
}

// quiet waits, at most 60 s, until the machine is nearly idle (under 10%
// of its CPU busy over half a second) before a trial: the machine may be
// shared, and another program's burst would be charged to whichever tool
// ran at that moment. It reads /proc/stat; elsewhere it returns at once.
func quiet() {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		idle0, total0, err := cpuTimes()
		if err != nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
		idle1, total1, err := cpuTimes()
		if err != nil || total1 == total0 || float64(idle1-idle0)/float64(total1-total0) > 0.9 {
			return
		}
	}
	fmt.Println("  (the machine stayed busy for 60s; trial run anyway)")
}

// cpuTimes returns the idle and total jiffies of all CPUs.
func cpuTimes() (idle, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total, nil
}

// timeWaitTo counts the IPv4 connections in TIME_WAIT whose remote port is
// port.
func timeWaitTo(port int) (int, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	suffix := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) > 3 && fields[3] == "06" && strings.HasSuffix(fields[2], suffix) {
			n++
		}
	}
	return n, nil
}

// search returns the highest rate at which try keeps its p99 schedule lag
// under lag, or 0 if not even 250/s. It doubles the rate from 250/s until
// a rate fails, then bisects. A failed trial is
// tried once more, so that one noisy second of a shared machine does not
// decide.
func search(name string, lag, duration time.Duration, maxRate float64, try func(rate float64) (trial, error)) float64 {
	passes := func(rate float64) bool {
		for range 2 {
			t, err := try(rate)
			if err != nil {
				fmt.Printf("  %s %6.0f/s: %v\n", name, rate, err)
				continue
			}
			ended := ""
			if t.Ended > 0 {
				ended = fmt.Sprintf(" (%d cancelled by the tool at its end)", t.Ended)
			}
			fmt.Printf("  %s %6.0f/s: p99 lag %.3fms, ok %d/%d%s\n", name, rate, t.P99LagMS, t.OK, t.Total, ended)
			if t.sustained(lag, rate*duration.Seconds()) {
				return true
			}
		}
		return false
	}
	lo, hi := 0.0, 0.0
	for rate := 250.0; rate <= maxRate; rate *= 2 {
		if !passes(rate) {
			hi = rate
			break
		}
		lo = rate
	}
	if hi == 0 || lo == 0 {
		// Past the highest rate tried, or not even the lowest: a tool that
		// misses its schedule at 250/s does so at any rate (its timer).
		return lo
	}
	for range 4 {
		mid := math.Round((lo + hi) / 2)
		if passes(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// startTarget starts `closingtime serve`, with grpc its gRPC server, on a
// free loopback port and returns it with its address, read from its
// "listening" log event.
func startTarget(closingtime string, grpc bool) (*exec.Cmd, string, error) {
	args := []string{"serve", "--listen", "127.0.0.1:0", "--work", "0s", "--pod-name", "bench"}
	if grpc {
		args = append(args, "--grpc")
	} else {
		args = append(args, "--idle-timeout", "1m")
	}
	cmd := exec.Command(closingtime, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start target: %w", err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e struct{ Event, Address string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "listening" {
			go io.Copy(io.Discard, out)
			return cmd, e.Address, nil
		}
	}
	cmd.Wait()
	return nil, "", errors.New("target exited before listening")
}

func trialClosingtime(cfg config, mode string, rate float64) (trial, error) {
	cmd := exec.Command(cfg.closingtime, "load", cfg.url,
		"--client", mode+"="+strconv.FormatFloat(rate, 'f', -1, 64),
		"--connections", strconv.Itoa(cfg.connections),
		"--duration", cfg.duration.String(), "-o", "json")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return trial{}, err
	}
	var report struct {
		Clients []struct {
			Totals        map[string]int64
			ScheduleLagMs struct{ P99 float64 }
		}
	}
	if err := json.Unmarshal(out, &report); err != nil || len(report.Clients) != 1 {
		return trial{}, fmt.Errorf("closingtime load output %q: %v", out, err)
	}
	c := report.Clients[0]
	t := trial{P99LagMS: c.ScheduleLagMs.P99, OK: c.Totals["ok"]}
	for _, n := range c.Totals {
		t.Total += n
	}
	return t, nil
}

func trialVegeta(cfg config, keepAlive bool, rate float64) (trial, error) {
	cmd := exec.Command(cfg.self, "vegeta", "-url", cfg.url,
		"-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-duration", cfg.duration.String(),
		"-keepalive="+strconv.FormatBool(keepAlive))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return trial{}, err
	}
	var t trial
	if err := json.Unmarshal(out, &t); err != nil {
		return trial{}, fmt.Errorf("vegeta trial output %q: %w", out, err)
	}
	return t, nil
}

// ghzEnded are the errors of the calls that ghz ends itself when its
// duration is over: it closes its connections under the calls in flight
// (the target, closingtime serve --grpc --work 0s on loopback, closes
// none).
var ghzEnded = []string{
	"rpc error: code = Canceled desc = grpc: the client connection is closing",
	"rpc error: code = Unavailable desc = transport is closing",
}

// trialGHZ runs ghz at rate, its --rps, for a trial's length over the
// trial's connections, with workers enough for any rate a loopback call
// of no work allows, and reads its JSON report.
func trialGHZ(cfg config, rate float64) (trial, error) {
	address := strings.TrimPrefix(cfg.url, "grpc://")
	cmd := exec.Command(cfg.ghz, "--insecure", "--proto", cfg.proto, "--call", "closingtime.lab.v1.Lab/Work", "-d", "{}",
		"--rps", strconv.Itoa(int(math.Round(rate))), "-z", cfg.duration.String(),
		"-c", strconv.Itoa(max(50, cfg.connections*8)), "--connections", strconv.Itoa(cfg.connections),
		"--format", "json", address)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return trial{}, err
	}
	var report struct {
		Count    int64
		Statuses map[string]int64 `json:"statusCodeDistribution"`
		Errors   map[string]int64 `json:"errorDistribution"`
		Details  []struct{ Timestamp time.Time }
	}
	if err := json.Unmarshal(out, &report); err != nil {
		return trial{}, fmt.Errorf("ghz output: %w", err)
	}
	t := trial{OK: report.Statuses["OK"], Total: report.Count, P99LagMS: ghzLag(report.Details, rate)}
	for _, e := range ghzEnded {
		t.Ended += report.Errors[e]
	}
	return t, nil
}

// ghzLag returns the p99 schedule lag of ghz's calls, in milliseconds, as
// closingtime load measures its own: how late each call started against
// a constant rate from the first one's start. details are ghz's calls,
// each with its start time.
func ghzLag(details []struct{ Timestamp time.Time }, rate float64) float64 {
	if len(details) == 0 {
		return 0
	}
	starts := make([]time.Time, len(details))
	for i, d := range details {
		starts[i] = d.Timestamp
	}
	slices.SortFunc(starts, time.Time.Compare)
	lags := make([]time.Duration, len(starts))
	for k, at := range starts {
		lags[k] = max(0, at.Sub(starts[0].Add(time.Duration(float64(k)*float64(time.Second)/rate))))
	}
	slices.Sort(lags)
	return ms(lags[(len(lags)*99)/100])
}

// runVegeta is a trial of vegeta, in a process of its own: it attacks and
// prints the trial as JSON.
func runVegeta(args []string) error {
	fs := flag.NewFlagSet("vegeta", flag.ContinueOnError)
	url := fs.String("url", "", "target")
	rate := fs.Float64("rate", 1000, "requests per second")
	duration := fs.Duration("duration", 3*time.Second, "length of the attack")
	keepAlive := fs.Bool("keepalive", true, "reuse connections")
	connections := fs.Int("connections", 0, "idle connections kept per host; 0 means vegeta's default (10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := []func(*vegeta.Attacker){vegeta.KeepAlive(*keepAlive), vegeta.Timeout(4 * time.Second), vegeta.HTTP2(false)}
	if *connections > 0 {
		opts = append(opts, vegeta.Connections(*connections))
	}
	attacker := vegeta.NewAttacker(opts...)
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: *url})
	pacer := vegeta.ConstantPacer{Freq: int(math.Round(*rate)), Per: time.Second}
	var results []*vegeta.Result
	for res := range attacker.Attack(targeter, pacer, *duration, "bench") {
		results = append(results, res)
	}
	slices.SortFunc(results, func(a, b *vegeta.Result) int { return int(a.Seq) - int(b.Seq) })
	interval := time.Duration(float64(time.Second) / float64(pacer.Freq))
	var t trial
	began := time.Time{}
	for _, r := range results {
		due := r.Timestamp.Add(-time.Duration(r.Seq) * interval)
		if began.IsZero() || due.Before(began) {
			began = due
		}
	}
	lags := make([]time.Duration, 0, len(results))
	for _, r := range results {
		lags = append(lags, r.Timestamp.Sub(began.Add(time.Duration(r.Seq)*interval)))
		t.Total++
		if r.Code == http.StatusOK && r.Error == "" {
			t.OK++
		} else if t.Total-t.OK <= 3 {
			fmt.Fprintf(os.Stderr, "vegeta: %d %s\n", r.Code, strings.TrimSpace(r.Error))
		}
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		t.P99LagMS = float64(lags[int(math.Ceil(0.99*float64(len(lags))))-1]) / float64(time.Millisecond)
	}
	return json.NewEncoder(os.Stdout).Encode(t)
}
