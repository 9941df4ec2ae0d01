package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

type rolloutFlags struct {
	files  []string
	local  bool
	repeat int
	trafficFlags
	service       string
	path          string
	pathGiven     bool
	protocol      string
	warmUp, after time.Duration
	out           resultsOutput
	images        []string
	kubeFlags
}

func newRolloutCommand(streams Streams) *cobra.Command {
	var flags rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollout (-f FILE [deploy/NAME] --local | -f FILE [deploy/NAME] --kube | --kube deploy/NAME)",
		Short: "Restart your Deployment's rollout under load and count the failed requests",
		Long: `Apply your manifests to the embedded local cluster (--local), with your
own server as the pods (the containers' command and args, as written), send
traffic through the Service, restart the Deployment's rollout --repeat times
(deploy/NAME picks it when the files hold several),
and count every failed request by kind and by second, with what each old pod
did and the cause of each failure, with its fix (docs/diagnosis.md). The
output and files are those of closingtime lab: -o json writes the results
on standard output, --results FILE as JSON and --report FILE as an HTML
page (neither by default); standard error says at the end which files
were written and where, and last how many requests failed and a line
for each of their causes, the most first, with its count and its fix.

--protocol http2 sends the GETs over HTTP/2 without TLS (h2c), with prior
knowledge, as a Go client of an HTTP/2 service does: the server must
speak HTTP/2 from the first byte, and still HTTP/1.1 where its httpGet
probes come in, which the kubelet sends in HTTP/1.1. --protocol grpc
makes unary calls of the method --path names, as /SERVICE/METHOD
(/grpc.health.v1.Health/Check, say), each with the empty request message,
which every protobuf message type reads as all its fields absent; pick a
method that answers OK to it. Without --path, it calls
closingtime.lab.v1.Lab/Work, for a workload of closingtime serve --grpc.

--junit FILE, or -o junit, writes the results as JUnit XML for CI: a test
case per rollout, failed when more of its requests failed than
--max-failures allows.

Exit status: 0 when no rollout failed more than --max-failures requests;
1 when one did (standard error names it), so that it can gate CI; 2 for a
bad flag or a manifest that cannot be read or run (with --local, a
container without a command for its image); 3 when the setup did not run:
the workload did not deploy (its pods never all became ready, its Service
never answered, or, with --local, answered in a way no wait mends, such as
a gRPC server without the method, or a container exited before the
rollout), so nothing was
measured and no file is written; 4 when the tool failed; 130 when
interrupted.

With --kube, the same runs on the real cluster of your kubeconfig
(--kubeconfig, --context), with the traffic sent from load pods inside the
cluster, through the Service as its clients reach it (docs/kube.md): -f
applies your manifests into a namespace of closingtime's own, deleted at the
end, or into -n; deploy/NAME restarts a Deployment that runs already, in -n,
and applies nothing: only the load pods are created. The load pods, and the
namespace closingtime created, are deleted however the run ends.

A container of image closingtime without a command runs this binary with its
args (docs/scenario.md); with --kube, it runs --image. A container of another
image without a command runs the local command that --image-command maps its
image to, or that its pod template's annotation
closingtime.dev/command.CONTAINER gives (docs/local-cluster.md).`,
		Example: `  closingtime rollout -f deploy.yaml --local
  closingtime rollout -f k8s/ --local --repeat 3 --client new-conn=50 --client keep-alive=20 --path /work
  closingtime rollout -f deploy.yaml --local --image-command 'registry.example/shop:1.4=./bin/shop --port $(PORT)'
  closingtime rollout -f deploy.yaml --local --repeat 3 --max-failures 0 --junit rollout.xml
  closingtime rollout -f deploy.yaml --local --protocol http2 --client keep-alive=100 --connections 1
  closingtime rollout -f deploy.yaml --local --protocol grpc --path /grpc.health.v1.Health/Check --client keep-alive=50
  closingtime rollout --kube deploy/web -n shop --rate 200 --load-pods 2
  closingtime rollout --kube -f deploy.yaml --image closingtime:dev`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("rollout: want at most one deploy/NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.kubeFlags.check("rollout", cmd.Flags()); err != nil {
				return err
			}
			ref := ""
			if len(args) == 1 {
				ref = args[0]
			}
			flags.pathGiven = cmd.Flags().Changed("path")
			return runRollout(cmd.Context(), streams, ref, flags)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&flags.files, "filename", "f", nil, "manifest file or directory, as kubectl's -f; repeatable")
	f.BoolVar(&flags.local, "local", false, "run on the embedded local cluster")
	f.IntVar(&flags.repeat, "repeat", 1, "rollouts to run")
	flags.trafficFlags.bind(f)
	f.StringVar(&flags.service, "service", "", "the Service to send traffic to (default: the only one in the files)")
	f.StringVar(&flags.path, "path", scenario.DefaultPath, "the HTTP path to request (with --protocol grpc: the method to call, /SERVICE/METHOD; not given, closingtime serve --grpc's Work)")
	f.StringVar(&flags.protocol, "protocol", string(scenario.ProtocolHTTP), "what the traffic speaks: http (GETs of --path over HTTP/1.1), http2 (the same over HTTP/2 without TLS, h2c) or grpc (unary calls of the method --path names, with the empty request)")
	f.DurationVar(&flags.warmUp, "warm-up", scenario.DefaultWarmUp, "traffic before each rollout")
	f.DurationVar(&flags.after, "after", scenario.DefaultAfter, "traffic after each rollout is complete and its old pods are gone")
	flags.out.bind(f, "", "", 0)
	f.StringArrayVar(&flags.images, "image-command", nil, imageCommandUsage)
	flags.kubeFlags.bind(f)
	return cmd
}

