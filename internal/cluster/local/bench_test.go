package local

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// BenchmarkRolloutRestart measures the emulator's own time in a rollout of
// three replicas with maxSurge 1, maxUnavailable 0, no start-up time, no
// probes, and a server that exits at once on SIGTERM. With no preStop hook
// the rules dictate no wait at all; with a preStop sleep of 1 s they
// dictate 1 s until the old pods are gone, which terminate together. It
// reports the time beyond what the rules dictate, per pod, from the restart
// to the rollout's completion (completed-ms/pod) and to the last old pod's
// end (gone-ms/pod).
func BenchmarkRolloutRestart(b *testing.B) {
	for _, bc := range []struct {
		name    string
		preStop int64 // seconds of preStop sleep
	}{{"no-prestop", 0}, {"prestop-1s", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			c := startCluster(b, Config{})
			d, svc := webDeployment(3, 5, "--shutdown=exit")
			d.Spec.Strategy = rollingUpdate("1", "0")
			if bc.preStop > 0 {
				d.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: bc.preStop}}}
			}
			ctx := context.Background()
			if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
				b.Fatal(err)
			}
			dictated := time.Duration(bc.preStop) * time.Second
			var completed, gone time.Duration
			b.ResetTimer()
			for range b.N {
				// A server signalled before its handler is in place
				// ignores SIGTERM as PID 1: start from servers that run.
				b.StopTimer()
				waitStarted(b, c)
				b.StartTimer()
				start := time.Now()
				if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
					b.Fatal(err)
				}
				st, err := c.RolloutStatus(ctx, "default", "web")
				if err != nil {
					b.Fatal(err)
				}
				completed += st.CompletedAt.Sub(start)
				gone += st.OldPodsGoneAt.Sub(start) - dictated
			}
			b.ReportMetric(millis(completed)/float64(3*b.N), "completed-ms/pod")
			b.ReportMetric(millis(gone)/float64(3*b.N), "gone-ms/pod")
		})
	}
}

// BenchmarkSignalTiming measures the emulator's signal timing error: how
// much later than the rules schedule them the kubelet sends the stop
// signal, at the end of a preStop sleep of 1 s, and SIGKILL, at the end of
// the grace period left (T7). Twenty pods that ignore SIGTERM as PID 1
// are deleted at once (Recreate) while 2,000 requests a second go through
// the routing dialer. It reports the median, 99th percentile and worst
// error of each signal, the signals per operation and the request rate
// achieved.
func BenchmarkSignalTiming(b *testing.B) {
	const pods, rate = 20, 2000
	c := startCluster(b, Config{})
	d, svc := webDeployment(pods, 3, "--shutdown=ignore", "--work=1ms")
	d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.ReadinessProbe = httpProbe("/ready", 3)
	ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
	ctx := context.Background()
	if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		b.Fatal(err)
	}
	if err := waitServing(ctx, c); err != nil {
		b.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan *tally, 1)
	loadStart := time.Now()
	go func() { done <- pace(lctx, c, rate) }()
	var term, kill []time.Duration
	b.ResetTimer()
	for range b.N {
		from := len(c.EventLog().Events())
		// Recreate deletes every old pod at once.
		if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
			b.Fatal(err)
		}
		if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
			b.Fatal(err)
		}
		preStops, signals := map[string]cluster.Event{}, map[string]cluster.Event{}
		for _, e := range c.EventLog().Events()[from:] {
			switch e.Kind {
			case cluster.PreStopStarted:
				preStops[e.Pod] = e
			case cluster.SignalSent:
				signals[e.Pod] = e
				term = append(term, e.Time.Sub(preStops[e.Pod].Time.Add(time.Second)))
			case cluster.Killed:
				s := signals[e.Pod]
				grace, err := time.ParseDuration(s.Fields["grace"])
				if err != nil {
					b.Fatalf("signal_sent of %s: grace %q: %v", e.Pod, s.Fields["grace"], err)
				}
				kill = append(kill, e.Time.Sub(s.Time.Add(grace)))
			}
		}
	}
	b.StopTimer()
	stop()
	tl := <-done
	loadTime := time.Since(loadStart)
	report := func(name string, ds []time.Duration) {
		if len(ds) == 0 {
			b.Fatalf("no %s signal measured", name)
		}
		slices.Sort(ds)
		at := func(q float64) float64 { return millis(ds[int(q*float64(len(ds)-1))]) }
		b.ReportMetric(at(0.5), name+"-p50-ms")
		b.ReportMetric(at(0.99), name+"-p99-ms")
		b.ReportMetric(at(1), name+"-max-ms")
		b.ReportMetric(float64(len(ds))/float64(b.N), name+"s/op")
	}
	report("term", term)
	report("kill", kill)
	b.ReportMetric(float64(tl.ok+tl.refused+tl.other)/loadTime.Seconds(), "req/s")
}

