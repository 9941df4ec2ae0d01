package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/hostcluster"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

type clusterFlags struct {
	stateDir string
	nodes    int
	version  string
	images   []string
	output   string
}

func newClusterCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster (up|down|status)",
		Short: "Run a real Kubernetes control plane on this machine, with pods as local processes",
		Long: `Run a real Kubernetes control plane on loopback — etcd, kube-apiserver and
kube-controller-manager, built from the Go module proxy once into your cache
directory — with closingtime's kubelet as its nodes: pods are local
processes, their images mapped to local commands. kubectl, and closingtime
rollout --kube and lab --kube, work against it (docs/cluster.md).

up starts it in the background, down stops it and every pod, status shows
it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("cluster: want a subcommand: up, down or status (see closingtime cluster --help)")
		},
	}
	// The subcommands share the flags: only one of them runs.
	var flags clusterFlags
	cmd.PersistentFlags().StringVar(&flags.stateDir, "state-dir", "", "the cluster's state directory (default: closingtime/cluster in the user's cache directory)")
	cmd.AddCommand(newClusterUpCommand(streams, &flags), newClusterDownCommand(streams, &flags),
		newClusterStatusCommand(streams, &flags), newClusterRunCommand(streams, &flags))
	return cmd
}

// bindNodes adds the flags of the daemon's nodes to cmd.
func (c *clusterFlags) bindNodes(cmd *cobra.Command) {
	cmd.Flags().IntVar(&c.nodes, "nodes", local.DefaultNodes, "the number of nodes, node-1 to node-N")
	cmd.Flags().StringArrayVar(&c.images, "image-command", nil, imageCommandUsage)
}

func newClusterUpCommand(streams Streams, flags *clusterFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up [--nodes N] [--image-command IMAGE=CMD...]",
		Short: "Build and start the cluster in the background, and print how to use it",
		Long: `Build the control plane into the user's cache directory if it is not there
yet (the first build downloads about 1 GB of modules and compiles for
minutes; the Go build cache serves later ones), then start it and the nodes
in a daemon of their own, and wait until the API server and every node are
ready. The containers of image closingtime or ` + kube.DefaultImage + ` run this binary;
--image-command maps other images to local commands.

If the cluster is up already, up says so and succeeds, unless --nodes or
--image-command ask for another one: then it fails, and down comes first.
The state of a cluster whose daemon died is cleared, with a note.`,
		Example: `  closingtime cluster up
  export KUBECONFIG=~/.cache/closingtime/cluster/kubeconfig
  kubectl get nodes
  closingtime cluster up --nodes 3 --image-command 'shop:1.4=./bin/shop --port 8080'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClusterUp(cmd.Context(), streams, *flags, cmd.Flags().Changed)
		},
	}
	flags.bindNodes(cmd)
	cmd.Flags().StringVar(&flags.version, "kubernetes-version", controlplane.KubernetesVersion, "the Kubernetes version of the control plane; only "+controlplane.KubernetesVersion+" is supported")
	return cmd
}

func newClusterDownCommand(streams Streams, flags *clusterFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the cluster and every pod, and remove its state",
		Long: `Stop the cluster's daemon: it kills every pod, then stops the control
plane. down waits until no process of the cluster is left and removes the
state directory's files; the built control plane stays in the cache. With
no cluster up, down says so and succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClusterDown(streams, *flags)
		},
	}
	return cmd
}

func newClusterStatusCommand(streams Streams, flags *clusterFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [-o text|json]",
		Short: "Show whether the cluster is up, its API server, and its nodes",
		Long: `Show whether the cluster is up, its daemon, API server and kubeconfig, and
each node with its Ready condition and the pods bound to it that have not
ended, as the API server reports them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClusterStatus(cmd.Context(), streams, *flags)
		},
	}
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "output format: text or json")
	return cmd
}

// newClusterRunCommand is the daemon that up starts: it runs the cluster
// until SIGTERM or SIGINT.
func newClusterRunCommand(streams Streams, flags *clusterFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "run",
		Short:  "Run the cluster in the foreground (the daemon that up starts)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClusterDaemon(cmd.Context(), streams, *flags)
		},
	}
	flags.bindNodes(cmd)
	return cmd
}