func runRollout(ctx context.Context, streams Streams, ref string, flags rolloutFlags) error {
	switch {
	case flags.local && flags.kube:
		return usagef("rollout: give --local (the embedded cluster) or --kube (the cluster of your kubeconfig), not both")
	case !flags.local && !flags.kube:
		return usagef("rollout: give --local (the embedded cluster) or --kube (the cluster of your kubeconfig)")
	case ref != "" && !flags.kube && len(flags.files) == 0:
		return usagef("rollout: %s: a Deployment that runs already is rolled out with --kube; with --local, give -f FILE", ref)
	case ref == "" && len(flags.files) == 0:
		return usagef("rollout: no manifests: give -f FILE (or, with --kube, deploy/NAME)")
	case flags.kube && len(flags.images) > 0:
		return usagef("rollout: --image-command is for --local: with --kube, the nodes run the images")
	}
	if err := cmp.Or(
		flags.out.check("rollout"),
		positive("rollout", "--repeat", flags.repeat),
		nonNegative("rollout", "--warm-up", flags.warmUp),
		nonNegative("rollout", "--after", flags.after),
	); err != nil {
		return err
	}
	images, err := imageCommands("rollout", flags.images)
	if err != nil {
		return err
	}
	clients, err := flags.trafficFlags.parse("rollout")
	if err != nil {
		return err
	}
	traffic := scenario.Traffic{Service: flags.service, Path: flags.path, Protocol: scenario.Protocol(flags.protocol),
		ConnectTimeout: flags.connectTimeout, ResponseTimeout: flags.responseTimeout}
	switch traffic.Protocol {
	case scenario.ProtocolHTTP, scenario.ProtocolHTTP2:
	case scenario.ProtocolGRPC:
		if !flags.pathGiven {
			traffic.Path = "" // the lab server's Work
		} else if err := load.CheckGRPCMethod(flags.path); err != nil {
			return usagef("rollout: --path: %v: with --protocol grpc, --path is the method the traffic calls", err)
		}
		if flags.retry {
			return usagef("rollout: --retry is HTTP's: grpc-go's own transparent retries are counted as absorbed")
		}
	default:
		return usagef("rollout: --protocol %q: want http, http2 (HTTP/2 without TLS, h2c) or grpc", flags.protocol)
	}
	// Last of the flags' checks: it writes (and removes) a file.
	if err := flags.out.checkWritable("rollout"); err != nil {
		return err
	}
	for _, c := range clients {
		traffic.Clients = append(traffic.Clients, scenario.Client{Kind: c.Kind, Rate: c.Rate, Connections: c.Connections,
			MaxIdle: c.MaxIdle, MaxLifetime: c.MaxLifetime})
	}
	if flags.retry {
		traffic.Retry = &scenario.Retry{}
	}
	var s *scenario.Scenario
	var cfg scenario.RunnerConfig
	name := ""
	if ref != "" {
		if name, err = parseDeploymentRef(ref); err != nil {
			return &usageError{fmt.Errorf("rollout: %w", err)}
		}
	}
	switch {
	case len(flags.files) == 0:
		var c *kube.Cluster
		if s, c, err = existingRollout(ctx, flags, name, traffic); err != nil {
			err = fmt.Errorf("rollout: %w", err)
			if errors.Is(err, cluster.ErrNotFound) {
				// deploy/NAME or --service names nothing there.
				err = &usageError{err}
			}
			return err
		}
		cfg.NewCluster = func(scenario.ClusterSettings) (*scenario.Cluster, error) {
			return flags.kubeFlags.cluster(c, true), nil
		}
	default:
		action := scenario.Action{Kind: scenario.ActionRolloutRestart, Deployment: name}
		if s, err = scenario.FromManifests("rollout", flags.files, traffic, action, flags.repeat); err != nil {
			return &usageError{fmt.Errorf("rollout: %w", flagErrors(err, map[string]string{
				"traffic.service":   strings.TrimSpace("--service " + flags.service),
				"traffic.path":      "--path " + flags.path,
				"action.deployment": cmp.Or(ref, "deploy/NAME"),
			}))}
		}
		if flags.local {
			if err := checkEntrypoints("rollout", []*scenario.Scenario{s}, images); err != nil {
				return err
			}
		}
		if cfg, err = flags.kubeFlags.runnerConfig("rollout", cfg, images, streams.Err); err != nil {
			return err
		}
	}
	s.WarmUp, s.After = flags.warmUp, flags.after
	res, err := runScenarios(ctx, streams, "rollout", cfg, []*scenario.Scenario{s}, 1)
	if err != nil {
		return err
	}
	var warnings []string
	if w := clientErrorsWarning(clientErrorsOf(&res.Scenarios[0]), flags.path, "give the path your app serves with --path PATH"); w != "" {
		warnings = append(warnings, w)
	}
	err = flags.out.write(streams, "rollout", rendering{all: res}, warnings)
	if err == nil || errors.Is(err, exitStatus(ExitFailed)) {
		fmt.Fprintf(streams.Err, "rollout: %s\n", rolloutVerdict(res.Scenarios[0]))
	}
	return err
}