// waitStarted waits until the server of every pod that is not
// terminating has logged that it started, which it does once its SIGTERM
// handling is in place.
func waitStarted(b *testing.B, c *Cluster) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, p := range activePods(c) {
		// One look per round; bounded by ctx.
		for !logged(ctx, c, p.Name, `"event":"started"`) {
			select {
			case <-ctx.Done():
				b.Fatalf("pod %s: no start in its log", p.Name)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// logged reports whether container app of pod wrote a line containing s.
func logged(ctx context.Context, c *Cluster, pod, s string) bool {
	lines, _ := c.Logs(ctx, "default", pod, "app")
	return slices.ContainsFunc(lines, func(l cluster.LogLine) bool { return strings.Contains(l.Text, s) })
}

// pace sends GET /work through c's dialer, each on a new connection, at
// rate requests a second until ctx ends. A tick that comes late sends the
// requests it missed, so that the rate holds over time.
func pace(ctx context.Context, c *Cluster, rate int) *tally {
	var tl tally
	var wg sync.WaitGroup
	start := time.Now()
	ticker := time.NewTicker(time.Millisecond)
	defer ticker.Stop()
	sent := 0
	// One round per tick; the loop ends with ctx.
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-ticker.C:
			due := int(time.Since(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					tl.add(start, request(c.DialContext))
				}()
			}
		}
	}
	wg.Wait()
	return &tl
}

// networks are the pod networks that the benchmarks compare: a network
// namespace per pod (skipped where the system allows none), and pods on
// the machine's loopback range.
var networks = []NetworkMode{NetworkNamespaces, NetworkLoopback}

// networkCluster starts a cluster of cfg whose pods are networked as mode
// says, or skips the benchmark if mode is NetworkNamespaces and the system
// allows none.
func networkCluster(b *testing.B, cfg Config, mode NetworkMode) *Cluster {
	b.Helper()
	cfg.Network = mode
	if mode == NetworkNamespaces {
		cfg.Network = NetworkAuto
	}
	c := startCluster(b, cfg)
	if mode == NetworkNamespaces {
		skipUnlessNamespaced(b, c)
	}
	return c
}

// BenchmarkPodStart measures a pod's start with each pod network, one pod
// at a time: a Deployment of `closingtime serve` without probes is scaled
// from 0 to 1 and, off the clock, back to 0 until the pod has ended. It reports the time from the
// pod's binding to a node (pod_scheduled) to its container's process
// running (start-ms/pod) and to its Ready (ready-ms/pod). The kubelet
// acts on a binding at once (no observe delay), so the difference between
// the networks is what a pod's network namespace adds to its start: the
// namespace, a veth on the node's bridge, the pod's address and routes.
func BenchmarkPodStart(b *testing.B) {
	for _, mode := range networks {
		b.Run(string(mode), func(b *testing.B) {
			c := networkCluster(b, Config{}, mode)
			d, svc := webDeployment(0, 5, "--shutdown=exit")
			ctx := context.Background()
			if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
				b.Fatal(err)
			}
			log := c.EventLog()
			var started, ready time.Duration
			for range b.N {
				from := len(log.Events())
				if err := c.Scale(ctx, "default", "web", 1); err != nil {
					b.Fatal(err)
				}
				sched, i := nextEvent(b, log, from, cluster.PodScheduled, "a new pod", func(cluster.Event) bool { return true })
				ofPod := func(e cluster.Event) bool { return e.Pod == sched.Pod }
				s, _ := nextEvent(b, log, i, cluster.ContainerStarted, "pod "+sched.Pod, ofPod)
				r, _ := nextEvent(b, log, i, cluster.PodReady, "pod "+sched.Pod, ofPod)
				started += s.Time.Sub(sched.Time)
				ready += r.Time.Sub(sched.Time)
				b.StopTimer()
				if err := c.Scale(ctx, "default", "web", 0); err != nil {
					b.Fatal(err)
				}
				nextEvent(b, log, i, cluster.PodTerminated, "pod "+sched.Pod, ofPod)
				b.StartTimer()
			}
			b.ReportMetric(millis(started)/float64(b.N), "start-ms/pod")
			b.ReportMetric(millis(ready)/float64(b.N), "ready-ms/pod")
		})
	}
}

