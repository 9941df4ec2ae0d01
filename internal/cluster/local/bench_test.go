package local

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
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
			b.ReportMetric(float64(completed.Microseconds())/1000/float64(3*b.N), "completed-ms/pod")
			b.ReportMetric(float64(gone.Microseconds())/1000/float64(3*b.N), "gone-ms/pod")
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
		at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
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
