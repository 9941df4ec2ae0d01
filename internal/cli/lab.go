package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

type labFlags struct {
	files    []string
	repeat   int
	quick    bool
	out      resultsOutput
	parallel int
	list     bool
	images   []string
	compare  bool
	stateDir string
	kubeFlags
}

func newLabCommand(streams Streams) *cobra.Command {
	var flags labFlags
	cmd := &cobra.Command{
		Use:   "lab [NAME|GROUP...] [-f SCENARIO.yaml...]",
		Short: "Replay published rollout experiments on the embedded cluster and compare them",
		Long: `Run the built-in scenarios (all of them, or those named, by name or by
group: --list shows them), or the scenario files given with -f
(docs/scenario.md), on the embedded local cluster. The built-in scenarios
replay five published experiments that measured the requests Kubernetes
rollouts, drains and outages drop (seeds 000 to 004 in the SEED column of
--list; docs/lab.md), with variants that show each cause and its fix.
Each scenario deploys its workload as real closingtime serve processes,
sends traffic through its Service, acts on it (a rollout, a pod deleted or
evicted, a node drained, a dependency outage…) and counts every failed
request by kind and by second.

Progress goes to standard error. Then the comparison table, a row per
scenario, and per run the seconds with failures, the old pods' figures and
the cause of each failure with its fix (docs/diagnosis.md) go to standard
output (-o json writes the results instead); the results
are written to --results as JSON, and to --report as one self-contained
HTML page with the table and a timeline per run (docs/report.md), and to
--junit as JUnit XML, all of them whole or none. Standard error then says
where, and names each run over --max-failures.

--junit FILE, or -o junit, writes the results as JUnit XML for CI: a test
suite per scenario, a test case per run, failed when more of its requests
failed than --max-failures allows (no limit unless given: the catalog's
scenarios fail requests on purpose).

--quick shortens the warm-up, the repetitions and the grace periods that
would otherwise be waited out, keeping every phenomenon visible.

A scenario whose workload does not deploy (its pods never all become
ready, its Service never answers, or a container exits before the
action; the scenarios that crash or fail probes on purpose do so only
after it) is not measured: the lab stops, says why, writes no file and
exits with status 3.

Exit status: 0 when the scenarios ran and none of their runs failed more
requests than --max-failures allows; 1 when one did (standard error names
it); 2 for a bad flag, name or scenario file, before any cluster starts;
3 when a scenario's workload did not deploy; 4 when the tool failed; 130
when interrupted.

--kube runs the scenarios on the real cluster of your kubeconfig instead,
each in a namespace of its own (or all in -n, one at a time), the image
closingtime being --image, with the traffic sent from load pods inside the
cluster (docs/kube.md). Scenarios that need the embedded cluster (a
dependency that runs in this process, a drain of its nodes) are left out,
with a note.

--compare runs the scenarios on the embedded cluster, then on a
closingtime cluster (docs/cluster.md): real etcd, kube-apiserver and
kube-controller-manager with closingtime's kubelet as node agents, the one
up in --state-dir, or one started for the run and stopped after it. It
prints each scenario's figures and causes of both side by side; where
they differ, the real controllers are right. --results holds both sides;
--report shows the runs of both.`,
		Example: `  closingtime lab --quick
  closingtime lab --list
  closingtime lab 1-plain 3-graceful --repeat 3
  closingtime lab pdb surge-vs-unavailable
  closingtime lab -f my-scenario.yaml
  closingtime lab -f my-scenario.yaml --max-failures 0 --junit lab.xml
  closingtime lab --quick -o json > results.json
  closingtime lab --kube --quick --image closingtime:dev 1-plain 3-graceful
  closingtime lab --compare --quick 1-plain 3-graceful`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.kubeFlags.check("lab", cmd.Flags()); err != nil {
				return err
			}
			return runLab(cmd.Context(), streams, args, flags)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&flags.files, "filename", "f", nil, "a scenario file to run, instead of the built-in scenarios; repeatable")
	f.IntVar(&flags.repeat, "repeat", 0, "repetitions of each scenario (default: the scenario's own)")
	f.BoolVar(&flags.quick, "quick", false, "shorter periods and one repetition, every phenomenon still shown")
	flags.out.bind(f, "results.json", "report.html", report.NoLimit)
	f.StringArrayVar(&flags.images, "image-command", nil, imageCommandUsage)
	f.BoolVar(&flags.list, "list", false, "list the built-in scenarios, with their group, the published experiment they replay (seed) and description, and exit")
	f.IntVar(&flags.parallel, "parallel", 0, "scenarios run at once, each on a cluster of its own (default: all)")
	f.BoolVar(&flags.compare, "compare", false, "run on the embedded cluster and on a closingtime cluster, and compare their figures")
	f.StringVar(&flags.stateDir, "state-dir", "", "with --compare, the closingtime cluster's state directory (default: that of cluster up)")
	flags.kubeFlags.bind(f)
	return cmd
}

