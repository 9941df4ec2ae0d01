package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// The names of the sides of `lab --compare`.
const (
	sideEmbedded = "embedded"
	sideCluster  = "cluster"
)

// runCompare runs scenarios on the embedded cluster, then on the
// `closingtime cluster` of flags.stateDir (started for the run and stopped
// after it, unless one is up already), and writes their figures side by
// side: the real controllers are the judge of the embedded ones.
func runCompare(ctx context.Context, streams Streams, scenarios []*scenario.Scenario, images map[string][]string, flags labFlags) error {
	runnable := realClusterScenarios(streams.Err, scenarios, "runs on the embedded cluster only")
	cfg := scenario.RunnerConfig{Quick: flags.quick, Repetitions: flags.repeat}
	embeddedCfg, err := flags.kubeFlags.runnerConfig("lab", cfg, images, streams.Err)
	if err != nil {
		return err
	}
	started := time.Now()
	embedded, err := runScenarios(ctx, streams, "lab", embeddedCfg, scenarios, flags.parallel)
	if err != nil {
		return err
	}
	fmt.Fprintf(streams.Err, "lab: %d scenarios on the embedded cluster in %s\n", len(scenarios), time.Since(started).Round(100*time.Millisecond))
	real := &results.Results{}
	if len(runnable) > 0 {
		if real, err = runOnCluster(ctx, streams, runnable, cfg, flags); err != nil {
			return err
		}
	}
	sides := []report.Side{{Cluster: sideEmbedded, Results: embedded}, {Cluster: sideCluster, Results: real}}
	shown := rendering{
		all:  bothSides(sides),
		json: func(w io.Writer) error { return report.WriteComparisonJSON(w, sides) },
		text: func(w io.Writer) error { return report.WriteComparison(w, sides) },
	}
	// The paths are the same on both sides.
	return flags.out.write(streams, "lab", shown, clientErrorWarnings(scenarios, embedded))
}

// runOnCluster runs scenarios on the `closingtime cluster` of
// flags.stateDir, with the embedded cluster's number of nodes and image
// commands if it starts one.
func runOnCluster(ctx context.Context, streams Streams, scenarios []*scenario.Scenario, cfg scenario.RunnerConfig, flags labFlags) (_ *results.Results, err error) {
	st, stop, err := ensureCluster(ctx, streams, flags.stateDir, flags.images)
	if err != nil {
		// Its errors begin with the command they stand for: "cluster"
		// or "cluster up".
		return nil, fmt.Errorf("lab: closingtime %w", err)
	}
	defer func() {
		if serr := stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("lab: stop the closingtime cluster: %w", serr))
		}
	}()
	kf := kubeFlags{kube: true, kubeconfig: st.Kubeconfig, image: kube.DefaultImage, loadPods: kube.DefaultLoadPods}
	if cfg, err = kf.runnerConfig("lab", cfg, nil, streams.Err); err != nil {
		return nil, err
	}
	started := time.Now()
	res, err := runScenarios(ctx, streams, "lab", cfg, scenarios, flags.parallel)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(streams.Err, "lab: %d scenarios on the closingtime cluster in %s\n", len(scenarios), time.Since(started).Round(100*time.Millisecond))
	return res, nil
}

// bothSides returns the scenarios of every side as one set of results,
// each scenario named with its side.
func bothSides(sides []report.Side) *results.Results {
	both := &results.Results{}
	for _, side := range sides {
		for _, s := range side.Results.Scenarios {
			s.Name += " (" + side.Cluster + ")"
			both.Scenarios = append(both.Scenarios, s)
		}
	}
	return both
}