// BenchmarkHundredPods runs a Deployment of 100 pods of `closingtime
// serve` without probes in one cluster of two nodes, with each pod
// network: scaled from 0 to 100 and back to 0. It reports, per pod, the
// time from the scale-up to the last pod's Ready (ready-ms/pod) and from
// the scale-down to the last pod's end, its sandbox gone (gone-ms/pod),
// the servers exiting at once on SIGTERM. It fails if
// two pods share an address or if the Service does not answer through the
// routing dialer once they are Ready.
func BenchmarkHundredPods(b *testing.B) {
	const pods = 100
	for _, mode := range networks {
		b.Run(string(mode), func(b *testing.B) {
			c := networkCluster(b, Config{}, mode)
			d, svc := webDeployment(0, 5, "--shutdown=exit")
			ctx := context.Background()
			if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
				b.Fatal(err)
			}
			log := c.EventLog()
			var ready, gone time.Duration
			for range b.N {
				ready += scaleAll(b, c, pods, cluster.PodReady)
				b.StopTimer()
				ips := map[string]bool{}
				for _, p := range activePods(c) {
					ips[p.Status.PodIP] = true
				}
				if len(ips) != pods {
					b.Fatalf("%d pods have %d addresses between them; events: %s", pods, len(ips), describe(log.Events()))
				}
				wctx, cancel := context.WithTimeout(ctx, waitLimit)
				err := waitServing(wctx, c)
				cancel()
				if err != nil {
					b.Fatalf("Service of %d pods: %v", pods, err)
				}
				b.StartTimer()
				gone += scaleAll(b, c, 0, cluster.PodTerminated)
			}
			b.ReportMetric(millis(ready)/float64(pods*b.N), "ready-ms/pod")
			b.ReportMetric(millis(gone)/float64(pods*b.N), "gone-ms/pod")
		})
	}
}

// scaleAll scales Deployment web of c from or to zero replicas and
// returns the time from the scale to the last of the events of kind, one
// per pod scaled, that it waits for.
func scaleAll(b *testing.B, c *Cluster, replicas int32, kind cluster.EventKind) time.Duration {
	b.Helper()
	log := c.EventLog()
	scaled := max(replicas, int32(len(activePods(c)))) // one of them is zero
	i := len(log.Events())
	start := time.Now()
	if err := c.Scale(context.Background(), "default", "web", replicas); err != nil {
		b.Fatal(err)
	}
	var e cluster.Event
	for n := range scaled {
		e, i = nextEvent(b, log, i, kind, fmt.Sprintf("pod %d of %d", n+1, scaled), func(cluster.Event) bool { return true })
	}
	return e.Time.Sub(start)
}

// millis returns d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// The rate search of BenchmarkServiceRate.
const (
	// firstRate is the first rate tried, in requests a second.
	firstRate = 1000.0
	// rateSteps is how many rates a search tries: it doubles from
	// firstRate until a rate fails, then halves the interval between the
	// highest rate that passed and the lowest that failed.
	rateSteps = 9
	// rateTrial is how long each rate is tried.
	rateTrial = 2 * time.Second
	// maxLatency bounds the 90th percentile of a sustained rate's
	// latency. Below capacity a request takes about a millisecond; above
	// it, requests queue and their latency grows through the run, to
	// 100 ms at its end at 5% above. The 90th percentile rather than the
	// 99th lets a sustained rate ride out a stall of some tens of
	// milliseconds from the machine's other work.
	maxLatency = 50 * time.Millisecond
)

