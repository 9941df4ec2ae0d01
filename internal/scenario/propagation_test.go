package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/load"
)

// TestPropagationLocal measures the endpoint propagation of an embedded
// cluster whose nodes apply endpoint changes 400 to 600 ms late: each
// deleted pod's last request comes within that range of its deletion (and
// the endpoints controller's own step), and the recommended preStop covers
// the longest with the margin.
func TestPropagationLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("deletes pods under load")
	}
	t.Parallel()
	cfg := PropagationConfig{Pods: 2, Window: 3 * time.Second, Rate: 200, Margin: time.Second}
	s, err := PropagationScenario(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Cluster.PropagationDelay = DelayRange{Min: 400 * time.Millisecond, Max: 600 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := newRunner(t).Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := MeasurePropagation(res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pods) != 2 || p.Pods[0].Pod == p.Pods[1].Pod {
		t.Fatalf("pods %+v, want two different pods deleted", p.Pods)
	}
	// A deleted pod's last request comes before the nodes' cutover by the
	// gap since the traffic last picked it, some tens of milliseconds at
	// 200 requests a second over three pods: the lower bound sits well
	// under the nodes' 400 ms, and far above what no delay measures.
	for _, pp := range p.Pods {
		if pp.PropagationMS < 200 || pp.PropagationMS > 2000 {
			t.Errorf("pod %s: propagation %.0f ms, want it near the nodes' 400 to 600 ms", pp.Pod, pp.PropagationMS)
		}
	}
	if p.Saturated || p.PreStopSeconds < 2 || float64(p.PreStopSeconds)*1000 < p.MaxMS+1000 {
		t.Errorf("propagation %+v: want a preStop of at least the longest propagation plus a second, unsaturated", p)
	}
}

func TestPropagationScenario(t *testing.T) {
	s, err := PropagationScenario(PropagationConfig{Window: 7 * time.Second, Pods: 4, Rate: 30})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if s.Repetitions != 4 || s.Action.Kind != ActionDeletePod || s.Traffic.Clients[0].Rate != 30 || s.Traffic.Clients[0].Kind != load.NewConn ||
		spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds != 7 || *spec.TerminationGracePeriodSeconds != 12 {
		t.Errorf("scenario %+v, pod spec %+v: want 4 deletions under new connections at 30/s, a 7 s preStop within a 12 s grace", s, spec)
	}
	if _, err := PropagationScenario(PropagationConfig{Window: 1500 * time.Millisecond}); err == nil {
		t.Error("a window of 1.5 s: no error, want whole seconds")
	}
}
