package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// rolloutExitFailures is the exit status of `closingtime rollout` when more
// requests failed than --max-failures allows.
const rolloutExitFailures = 1

type rolloutFlags struct {
	files           []string
	local           bool
	repeat          int
	maxFailures     int64
	rate            float64
	clients         []string
	connections     int
	connectTimeout  time.Duration
	responseTimeout time.Duration
	retry           bool
	service         string
	path            string
	warmUp, after   time.Duration
	output          string
	results         string
	report          string
	images          []string
}

func newRolloutCommand(streams Streams) *cobra.Command {
	var flags rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollout -f FILE --local",
		Short: "Restart your Deployment's rollout under load and count the failed requests",
		Long: `Apply your manifests to the embedded local cluster (--local), with your
own server as the pods (the containers' command and args, as written), send
traffic through the Service, restart the Deployment's rollout --repeat times,
and count every failed request by kind and by second, with what each old pod
did. The output and results file are those of closingtime lab.

The command exits 1 when more than --max-failures requests failed over all
repetitions, so that it can gate CI.

A container of image closingtime without a command runs this binary with its
args (docs/scenario.md). A container of another image without a command
runs the local command that --image-command maps its image to, or that
its pod template's annotation closingtime.dev/command.CONTAINER gives
(docs/local-cluster.md).`,
		Example: `  closingtime rollout -f deploy.yaml --local
  closingtime rollout -f k8s/ --local --repeat 3 --client new-conn=50 --client keep-alive=20 --path /work
  closingtime rollout -f deploy.yaml --local --image-command 'registry.example/shop:1.4=./bin/shop --port $(PORT)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRollout(cmd.Context(), streams, flags)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&flags.files, "filename", "f", nil, "manifest file or directory, as kubectl's -f; repeatable")
	f.BoolVar(&flags.local, "local", false, "run on the embedded local cluster (required: the only backend so far)")
	f.IntVar(&flags.repeat, "repeat", 1, "rollouts to run")
	f.Int64Var(&flags.maxFailures, "max-failures", 0, "failed requests allowed over all rollouts before the exit status is 1")
	f.Float64Var(&flags.rate, "rate", load.DefaultRate, "requests per second of each --client that gives no rate of its own")
	f.StringArrayVar(&flags.clients, "client", nil, "a client: new-conn or keep-alive, with its own rate as KIND=RATE; repeatable (default new-conn)")
	f.IntVar(&flags.connections, "connections", load.DefaultConnections, "persistent connections of a keep-alive client")
	f.DurationVar(&flags.connectTimeout, "connect-timeout", load.DefaultConnectTimeout, "how long a connect may take")
	f.DurationVar(&flags.responseTimeout, "response-timeout", load.DefaultResponseTimeout, "how long a response may take once connected")
	f.BoolVar(&flags.retry, "retry", false, "resend the requests that are safe to resend, on a new connection, and report them as absorbed")
	f.StringVar(&flags.service, "service", "", "the Service to send traffic to (default: the only one in the files)")
	f.StringVar(&flags.path, "path", scenario.DefaultPath, "the HTTP path to request")
	f.DurationVar(&flags.warmUp, "warm-up", scenario.DefaultWarmUp, "traffic before each rollout")
	f.DurationVar(&flags.after, "after", scenario.DefaultAfter, "traffic after each rollout is complete and its old pods are gone")
	f.StringVarP(&flags.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&flags.results, "results", "", "file to write the results to as JSON")
	f.StringVar(&flags.report, "report", "", "file to write the HTML report to (docs/report.md)")
	f.StringArrayVar(&flags.images, "image-command", nil, imageCommandUsage)
	return cmd
}

func runRollout(ctx context.Context, streams Streams, flags rolloutFlags) error {
	switch {
	case len(flags.files) == 0:
		return usagef("rollout: no manifests: give -f FILE")
	case !flags.local:
		return usagef("rollout: give --local: the embedded cluster is the only backend so far")
	case flags.output != "text" && flags.output != "json":
		return usagef("rollout: invalid --output %q: accepted values are text, json", flags.output)
	case flags.repeat <= 0 || flags.rate <= 0 || flags.connections <= 0 || flags.connectTimeout <= 0 || flags.responseTimeout <= 0:
		return usagef("rollout: --repeat, --rate, --connections, --connect-timeout and --response-timeout must be positive")
	case flags.maxFailures < 0 || flags.warmUp < 0 || flags.after < 0:
		return usagef("rollout: --max-failures, --warm-up and --after must not be negative")
	}
	images, err := imageCommands("rollout", flags.images)
	if err != nil {
		return err
	}
	clients, err := parseClients(flags.clients, flags.rate, flags.connections)
	if err != nil {
		return &usageError{fmt.Errorf("rollout: %w", err)}
	}
	traffic := scenario.Traffic{Service: flags.service, Path: flags.path,
		ConnectTimeout: flags.connectTimeout, ResponseTimeout: flags.responseTimeout}
	for _, c := range clients {
		traffic.Clients = append(traffic.Clients, scenario.Client{Kind: c.Kind.String(), Rate: c.Rate, Connections: c.Connections})
	}
	if flags.retry {
		traffic.Retry = &scenario.Retry{}
	}
	s, err := scenario.FromManifests("rollout", flags.files, traffic, scenario.Action{Kind: scenario.ActionRolloutRestart}, flags.repeat)
	if err != nil {
		return &usageError{fmt.Errorf("rollout: %w", err)}
	}
	s.WarmUp, s.After = flags.warmUp, flags.after
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("rollout: find the closingtime binary: %w", err)
	}
	scenarios := []*scenario.Scenario{s}
	shown := newProgress(streams.Err, scenarios)
	runner, err := scenario.NewRunner(scenario.RunnerConfig{NewCluster: localClusters(exe, images), Progress: shown.update})
	if err != nil {
		return err
	}
	results, err := runScenarios(ctx, streams, "rollout", runner, scenarios, 1, shown)
	if err != nil {
		return err
	}
	if err := writeFiles(flags.results, flags.report, results); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if flags.output == "json" {
		err = report.WriteJSON(streams.Out, results)
	} else {
		err = report.WriteText(streams.Out, results)
	}
	if err != nil {
		return err
	}
	if failed := results.Scenarios[0].Totals.Failed(); failed > flags.maxFailures {
		fmt.Fprintf(streams.Err, "rollout: %d requests failed, more than --max-failures %d\n", failed, flags.maxFailures)
		return exitStatus(rolloutExitFailures)
	}
	return nil
}
