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
	embeddedCfg, err := flags.kubeFlags.runnerConfig("lab", cfg, images)
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
	both := bothSides(sides)
	err = writeAll(
		output{flags.out.results, func(w io.Writer) error { return report.WriteComparisonJSON(w, sides) }},
		output{flags.out.report, func(w io.Writer) error { return report.WriteHTML(w, both) }},
		output{flags.out.junit, func(w io.Writer) error { return flags.out.writeJUnit(w, "lab", both) }})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	switch flags.out.format {
	case "json":
		err = report.WriteComparisonJSON(streams.Out, sides)
	case "junit":
		err = flags.out.writeJUnit(streams.Out, "lab", both)
	default:
		err = report.WriteComparison(streams.Out, sides)
	}
	if err != nil {
		return err
	}
	flags.out.wrote(streams.Err, "lab")
	// The paths are the same on both sides.
	for _, w := range clientErrorWarnings(scenarios, embedded) {
		fmt.Fprintf(streams.Err, "lab: %s\n", w)
	}
	return flags.out.gate(streams.Err, "lab", both)
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
	if cfg, err = kf.runnerConfig("lab", cfg, nil); err != nil {
		return nil, err
	}
	started := time.Now()
	results, err := runScenarios(ctx, streams, "lab", cfg, scenarios, flags.parallel)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(streams.Err, "lab: %d scenarios on the closingtime cluster in %s\n", len(scenarios), time.Since(started).Round(100*time.Millisecond))
	return results, nil
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