// checkNodeFlags returns a usage error for invalid --nodes or
// --image-command values.
func checkNodeFlags(command string, flags clusterFlags) error {
	if flags.nodes < 1 {
		return usagef("%s: --nodes %d: want at least 1", command, flags.nodes)
	}
	_, err := imageCommands(command, flags.images)
	return err
}

// clusterStateDir returns the absolute path of the state directory that
// --state-dir dir names (hostcluster.StateDir).
func clusterStateDir(dir string) (string, error) {
	dir, err := hostcluster.StateDir(dir)
	if err != nil {
		return "", fmt.Errorf("cluster: %w (give --state-dir)", err)
	}
	return dir, nil
}

func runClusterUp(ctx context.Context, streams Streams, flags clusterFlags, changed func(string) bool) error {
	if err := checkNodeFlags("cluster up", flags); err != nil {
		return err
	}
	if strings.TrimPrefix(flags.version, "v") != controlplane.KubernetesVersion {
		return usagef("cluster up: --kubernetes-version %s is not supported: closingtime builds Kubernetes %s only", flags.version, controlplane.KubernetesVersion)
	}
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	// A cluster that is up already must match the flags given, and only
	// those.
	cfg := hostcluster.Config{StateDir: dir, ImageCommands: flags.images}
	if changed("nodes") {
		cfg.Nodes = flags.nodes
	}
	st, started, err := upCluster(ctx, streams, cfg)
	if err != nil {
		return err
	}
	headline := fmt.Sprintf("cluster up: %d nodes ready", st.Nodes)
	if !started {
		headline = fmt.Sprintf("cluster up: already up since %s", st.Started.Local().Format(time.DateTime))
	}
	printClusterUsage(streams.Out, st, headline)
	return nil
}

// upCluster runs hostcluster.Up with cfg, showing its steps and notes on
// standard error.
func upCluster(ctx context.Context, streams Streams, cfg hostcluster.Config) (st *hostcluster.State, started bool, err error) {
	var steps *clusterSteps
	cfg.Step = func(name string) {
		if steps == nil {
			steps = newClusterSteps(streams.Err)
		}
		steps.start(name)
	}
	cfg.Notes = streams.Err
	st, started, err = hostcluster.Up(ctx, cfg)
	if steps != nil {
		steps.finish(err == nil)
	}
	if err != nil {
		return nil, false, fmt.Errorf("cluster up: %w", err)
	}
	return st, started, nil
}

// ensureCluster returns the state of the cluster that is up in state
// directory dir (the default one if empty), once it is ready, or starts
// one of the embedded cluster's number of nodes and of images' commands
// there. stop stops the cluster if ensureCluster started it, and does
// nothing if it was up already: a cluster the user brought up stays up,
// with its own flags.
func ensureCluster(ctx context.Context, streams Streams, dir string, images []string) (st *hostcluster.State, stop func() error, err error) {
	if dir, err = clusterStateDir(dir); err != nil {
		return nil, nil, err
	}
	cfg := hostcluster.Config{StateDir: dir, ImageCommands: images, AnyCluster: true, Notes: streams.Err}
	st, started, err := upCluster(ctx, streams, cfg)
	if err != nil || !started {
		return st, func() error { return nil }, err
	}
	stop = func() error {
		_, err := hostcluster.Down(cfg)
		return err
	}
	return st, stop, nil
}

// printClusterUsage writes the headline and how to use the cluster of st.
func printClusterUsage(w io.Writer, st *hostcluster.State, headline string) {
	fmt.Fprintf(w, "%s: API server %s (Kubernetes %s), daemon pid %d.\n\n", headline, st.Server, st.KubernetesVersion, st.PID)
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", st.Kubeconfig)
	fmt.Fprintf(w, "  kubectl get nodes\n")
	fmt.Fprintf(w, "  closingtime rollout --kube -f deploy.yaml\n")
	fmt.Fprintf(w, "  closingtime lab --kube --quick 1-plain 3-graceful\n")
	fmt.Fprintf(w, "  closingtime cluster down\n\n")
	fmt.Fprintf(w, "Containers of image %s or %s run this closingtime binary (docs/cluster.md).\n", scenario.Image, kube.DefaultImage)
}

func runClusterDown(streams Streams, flags clusterFlags) error {
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	started := time.Now()
	st, err := hostcluster.Down(hostcluster.Config{StateDir: dir, Notes: streams.Err})
	if err != nil {
		return fmt.Errorf("cluster down: %w", err)
	}
	if st == nil {
		fmt.Fprintf(streams.Out, "cluster down: no cluster is up (state directory %s)\n", dir)
		return nil
	}
	fmt.Fprintf(streams.Out, "cluster down: stopped in %s; no process of the cluster is left\n", time.Since(started).Round(100*time.Millisecond))
	return nil
}

