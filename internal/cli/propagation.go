package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/scenario"
)

type propagationFlags struct {
	local  bool
	pods   int
	window time.Duration
	rate   float64
	margin time.Duration
	output string
	kubeFlags
}

func newPropagationCommand(streams Streams) *cobra.Command {
	var flags propagationFlags
	cmd := &cobra.Command{
		Use:   "propagation (--kube | --local)",
		Short: "Measure how long the cluster takes to stop sending traffic to a deleted pod, and size the preStop delay",
		Long: `Measure the cluster's endpoint propagation, as the published rollout
experiment that closingtime lab replays (seed 001, docs/lab.md) advises
before choosing a preStop delay: deploy pods of the lab server whose
preStop sleeps --window (so that a deleted pod keeps answering whatever
still reaches it), send them new connections through their Service,
delete --pods pods one by one, and time for each the span from its deletion to the last request that
reached it. The longest span plus --margin, in whole seconds, is the preStop
delay to give your pods; preStop and your server's drain must then fit in
terminationGracePeriodSeconds.

With --kube the traffic comes from load pods inside the cluster, so it
crosses kube-proxy as your clients' does (docs/kube.md); a deletion's time is
when closingtime saw it through the API, a request's when the load pod sent
it: the clocks of this machine and of the nodes must agree. With --local it
measures the embedded cluster's own propagation delays.`,
		Example: `  closingtime propagation --kube --image closingtime:dev
  closingtime propagation --kube -n staging --pods 5 --window 15s -o json
  closingtime propagation --local`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.kubeFlags.check("propagation", cmd.Flags()); err != nil {
				return err
			}
			return runPropagation(cmd.Context(), streams, flags)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&flags.local, "local", false, "measure the embedded local cluster")
	f.IntVar(&flags.pods, "pods", scenario.DefaultPropagationPods, "pods to delete, one by one")
	f.DurationVar(&flags.window, "window", scenario.DefaultPropagationWindow, "the measured pods' preStop sleep, in whole seconds: the longest propagation that can be seen")
	f.Float64Var(&flags.rate, "rate", scenario.DefaultPropagationRate, "new connections per second: the measurement's resolution is its inverse")
	f.DurationVar(&flags.margin, "margin", scenario.DefaultPropagationMargin, "added to the longest propagation for the recommended preStop")
	f.StringVarP(&flags.output, "output", "o", "text", "output format: text or json")
	flags.kubeFlags.bind(f)
	return cmd
}

func runPropagation(ctx context.Context, streams Streams, flags propagationFlags) error {
	switch {
	case flags.local == flags.kube:
		return usagef("propagation: give --kube (the cluster of your kubeconfig) or --local (the embedded cluster)")
	case flags.output != "text" && flags.output != "json":
		return usagef("propagation: invalid --output %q: accepted values are text, json", flags.output)
	case flags.window < time.Second || flags.window%time.Second != 0:
		return usagef("propagation: invalid --window %v: want whole seconds, at least 1s (a preStop sleep takes seconds)", flags.window)
	}
	// A zero would be PropagationConfig's default, not a zero.
	if err := cmp.Or(
		positive("propagation", "--pods", flags.pods),
		positive("propagation", "--rate", flags.rate),
		positive("propagation", "--margin", flags.margin),
	); err != nil {
		return err
	}
	cfg := scenario.PropagationConfig{Pods: flags.pods, Window: flags.window, Rate: flags.rate, Margin: flags.margin}
	s, err := scenario.PropagationScenario(cfg)
	if err != nil {
		return fmt.Errorf("propagation: %w", err)
	}
	rc, err := flags.kubeFlags.runnerConfig("propagation", scenario.RunnerConfig{}, nil, streams.Err)
	if err != nil {
		return err
	}
	res, err := runScenarios(ctx, streams, "propagation", rc, []*scenario.Scenario{s}, 1)
	if err != nil {
		return err
	}
	p, err := scenario.MeasurePropagation(&res.Scenarios[0], cfg)
	if err != nil {
		return err
	}
	if flags.output == "json" {
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	return writePropagation(streams.Out, p)
}

// writePropagation writes p as a table of the deleted pods and the
// recommendation.
func writePropagation(w io.Writer, p *scenario.Propagation) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tDELETED\tLAST REQUEST\tPROPAGATION")
	for _, pp := range p.Pods {
		fmt.Fprintf(tw, "%s\t%.3fs\t%.3fs\t%.0f ms\n", pp.Pod, pp.DeletedMS/1000, pp.LastRequestMS/1000, pp.PropagationMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nlongest propagation: %.0f ms\n", p.MaxMS)
	if p.Saturated {
		fmt.Fprintf(w, "a pod still got requests at the end of its %.0f s preStop: the propagation is longer than --window can show; measure again with a longer one\n", p.WindowMS/1000)
	}
	fmt.Fprintf(w, `recommended preStop: %d s (the longest plus a %.0f ms margin, in whole seconds):

    lifecycle:
      preStop:
        sleep:
          seconds: %d

preStop and the server's drain must fit in terminationGracePeriodSeconds.
`, p.PreStopSeconds, p.MarginMS, p.PreStopSeconds)
	return nil
}