// rolloutVerdict spells the last lines of a rollout, s: how many of its
// requests failed over its runs and, if some did, a line for each cause
// of them (diagnosis.Sum), the most first, with its count and its fix:
// each fix leaves the others' requests failing.
func rolloutVerdict(s results.Result) string {
	t := s.Totals
	if t.Failed() == 0 {
		verdict := fmt.Sprintf("none of %d requests failed", t.Requests)
		if t.Absorbed > 0 {
			verdict += fmt.Sprintf("; a retry absorbed %d", t.Absorbed)
		}
		return verdict
	}
	verdict := fmt.Sprintf("%d of %d requests failed", t.Failed(), t.Requests)
	counts := slices.DeleteFunc(diagnosis.Sum(s.Runs), func(c results.CauseCount) bool { return c.Failed == 0 })
	if len(counts) == 0 {
		return verdict
	}
	slices.SortStableFunc(counts, func(a, b results.CauseCount) int { return cmp.Compare(b.Failed, a.Failed) })
	unexplained := t.Failed()
	for _, c := range counts {
		unexplained -= int64(c.Failed)
	}
	width := len(strconv.FormatInt(max(int64(counts[0].Failed), unexplained), 10))
	var b strings.Builder
	b.WriteString(verdict + ", by cause:")
	for _, c := range counts {
		fmt.Fprintf(&b, "\n  %*d %s; fix: %s", width, c.Failed, diagnosis.Describe(c.Cause).Title, report.Fix(c.Cause))
	}
	if unexplained > 0 {
		fmt.Fprintf(&b, "\n  %*d without a diagnosis", width, unexplained)
	}
	return b.String()
}

// flagErrors returns err, an error of scenario.FromManifests, in the terms
// of the command line: each *scenario.Error about a field that a flag sets
// names the flag and its value instead, as flags maps them (field to
// "--flag value"); the others name the files without a field, which a
// scenario file has but the command line has not.
func flagErrors(err error, flags map[string]string) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for i, e := range errs {
		var se *scenario.Error
		if !errors.As(e, &se) {
			continue
		}
		if flag, ok := flags[se.Field]; ok {
			errs[i] = fmt.Errorf("%s: %w", flag, se.Err)
		} else {
			errs[i] = &scenario.Error{File: se.File, Line: se.Line, Err: se.Err}
		}
	}
	return errors.Join(errs...)
}

// existingRollout connects to the cluster of flags and returns the
// scenario of a rollout of Deployment name, which runs there already,
// with its Service and traffic, and the cluster, which the runner closes.
func existingRollout(ctx context.Context, flags rolloutFlags, name string, traffic scenario.Traffic) (*scenario.Scenario, *kube.Cluster, error) {
	cfg := flags.kubeFlags.config()
	// The workload is in the namespace given, or the context's.
	cfg.CreateNamespace = false
	c, err := kube.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	d, svc, err := c.Workload(ctx, c.Namespace(), name, traffic.Service)
	if err != nil {
		c.Close(context.WithoutCancel(ctx))
		if traffic.Service == "" && !errors.Is(err, cluster.ErrNotFound) {
			err = fmt.Errorf("%w (--service)", err)
		}
		return nil, nil, err
	}
	s := &scenario.Scenario{
		Name:        "rollout",
		File:        "deployment/" + name,
		Traffic:     traffic,
		Action:      scenario.Action{Kind: scenario.ActionRolloutRestart, Deployment: name},
		Repetitions: flags.repeat,
		Objects:     []manifest.Object{{Obj: d, File: "deployment/" + name}, {Obj: svc, File: "service/" + svc.Name}},
	}
	s.Traffic.Service = svc.Name
	return s, c, nil
}