func runLab(ctx context.Context, streams Streams, names []string, flags labFlags) error {
	if err := flags.out.check("lab"); err != nil {
		return err
	}
	if err := cmp.Or(nonNegative("lab", "--repeat", flags.repeat), nonNegative("lab", "--parallel", flags.parallel)); err != nil {
		return err
	}
	scenarios, err := labScenarios(names, flags.files)
	if err != nil {
		return err
	}
	if flags.list {
		return listScenarios(streams.Out, scenarios, flags.out.format)
	}
	images, err := imageCommands("lab", flags.images)
	if err != nil {
		return err
	}
	switch {
	case flags.compare && flags.kube:
		return usagef("lab: --compare runs on a closingtime cluster of its own: it does not take --kube")
	case flags.stateDir != "" && !flags.compare:
		return usagef("lab: --state-dir needs --compare")
	}
	if !flags.kube {
		if err := checkEntrypoints("lab", scenarios, images); err != nil {
			return err
		}
		if scenarios = installedScenarios(streams.Err, scenarios); len(scenarios) == 0 {
			return usagef("lab: none of the scenarios can run here: each line above says what it needs")
		}
	}
	// Last of the checks: it writes (and removes) a file.
	if err := flags.out.checkWritable("lab"); err != nil {
		return err
	}
	if flags.compare {
		return runCompare(ctx, streams, scenarios, images, flags)
	}
	cfg := scenario.RunnerConfig{Quick: flags.quick, Repetitions: flags.repeat}
	if flags.kube {
		if scenarios, err = kubeScenarios(streams.Err, scenarios, flags); err != nil {
			return err
		}
		if flags.namespace != "" {
			// The scenarios' objects share names: one at a time.
			flags.parallel = 1
		}
	}
	if cfg, err = flags.kubeFlags.runnerConfig("lab", cfg, images, streams.Err); err != nil {
		return err
	}
	started := time.Now()
	res, err := runScenarios(ctx, streams, "lab", cfg, scenarios, flags.parallel)
	if err != nil {
		return err
	}
	noun := "scenarios"
	if len(scenarios) == 1 {
		noun = "scenario"
	}
	fmt.Fprintf(streams.Err, "lab: %d %s in %s\n", len(scenarios), noun, time.Since(started).Round(100*time.Millisecond))
	return flags.out.write(streams, "lab", rendering{all: res}, clientErrorWarnings(scenarios, res))
}

// clientErrorWarnings returns the lab's warning for each scenario of
// scenarios whose result, in r at the same index, had mostly 4xx
// responses (see clientErrorsWarning), naming its traffic's path and file.
func clientErrorWarnings(scenarios []*scenario.Scenario, r *results.Results) []string {
	var warnings []string
	for i, s := range scenarios {
		set := "set traffic.path in " + s.File + " to one it serves"
		if warning := clientErrorsWarning(clientErrorsOf(&r.Scenarios[i]), cmp.Or(s.Traffic.Path, scenario.DefaultPath), set); warning != "" {
			warnings = append(warnings, "scenario "+s.Name+": "+warning)
		}
	}
	return warnings
}

// clientErrorsOf counts the 4xx responses of r's runs.
func clientErrorsOf(r *results.Result) load.ClientErrors {
	var clients []load.ClientReport
	for _, run := range r.Runs {
		clients = append(clients, run.Clients...)
	}
	return load.CountClientErrors(clients)
}

// kubeScenarios returns those of scenarios that can run on a real
// cluster, and notes the others on w; none is a usage error, and so are
// flags of the embedded cluster.
func kubeScenarios(w io.Writer, scenarios []*scenario.Scenario, flags labFlags) ([]*scenario.Scenario, error) {
	switch {
	case len(flags.images) > 0:
		return nil, usagef("lab: --image-command is for the embedded cluster: with --kube, the nodes run the images")
	case flags.namespace != "" && flags.parallel > 1:
		return nil, usagef("lab: --parallel with -n: the scenarios share the namespace and their objects' names, so they run one at a time")
	}
	runnable := realClusterScenarios(w, scenarios, "left out on a real cluster")
	if len(runnable) == 0 {
		return nil, usagef("lab: none of the scenarios can run on a real cluster")
	}
	return runnable, nil
}