// BenchmarkServiceRate measures the highest request rate that the load
// generator (package load) sustains against a Service of 3 Ready pods of
// `closingtime serve` through the cluster's dialer, with network
// namespaces (through the node's kernel rules) and on the loopback range
// (routed in userspace), for each connection habit: new-conn, a new
// connection per request, which crosses the rules and conntrack at every
// request, and keep-alive, 8 persistent connections. Both clusters run
// side by side and their searches take turns, rate by rate, so that the
// machine's other work weighs on both alike. A rate is sustained if every
// request of a 2 s run at it succeeds and the 90th percentile of their
// latency, counted from each request's scheduled time (so that a generator
// that falls behind fails too), is under maxLatency. It reports each
// network's rate (req/s-netns, req/s-loopback) and their ratio, and logs
// each search's steps.
func BenchmarkServiceRate(b *testing.B) {
	var dials [2]load.Dialer
	for i, mode := range networks {
		c := networkCluster(b, Config{}, mode)
		d, svc := webDeployment(3, 5, "--shutdown=exit", "--work=0")
		ctx := context.Background()
		if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
			b.Fatal(err)
		}
		warmUp(b, c.DialContext)
		dials[i] = c.DialContext
	}
	for _, kind := range []load.Kind{load.NewConn, load.KeepAlive} {
		b.Run(kind.String(), func(b *testing.B) {
			var sums [2]float64
			for range b.N {
				var searches [2]rateSearch
				for range rateSteps {
					for i := range searches {
						searches[i].try(b, dials[i], kind)
					}
				}
				for i, s := range searches {
					b.Logf("%s %s: %s", networks[i], kind, strings.Join(s.steps, ", "))
					sums[i] += s.passed
				}
			}
			b.ReportMetric(sums[0]/float64(b.N), "req/s-netns")
			b.ReportMetric(sums[1]/float64(b.N), "req/s-loopback")
			b.ReportMetric(sums[0]/sums[1], "ratio")
		})
	}
}

// warmUp waits until requests through dial reach the 3 pods of Service
// web: the node's routing view takes in each pod after a delay of its
// own.
func warmUp(b *testing.B, dial load.Dialer) {
	b.Helper()
	deadline := time.Now().Add(waitLimit)
	// One short run a round; bounded by deadline.
	for {
		r := runLoad(b, dial, load.NewConn, 200, 500*time.Millisecond)
		if r.Totals.Failed() == 0 && len(r.Pods) == 3 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("Service web: after %s, %d requests failed and %d pods answered of 3", waitLimit, r.Totals.Failed(), len(r.Pods))
		}
	}
}

// rateSearch is one search for the highest sustained rate.
type rateSearch struct {
	passed, failed float64  // the highest rate that passed, the lowest that failed; 0 if none
	steps          []string // each rate tried and its outcome
}

// try runs the search's next rate through dial with clients of kind, and
// records whether it was sustained.
func (s *rateSearch) try(b *testing.B, dial load.Dialer, kind load.Kind) {
	rate := firstRate
	switch {
	case s.failed > 0:
		rate = (s.passed + s.failed) / 2
	case s.passed > 0:
		rate = 2 * s.passed
	}
	r := runLoad(b, dial, kind, rate, rateTrial)
	ok := r.Totals.Failed() == 0 && r.Latency.P90 < maxLatency
	if ok {
		s.passed = rate
	} else {
		s.failed = rate
	}
	verdict := "sustained"
	if !ok {
		verdict = "not sustained"
	}
	s.steps = append(s.steps, fmt.Sprintf("%.0f %s (%d of %d failed, p90 %s)", rate, verdict, r.Totals.Failed(), r.Totals.Total(), r.Latency.P90.Round(100*time.Microsecond)))
}

// runLoad sends GET /work to Service web through dial at rate requests a
// second, with a client of kind, for d, and returns the client's report.
func runLoad(b *testing.B, dial load.Dialer, kind load.Kind, rate float64, d time.Duration) load.ClientReport {
	b.Helper()
	g, err := load.New(load.Config{URL: "http://web.default/work", Clients: []load.Client{{Kind: kind, Rate: rate}}, Duration: d, Dial: dial})
	if err != nil {
		b.Fatal(err)
	}
	r, err := g.Run(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return r.Clients[0]
}
