package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/lint"
	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// lintFlags are the flags of `closingtime lint`.
type lintFlags struct {
	output    string
	enable    []string
	disable   []string
	threshold string // "" means the configuration file's, or lint.Warning
	config    string // "" means lint.DefaultConfigFile when it exists
	values    []string
	measured  string // a results file of rollout or lab; "" for none
	listRules bool
}

func newLintCommand(streams Streams) *cobra.Command {
	var flags lintFlags
	cmd := &cobra.Command{
		Use:   "lint [flags] FILE|DIR|- ...",
		Short: "Find the settings that make rollouts and drains drop requests",
		Long: `lint checks Kubernetes manifests for the causes of requests dropped during
rollouts, scale-ins and node drains: missing readiness probes and preStop
delays, termination budgets that exceed the grace period, a shell or npm as
the container's first process, rollouts that take serving pods away, and
disruption budgets that block every drain. It relates objects as the
cluster does: Services and PodDisruptionBudgets to workloads by selector,
autoscalers to their targets, within each directory (or kustomization or
chart), as if each were applied to a cluster of its own.

With --measured, it also judges the preStop delay of each Deployment that
a results file of closingtime rollout (or lab) measured, matched by
namespace and name: how long after their termination started the old pods
still received requests on new connections (kept-alive ones stay on their
pod whatever the endpoints say), plus a margin of ` + fmt.Sprint(lint.MeasuredMarginSeconds) + ` s, is the delay they need,
and requests that failed around SIGTERM show a delay too short
(prestop-shorter-than-measured). With -o text, a line on standard error
for each measured container says what was compared with what, finding or
not. A measured Deployment that no manifest has is reported, with exit
status 2.

Arguments are files, directories (read recursively for *.yaml, *.yml,
*.json, Dockerfiles and supervisord *.conf/*.ini files) and - for standard
input (manifests). A directory with a kustomization.yaml is built, and one
with a Chart.yaml rendered with --values, in process: no kustomize or helm
binary is needed, and findings point at the resource files and templates
the objects came from. A JSON or YAML file found in a directory that holds
no Kubernetes object (no apiVersion, kind or metadata: a package.json, a
values file, results of closingtime rollout) is skipped, and said so on
standard error. A container that runs supervisord with a configuration
that is not among the inputs gets a note there too: its programs went
unchecked. A file that cannot be read is reported
with its reason and the others are still checked. Suppress a rule for one
object with the annotation closingtime.dev/ignore: RULE[,RULE], and by file
or object in the configuration file (--config, by default
.closingtime-lint.yaml when it exists; see docs/lint/README.md). Rule pages:
docs/lint/RULE.md.

Exit status: 0 when no finding reaches --threshold, 1 when one does, 2 when
an input or the --measured file could not be read, or a Deployment measured
there is in none of the inputs.`,
		Example: `  closingtime lint deploy/
  closingtime lint -f values-prod.yaml ./chart
  kubectl get deploy -o yaml | closingtime lint -
  closingtime lint -o sarif --threshold error k8s/ > lint.sarif
  closingtime rollout -f deploy.yaml --local --repeat 3 --results results.json
  closingtime lint --measured results.json deploy.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLint(streams, flags, args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&flags.output, "output", "o", "text", "output format: text, json or sarif")
	f.StringSliceVar(&flags.enable, "enable", nil, "run only these rules (comma-separated IDs), instead of the configuration file's")
	f.StringSliceVar(&flags.disable, "disable", nil, "do not run these rules (comma-separated IDs), besides the configuration file's")
	f.StringVar(&flags.threshold, "threshold", "", "lowest severity that makes the exit status 1: info, warning or error (default: the configuration file's, else "+lint.Warning.String()+")")
	f.StringVar(&flags.config, "config", "", "configuration file (default "+lint.DefaultConfigFile+" when it exists)")
	f.StringArrayVarP(&flags.values, "values", "f", nil, "Helm values file for the charts among the inputs (repeatable; later files win)")
	f.StringVar(&flags.measured, "measured", "", "results file of closingtime rollout or lab, to judge the measured Deployments' preStop delays by")
	f.BoolVar(&flags.listRules, "list-rules", false, "list the rules and exit")
	return cmd
}

func runLint(streams Streams, flags lintFlags, args []string) error {
	file, err := readLintConfig(flags.config)
	if err != nil {
		return err
	}
	cfg := file.Config()
	if len(flags.enable) > 0 {
		cfg.Enable = flags.enable
	}
	cfg.Disable = append(cfg.Disable, flags.disable...)
	if flags.measured != "" {
		if cfg.Measured, err = readMeasured(flags.measured); err != nil {
			return err
		}
	}
	threshold := ptr.Deref(file.Threshold, lint.Warning)
	if flags.threshold != "" {
		if threshold, err = lint.ParseSeverity(flags.threshold); err != nil {
			return usagef("lint: --threshold: %v", err)
		}
	}
	var write func(io.Writer, lint.Report) error
	switch flags.output {
	case "text":
		colour := isTerminal(streams.Out)
		write = func(w io.Writer, r lint.Report) error { return lint.WriteText(w, r, colour) }
	case "json":
		write = lint.WriteJSON
	case "sarif":
		write = lint.WriteSARIF
	default:
		return usagef("lint: invalid --output %q: accepted values are text, json, sarif", flags.output)
	}
	linter, err := lint.New(cfg)
	if err != nil {
		return usagef("lint: %v (see closingtime lint --list-rules)", err)
	}
	if flags.listRules {
		return listRules(streams.Out, linter.Rules())
	}
	if len(args) == 0 {
		if manifests := valuesManifests(flags.values); len(manifests) > 0 {
			names := strings.Join(manifests, " ")
			return usagef("lint: no input: -f is --values, Helm values for a chart; to lint %s, name it: closingtime lint %s", names, names)
		}
		return usagef("lint: no input: name files, directories, or - for standard input")
	}

	in, errs := lint.Read(manifest.Reader{Values: flags.values, Stdin: streams.In}, args)
	if len(in.Skipped) > 0 {
		fmt.Fprintf(streams.Err, "closingtime: lint: skipped, as they hold no Kubernetes object: %s\n", strings.Join(in.Skipped, ", "))
	}
	for _, d := range lint.Duplicates(in) {
		fmt.Fprintf(streams.Err, "closingtime: lint: note: %s is written %d times among objects related as one cluster's (%s); a cluster holds one, so each copy was related to the Services and budgets of every copy\n",
			d.Object, len(d.At), strings.Join(d.At, ", "))
	}
	for _, n := range lint.UncheckedSupervisord(in) {
		fmt.Fprintf(streams.Err, "closingtime: lint: note: %s\n", n)
	}
	report := lint.Report{Version: buildVersion().String(), Rules: linter.Rules(), Findings: linter.Lint(in), Errors: errs}
	if err := write(streams.Out, report); err != nil {
		return fmt.Errorf("lint: write report: %w", err)
	}
	if flags.output == "text" {
		// Say what the measurement was compared with, finding or not;
		// a machine's report carries the findings only.
		for _, c := range linter.MeasuredChecks(in) {
			fmt.Fprintf(streams.Err, "closingtime: lint: measured: %s\n", c)
		}
	} else {
		// The report on stdout is for machines; say on stderr what could
		// not be read, as the text report does.
		for _, e := range errs {
			fmt.Fprintf(streams.Err, "closingtime: lint: %v\n", e)
		}
	}
	unmatched := linter.Unmatched(in)
	for _, m := range unmatched {
		fmt.Fprintf(streams.Err, "closingtime: lint: --measured %s: no input has Deployment %s, so its measurement was compared with nothing\n", flags.measured, m.Deployment)
	}
	switch {
	case len(errs) > 0 || len(unmatched) > 0:
		return exitStatus(ExitUsage)
	case report.Count(threshold) > 0:
		return exitStatus(ExitFailed)
	}
	return nil
}

// valuesManifests returns the --values files that hold Kubernetes
// objects: manifests given with -f, as rollout takes its manifest, rather
// than Helm values.
func valuesManifests(values []string) []string {
	var out []string
	for _, name := range values {
		if data, err := os.ReadFile(name); err == nil && manifest.HoldsObject(data) {
			out = append(out, name)
		}
	}
	return out
}

// readLintConfig reads the configuration file at name, or
// lint.DefaultConfigFile when name is "" and that file exists; otherwise it
// returns the empty configuration.
func readLintConfig(name string) (lint.ConfigFile, error) {
	if name == "" {
		if _, err := os.Stat(lint.DefaultConfigFile); err != nil {
			return lint.ConfigFile{}, nil
		}
		name = lint.DefaultConfigFile
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return lint.ConfigFile{}, inputError("lint: --config "+name, err)
	}
	f, err := lint.ParseConfigFile(data)
	if err != nil {
		return lint.ConfigFile{}, usagef("lint: %s: %v", name, err)
	}
	return f, nil
}

// readMeasured reads the results file at name, as `closingtime report`
// does, into what lint compares with the manifests.
func readMeasured(name string) ([]lint.Measurement, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, inputError("lint: --measured "+name, err)
	}
	defer f.Close()
	res, err := results.Read(f)
	if err != nil {
		return nil, usagef("lint: --measured %s: %v", name, err)
	}
	measured, err := lint.Measure(res)
	if err != nil {
		return nil, usagef("lint: --measured %s: %v", name, err)
	}
	return measured, nil
}

// listRules prints one line per rule: ID, severity and title.
func listRules(w io.Writer, rules []lint.Rule) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.Severity, r.Title)
	}
	return tw.Flush()
}

// isTerminal reports whether w is a terminal that takes colour: a character
// device, with NO_COLOR unset and TERM not "dumb" (https://no-color.org).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || strings.EqualFold(os.Getenv("TERM"), "dumb") {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
