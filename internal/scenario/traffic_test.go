package scenario

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// splitTraffic sends a repetition's traffic from generators in this
// process at once, each at 1/generators of the rates, and merges their
// reports, as the load pods of a real cluster do. It counts its calls.
type splitTraffic struct {
	dial       load.Dialer
	generators int
	waits      atomic.Int32
	runs       atomic.Int32
}

func (s *splitTraffic) WaitServing(ctx context.Context, cfg load.Config, failed func(error)) error {
	s.waits.Add(1)
	return LocalTraffic(s.dial, nil).WaitServing(ctx, cfg, failed)
}

func (s *splitTraffic) Run(ctx context.Context, cfg load.Config, started func()) (*load.Report, []load.Result, error) {
	s.runs.Add(1)
	part := load.Split(cfg, s.generators)
	reports := make([]*load.Report, s.generators)
	requests := make([][]load.Result, s.generators)
	errs := make([]error, s.generators)
	var ready, done sync.WaitGroup
	for i := range s.generators {
		ready.Add(1)
		done.Go(func() {
			reports[i], requests[i], errs[i] = LocalTraffic(s.dial, nil).Run(ctx, part, ready.Done)
		})
	}
	ready.Wait()
	started()
	done.Wait()
	var all []load.Result
	for i := range s.generators {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
		all = append(all, requests[i]...)
	}
	merged, err := load.Merge(reports...)
	return merged, all, err
}

// runWithTraffic runs the catalog's scenario name quick on a local
// cluster, with the traffic source that newTraffic returns for it, and
// returns the scenario and its result.
func runWithTraffic(t *testing.T, name string, newTraffic func(cluster.Backend) TrafficSource) (*Scenario, *results.Result) {
	t.Helper()
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	scenarios, err := Select(all, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	newCluster := newRunner(t).cfg.NewCluster
	r, err := NewRunner(RunnerConfig{Quick: true, NewCluster: func(s ClusterSettings) (*Cluster, error) {
		c, err := newCluster(s)
		if err != nil {
			return nil, err
		}
		c.Traffic = newTraffic(c.Backend)
		return c, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := r.Run(ctx, scenarios[0])
	if err != nil {
		t.Fatal(err)
	}
	return scenarios[0], res
}

// TestRunnerTrafficSource runs seed 001's plain rollout with its traffic
// split between two generators whose reports are merged: the runner uses
// the source it is given, once per repetition, and computes the same
// figures from the merged report as from one generator's.
func TestRunnerTrafficSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	var source *splitTraffic
	s, res := runWithTraffic(t, "1-plain", func(c cluster.Backend) TrafficSource {
		source = &splitTraffic{dial: c.DialContext, generators: 2}
		return source
	})
	if w, n := source.waits.Load(), source.runs.Load(); w != 1 || n != 1 {
		t.Errorf("the source waited %d times and ran %d times, want once each", w, n)
	}
	run := res.Runs[0]
	rate := cmp.Or(s.Traffic.Clients[0].Rate, load.DefaultRate)
	if len(run.Clients) != 1 || run.Clients[0].Rate != rate {
		t.Errorf("clients %+v, want one at the scenario's rate %v", run.Clients, rate)
	}
	tot := res.Totals
	if tot.Failed() < tot.Requests/10 || tot.Refused <= tot.Failed()/2 {
		t.Errorf("totals %+v: want at least a tenth of the requests failed, most of them refused", tot)
	}
	if len(run.OldPods) != 3 || len(run.FailedSeconds) == 0 {
		t.Errorf("%d old pods, %d seconds with failures: want 3 and some", len(run.OldPods), len(run.FailedSeconds))
	}
}
