package local

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// BenchmarkRolloutRestart measures the emulator's own time in a rollout:
// three replicas with no start-up time, no probes, no preStop and a server
// that exits at once on SIGTERM, so that the rules dictate no wait at all.
// It reports the time per pod from the restart to the rollout's completion
// (completed-ms/pod) and to the last old pod's end (gone-ms/pod).
func BenchmarkRolloutRestart(b *testing.B) {
	c := newBenchCluster(b)
	d, svc := webDeployment(3, 2, "--shutdown=exit")
	d.Spec.Strategy = rollingUpdate("1", "0")
	ctx := context.Background()
	if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		b.Fatal(err)
	}
	var completed, gone time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
			b.Fatal(err)
		}
		st, err := c.RolloutStatus(ctx, "default", "web")
		if err != nil {
			b.Fatal(err)
		}
		completed += st.CompletedAt.Sub(start)
		gone += st.OldPodsGoneAt.Sub(start)
	}
	b.ReportMetric(float64(completed.Milliseconds())/float64(3*b.N), "completed-ms/pod")
	b.ReportMetric(float64(gone.Milliseconds())/float64(3*b.N), "gone-ms/pod")
}

// BenchmarkSignalTiming measures how late the kubelet's SIGKILL comes
// after its scheduled time (the stop signal plus the grace period) for 20
// pods that ignore SIGTERM as PID 1, deleted at once while 2,000 requests a
// second go through the routing dialer. It reports the mean and the worst
// lateness.
func BenchmarkSignalTiming(b *testing.B) {
	c := newBenchCluster(b)
	d, svc := webDeployment(20, 2, "--shutdown=ignore", "--work=1ms")
	d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
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
	// Four drivers of 500 requests a second each: one ticker does not
	// keep a 500 µs pace on a busy machine.
	const drivers = 4
	lctx, stop := context.WithCancel(ctx)
	done := make(chan *tally, drivers)
	for range drivers {
		go func() { done <- drive(lctx, c.DialContext, 2*time.Millisecond) }()
	}
	var worst, total time.Duration
	var n int
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
		signals := map[string]cluster.Event{}
		for _, e := range c.EventLog().Events()[from:] {
			switch e.Kind {
			case cluster.SignalSent:
				signals[e.Pod] = e
			case cluster.Killed:
				s := signals[e.Pod]
				grace, _ := time.ParseDuration(s.Fields["grace"])
				late := e.Time.Sub(s.Time.Add(grace))
				worst, total, n = max(worst, late), total+late, n+1
			}
		}
	}
	b.StopTimer()
	stop()
	requests := 0
	for range drivers {
		tl := <-done
		requests += tl.ok + tl.refused + tl.other
	}
	b.ReportMetric(float64(total.Microseconds())/float64(max(n, 1))/1000, "mean-late-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-late-ms")
	b.ReportMetric(float64(n)/float64(b.N), "kills/op")
	b.ReportMetric(float64(requests)/b.Elapsed().Seconds(), "req/s")
}

// newBenchCluster is newCluster for benchmarks.
func newBenchCluster(b *testing.B) *Cluster {
	b.Helper()
	c, err := New(Config{PodCIDR: netipPrefix(subnets.Add(1)), Kubelet: KubeletConfig{WorkingDir: b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			b.Errorf("close cluster: %v", err)
		}
	})
	return c
}