// realClusterScenarios returns those of scenarios that can run on a real
// cluster (scenarioRunnable), and writes a line on w for each of the
// others: its name, note and why.
func realClusterScenarios(w io.Writer, scenarios []*scenario.Scenario, note string) []*scenario.Scenario {
	var runnable []*scenario.Scenario
	for _, s := range scenarios {
		if why := scenarioRunnable(s); why != "" {
			fmt.Fprintf(w, "lab: %s %s: %s\n", s.Name, note, why)
			continue
		}
		runnable = append(runnable, s)
	}
	return runnable
}

// installedScenarios returns those of scenarios whose pods find on this
// machine the programs they require (scenario.Scenario.Missing), and
// writes a line on w for each of the others: what it lacks, and how to
// install it.
func installedScenarios(w io.Writer, scenarios []*scenario.Scenario) []*scenario.Scenario {
	var runnable []*scenario.Scenario
	for _, s := range scenarios {
		if missing := s.Missing(); len(missing) > 0 {
			fmt.Fprintf(w, "lab: %s skipped: %s\n", s.Name, strings.Join(missing, "; "))
			continue
		}
		runnable = append(runnable, s)
	}
	return runnable
}

// listScenarios writes the name, group, seed and description of each of
// scenarios, as a table or (output json) as a JSON array.
func listScenarios(w io.Writer, scenarios []*scenario.Scenario, output string) error {
	type entry struct {
		Name        string `json:"name"`
		Group       string `json:"group,omitempty"`
		Seed        string `json:"seed,omitempty"`
		Description string `json:"description"`
	}
	entries := make([]entry, len(scenarios))
	for i, s := range scenarios {
		entries[i] = entry{s.Name, s.Group, s.Seed, s.Description}
	}
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tGROUP\tSEED\tDESCRIPTION")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, cmp.Or(e.Group, "-"), cmp.Or(e.Seed, "-"), e.Description)
	}
	return tw.Flush()
}

// labScenarios returns the scenarios of files, or those of the catalog that
// names lists.
func labScenarios(names, files []string) ([]*scenario.Scenario, error) {
	if len(files) > 0 {
		if len(names) > 0 {
			return nil, usagef("lab: give catalog names or -f files, not both")
		}
		var scenarios []*scenario.Scenario
		for _, f := range files {
			s, err := scenario.ReadFile(f)
			if err != nil {
				return nil, &usageError{fmt.Errorf("lab: %w", err)}
			}
			scenarios = append(scenarios, s)
		}
		return scenarios, nil
	}
	catalog, err := scenario.Catalog()
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	scenarios, err := scenario.Select(catalog, names)
	if err != nil {
		return nil, &usageError{fmt.Errorf("lab: %w", err)}
	}
	return scenarios, nil
}