func runClusterStatus(ctx context.Context, streams Streams, flags clusterFlags) error {
	if flags.output != "text" && flags.output != "json" {
		return usagef("cluster status: invalid --output %q: accepted values are text, json", flags.output)
	}
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	status, err := hostcluster.Status(ctx, hostcluster.Config{StateDir: dir, Notes: streams.Err})
	if err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	if flags.output == "json" {
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(status)
	}
	if !status.Up {
		fmt.Fprintf(streams.Out, "cluster: down (state directory %s)\n", dir)
		return nil
	}
	state := "up"
	if status.Phase != hostcluster.PhaseReady {
		state = "starting: " + string(status.Phase)
	}
	tw := tabwriter.NewWriter(streams.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster:\t%s\n", state)
	fmt.Fprintf(tw, "daemon:\tpid %d, since %s\n", status.PID, status.Started.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "API server:\t%s (Kubernetes %s)\n", cmp.Or(status.Server, "-"), status.KubernetesVersion)
	fmt.Fprintf(tw, "kubeconfig:\t%s\n", status.Kubeconfig)
	fmt.Fprintf(tw, "state:\t%s\n", dir)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(status.Nodes) == 0 {
		return nil
	}
	fmt.Fprintln(streams.Out)
	tw = tabwriter.NewWriter(streams.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREADY\tPODS")
	for _, n := range status.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", n.Name, n.Ready, n.Pods)
	}
	if err := tw.Flush(); err != nil || len(status.NodePorts) == 0 {
		return err
	}
	fmt.Fprintln(streams.Out)
	tw = tabwriter.NewWriter(streams.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPORT\t\tNODE PORT")
	for _, p := range status.NodePorts {
		fmt.Fprintf(tw, "%s/%s\t%d\t→\t%s\n", p.Namespace, p.Name, p.Port, p.Address)
	}
	return tw.Flush()
}

// runClusterDaemon runs the daemon that up starts (hostcluster.Run) until
// SIGTERM or SIGINT. Its output is the daemon's log.
func runClusterDaemon(ctx context.Context, streams Streams, flags clusterFlags) error {
	if err := checkNodeFlags("cluster run", flags); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	cfg := hostcluster.Config{StateDir: dir, Nodes: flags.nodes, ImageCommands: flags.images}
	if err := hostcluster.Run(ctx, cfg, streams.Err); err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	return nil
}

// clusterSteps shows the steps of up on standard error: a spinner per
// step on a terminal, a line per step with the time since the start
// otherwise.
type clusterSteps struct {
	w     io.Writer
	begun time.Time
	bars  *mpb.Progress // nil unless w is a terminal
	bar   *mpb.Bar      // the current step's spinner
}

// newClusterSteps returns the display of steps on w.
func newClusterSteps(w io.Writer) *clusterSteps {
	s := &clusterSteps{w: w, begun: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil && width > 0 {
			s.bars = mpb.New(mpb.WithOutput(w), mpb.WithWidth(2), mpb.WithRefreshRate(200*time.Millisecond))
		}
	}
	return s
}

// start ends the current step and shows the next, name.
func (s *clusterSteps) start(name string) {
	if s.bars == nil {
		fmt.Fprintf(s.w, "%6.1fs  %s\n", time.Since(s.begun).Seconds(), name)
		return
	}
	s.end(true)
	s.bar = s.bars.New(0, mpb.SpinnerStyle(), mpb.BarFillerOnComplete("✓"),
		mpb.PrependDecorators(decor.Name(name+" ")),
		mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO)))
}

// end ends the current step's spinner: done if ok, else stopped where
// it is.
func (s *clusterSteps) end(ok bool) {
	switch {
	case s.bar == nil:
	case ok:
		s.bar.SetTotal(-1, true)
	default:
		s.bar.Abort(false)
	}
	s.bar = nil
}

// finish ends the current step, done if ok, and stops the display. Only
// its first call does anything.
func (s *clusterSteps) finish(ok bool) {
	if s.bars == nil {
		return
	}
	s.end(ok)
	s.bars.Wait()
	s.bars = nil
}