// runScenarios runs scenarios with a runner of cfg as runAll does,
// showing their progress on streams.Err, and stops them all at the first
// interrupt (see interruptible). The lab has the runner give notices of the
// cluster's trouble only while a scenario deploys, where they explain a run
// that does not start (scenario.RunnerConfig.DeployNoticesOnly): once
// deployed, its scenarios make trouble on purpose. The other commands,
// which run the user's own server, show them in every phase.
func runScenarios(ctx context.Context, streams Streams, command string, cfg scenario.RunnerConfig, scenarios []*scenario.Scenario, parallel int) (*results.Results, error) {
	shown := newProgress(streams.Err, scenarios)
	cfg.Progress = shown.update
	cfg.DeployNoticesOnly = command == "lab"
	runner, err := scenario.NewRunner(cfg)
	if err != nil {
		shown.finish()
		return nil, err
	}
	ctx, interrupted, stop := interruptible(ctx, shown, command)
	defer stop()
	res, err := runAll(ctx, runner, scenarios, parallel)
	shown.finish()
	if interrupted() {
		return nil, errInterrupted
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	return res, nil
}

// runAll runs scenarios, parallel at a time (all if zero), and returns their
// results in the order given. The first scenario to fail stops the others,
// and its error is returned: theirs only say that they were stopped.
func runAll(ctx context.Context, runner *scenario.Runner, scenarios []*scenario.Scenario, parallel int) (*results.Results, error) {
	if parallel == 0 {
		parallel = len(scenarios)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make([]results.Result, len(scenarios))
	var mu sync.Mutex
	var first error
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, s := range scenarios {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			res, err := runner.Run(ctx, s)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
				return
			}
			done[i] = *res
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return &results.Results{Scenarios: done}, nil
}

// localClusters returns a scenario.RunnerConfig.NewCluster that starts
// embedded clusters whose image scenario.Image runs exe and whose other
// images run the commands of images, each with a network of its own.
// Where the system allows no network namespaces, the first cluster to
// fall back to the loopback range calls shared with how its pods are
// networked, and why.
func localClusters(exe string, images map[string][]string, shared func(network string)) func(scenario.ClusterSettings) (*scenario.Cluster, error) {
	commands := localCommands(exe, images)
	var once sync.Once
	return func(s scenario.ClusterSettings) (*scenario.Cluster, error) {
		c, err := local.New(local.Config{
			Nodes:               s.Nodes,
			MinPropagationDelay: s.PropagationDelay.Min,
			MaxPropagationDelay: s.PropagationDelay.Max,
			Kubelet:             local.KubeletConfig{ImageCommands: commands, PauseCommand: []string{exe, "pause"}, Env: []corev1.EnvVar{{Name: local.CommandEnv, Value: exe}}},
		})
		if err != nil {
			return nil, err
		}
		if !c.Namespaced() {
			once.Do(func() { shared(c.Network()) })
		}
		return &scenario.Cluster{Backend: c, Close: c.Close, ListenOutside: c.ListenOutside, NoClusterDNS: true}, nil
	}
}

// localCommands returns the commands that stand for images' entrypoints on
// the embedded cluster: exe for image scenario.Image, and those of images.
func localCommands(exe string, images map[string][]string) map[string][]string {
	commands := map[string][]string{scenario.Image: {exe}}
	maps.Copy(commands, images)
	return commands
}

// checkEntrypoints returns a usage error, named by command, for the first
// field of the scenarios' Deployments that the embedded cluster would not
// run, with images as the commands of --image-command: what
// local.CheckPodTemplate refuses (a container without a command of its
// own, an annotation or a command for its image; a shared PID
// namespace; a postStart hook), or a
// container whose command is no executable file where the kubelet would
// look it up (local.Executable). It names the field's file and line, so
// that a bad manifest is refused before any cluster starts.
func checkEntrypoints(command string, scenarios []*scenario.Scenario, images map[string][]string) error {
	// Only whether an image has a command matters here, not which.
	commands := localCommands(scenario.Image, images)
	for _, s := range scenarios {
		for _, o := range s.Objects {
			d, ok := o.Obj.(*appsv1.Deployment)
			if !ok {
				continue
			}
			refuse := func(field string, err error) error {
				return &usageError{fmt.Errorf("%s: %w", command, &manifest.Error{File: o.File, Line: o.FieldLine(field), Err: fmt.Errorf("%s: %w", o, err)})}
			}
			t := &d.Spec.Template
			if err := local.CheckPodTemplate(t, commands); err != nil {
				field := "spec.template.spec." + err.Field
				return refuse(field, fmt.Errorf("%s: %w", field, err.Err))
			}
			for i, c := range t.Spec.InitContainers {
				if err := runnable(t.Annotations, &c, commands, images); err != nil {
					return refuse(fmt.Sprintf("spec.template.spec.initContainers[%d]", i), err)
				}
			}
			for i, c := range t.Spec.Containers {
				if err := runnable(t.Annotations, &c, commands, images); err != nil {
					return refuse(fmt.Sprintf("spec.template.spec.containers[%d]", i), err)
				}
			}
		}
	}
	return nil
}

// runnable returns why the embedded cluster could not start container c
// of a pod template with annotations, or nil: it has no command
// (local.Entrypoint, with commands), or its command is no executable file
// in its workingDir or $PATH (local.Executable). A command that holds a
// $(VAR) reference is known only once the kubelet expands it, and the
// stand-in for closingtime's own image is closingtime itself: neither is
// looked up.
func runnable(annotations map[string]string, c *corev1.Container, commands, images map[string][]string) error {
	argv, err := local.Entrypoint(annotations, c, commands)
	if err != nil {
		return err
	}
	if strings.Contains(argv[0], "$(") || (len(c.Command) == 0 && argv[0] == scenario.Image) {
		return nil
	}
	if _, err := local.Executable(argv[0], c.WorkingDir); err != nil {
		if command, ok := images[c.Image]; ok && len(c.Command) == 0 && slices.Equal(command, argv) {
			return fmt.Errorf("container %s: --image-command for image %q: %w", c.Name, c.Image, err)
		}
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	return nil
}

// imageCommands parses the values of --image-command, IMAGE=CMD ARGS…
// each, into the commands that stand for the images' entrypoints.
func imageCommands(command string, values []string) (map[string][]string, error) {
	images := map[string][]string{}
	for _, v := range values {
		image, argv, err := local.ParseImageCommand(v)
		if err != nil {
			return nil, usagef("%s: --image-command %q: %v", command, v, err)
		}
		images[image] = argv
	}
	return images, nil
}

// imageCommandUsage is the help of the --image-command flag.
const imageCommandUsage = "run the local command CMD for containers of image IMAGE that give no command of their own, as IMAGE=CMD ARGS... (docs/local-cluster.md); repeatable"

// resultsOutput are the flags of the commands whose runs end with
// results, lab and rollout: what standard output shows of them (-o), the
// files they are written to (--results, --report, --junit), and the
// failed requests a run may have before the exit status is ExitFailed
// (--max-failures).
type resultsOutput struct {
	format, results, report, junit string
	maxFailures                    int64
}

// bind binds the flags on f, with resultsFile and reportFile the files
// written by default ("" for none) and maxFailures the default limit
// (report.NoLimit for none).
func (o *resultsOutput) bind(f *pflag.FlagSet, resultsFile, reportFile string, maxFailures int64) {
	f.StringVarP(&o.format, "output", "o", "text", "output format: text, json, or junit (JUnit XML, a test case per run)")
	f.StringVar(&o.results, "results", resultsFile, "file to write the results to as JSON; empty for none")
	f.StringVar(&o.report, "report", reportFile, "file to write the HTML report to (docs/report.md); empty for none")
	f.StringVar(&o.junit, "junit", "", "file to write the results to as JUnit XML, for CI: a test case per run, failed over --max-failures; empty for none")
	usage := "failed requests allowed in each run before the exit status is 1; -1 for no limit"
	if maxFailures == 0 {
		usage += " (default 0)" // which pflag does not show
	}
	f.Int64Var(&o.maxFailures, "max-failures", maxFailures, usage)
}

// check returns a usage error, named by command, for an -o other than
// text, json and junit, one file given to two of --results, --report and
// --junit, or a --max-failures below -1.
func (o resultsOutput) check(command string) error {
	if o.format != "text" && o.format != "json" && o.format != "junit" {
		return usagef("%s: invalid --output %q: accepted values are text, json, junit", command, o.format)
	}
	if o.maxFailures < report.NoLimit {
		return usagef("%s: invalid --max-failures %d: give a count, or -1 for no limit", command, o.maxFailures)
	}
	type file struct{ flag, path string }
	seen := map[string]file{}
	for _, f := range []file{{"--results", o.results}, {"--report", o.report}, {"--junit", o.junit}} {
		if f.path == "" {
			continue
		}
		if first, ok := seen[absolute(f.path)]; ok {
			return usagef("%s: %s and %s both name %s: one would replace the other; give each its own file", command, first.flag, f.flag, first.path)
		}
		seen[absolute(f.path)] = f
	}
	return nil
}

// checkWritable returns a usage error, named by command, for a file of
// --results, --report or --junit that could not be written (see
// writable), before a run measures for minutes and then loses its
// results.
func (o resultsOutput) checkWritable(command string) error {
	for _, f := range []struct{ flag, path string }{{"--results", o.results}, {"--report", o.report}, {"--junit", o.junit}} {
		if f.path == "" {
			continue
		}
		if err := writable(f.path); err != nil {
			return usagef("%s: %s %s: %w", command, f.flag, f.path, err)
		}
	}
	return nil
}

// writable returns why a file could not be written at path, checked by
// creating (and removing) a temporary file in its directory, as writeAll
// will.
func writable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return errors.New("is a directory: name a file in it")
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot write there: %w", manifest.StripPath(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// rendering is a command's results as its files and standard output
// show them. All holds every run: the HTML report, the JUnit XML and the
// gate read it. JSON and Text, when not nil, write the JSON and the text
// instead of all's own (results.Write, report.WriteText): `lab --compare`
// writes its two sides side by side.
type rendering struct {
	all        *results.Results
	json, text func(io.Writer) error
}

// write writes r to the files, all of them whole or none, then shows it on
// streams.Out as -o says, tells on streams.Err, named by command, which
// files it wrote (see wrote), and writes the warnings there. It returns
// exitStatus(ExitFailed) after naming on streams.Err each run over
// --max-failures, if any was.
func (o resultsOutput) write(streams Streams, command string, r rendering, warnings []string) error {
	if r.json == nil {
		r.json = func(w io.Writer) error { return results.Write(w, r.all) }
	}
	if r.text == nil {
		r.text = func(w io.Writer) error { return report.WriteText(w, r.all) }
	}
	junit := func(w io.Writer) error { return report.WriteJUnit(w, "closingtime "+command, r.all, o.maxFailures) }
	err := writeAll(
		output{o.results, r.json},
		output{o.report, func(w io.Writer) error { return report.WriteHTML(w, r.all) }},
		output{o.junit, junit})
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	show := map[string]func(io.Writer) error{"json": r.json, "junit": junit, "text": r.text}[o.format]
	if err := show(streams.Out); err != nil {
		return err
	}
	o.wrote(streams.Err, command)
	for _, w := range warnings {
		fmt.Fprintf(streams.Err, "%s: %s\n", command, w)
	}
	return o.gate(streams.Err, command, r.all)
}

// gate writes on w, named by command, a line for each run of r over
// --max-failures, and returns exitStatus(ExitFailed) if there was one.
func (o resultsOutput) gate(w io.Writer, command string, r *results.Results) error {
	over := false
	for _, s := range r.Scenarios {
		for _, run := range s.Runs {
			if report.Over(run, o.maxFailures) {
				name := s.Name
				if s.Deployment != "" {
					name += " (Deployment " + s.Deployment + ")"
				}
				fmt.Fprintf(w, "%s: %s, run %d: %d requests failed, more than --max-failures %d\n", command, name, run.Repetition, run.Totals.Failed(), o.maxFailures)
				over = true
			}
		}
	}
	if over {
		return exitStatus(ExitFailed)
	}
	return nil
}

// wrote tells on w, named by command, where the files were written, as
// absolute paths, or that none was and how to keep the results: on
// standard error, so that standard output stays the results alone.
func (o resultsOutput) wrote(w io.Writer, command string) {
	var files []string
	if o.results != "" {
		files = append(files, "the results to "+absolute(o.results))
	}
	if o.report != "" {
		files = append(files, "the HTML report to "+absolute(o.report))
	}
	if o.junit != "" {
		files = append(files, "the JUnit XML to "+absolute(o.junit))
	}
	if len(files) == 0 {
		if o.format != "text" {
			// The results are on standard output.
			return
		}
		fmt.Fprintf(w, "%s: no file written: --results FILE keeps the results as JSON, --report FILE as an HTML page, --junit FILE as JUnit XML\n", command)
		return
	}
	fmt.Fprintf(w, "%s: wrote %s\n", command, strings.Join(files, " and "))
}

// absolute returns path made absolute, or path as it is if it cannot be.
func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// output is a file to write whole: its path ("" for none) and what writes
// it.
type output struct {
	path  string
	write func(io.Writer) error
}

// writeAll writes each of outputs that has a path to a temporary file in
// its directory, and once every one is complete renames them over their
// paths: either every file appears whole, or none is written. Only a
// rename that fails after the others succeeded leaves some written.
func writeAll(outputs ...output) error {
	var temps []string
	defer func() {
		for _, t := range temps {
			os.Remove(t)
		}
	}()
	for _, out := range outputs {
		if out.path == "" {
			temps = append(temps, "")
			continue
		}
		temp, err := writeTemp(out.path, out.write)
		if err != nil {
			return err
		}
		temps = append(temps, temp)
	}
	for i, out := range outputs {
		if out.path == "" {
			continue
		}
		if err := os.Rename(temps[i], out.path); err != nil {
			return err
		}
	}
	return nil
}

// writeTemp writes a temporary file in path's directory with write, and
// returns its name.
func writeTemp(path string, write func(io.Writer) error) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, manifest.StripPath(err))
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
