package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// Bounds of the cluster command's waits.
const (
	// clusterUpTimeout bounds up's wait for the daemon, from its start
	// until the API server and every node are ready.
	clusterUpTimeout = 5 * time.Minute
	// clusterStopTimeout is how long down waits for the daemon after
	// SIGTERM before it kills it: the daemon kills every pod, then stops
	// the control plane (which waits up to 10 s per program).
	clusterStopTimeout = 90 * time.Second
	// clusterKillTimeout is how long down waits for a process it killed.
	clusterKillTimeout = 10 * time.Second
	// clusterPoll is the period of every wait's checks.
	clusterPoll = 200 * time.Millisecond
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

// nodeFlags returns the commands of the --image-command values, or a
// usage error for invalid --nodes or --image-command values.
func nodeFlags(command string, flags clusterFlags) (images map[string][]string, err error) {
	if flags.nodes < 1 {
		return nil, usagef("%s: --nodes %d: want at least 1", command, flags.nodes)
	}
	return imageCommands(command, flags.images)
}

func runClusterUp(ctx context.Context, streams Streams, flags clusterFlags, changed func(string) bool) error {
	if _, err := nodeFlags("cluster up", flags); err != nil {
		return err
	}
	if strings.TrimPrefix(flags.version, "v") != controlplane.KubernetesVersion {
		return usagef("cluster up: --kubernetes-version %s is not supported: closingtime builds Kubernetes %s only", flags.version, controlplane.KubernetesVersion)
	}
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	st, started, err := upCluster(ctx, streams, dir, flags, changed)
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

// upCluster returns the cluster up in state directory dir, once it is
// ready, or starts one of flags there; started reports whether it did. It
// holds the directory's lock meanwhile (lockStateDir), so that two at once
// start one cluster. changed reports which flags the user gave: a cluster
// up already must match the --nodes and --image-command given, or
// upCluster fails.
func upCluster(ctx context.Context, streams Streams, dir string, flags clusterFlags, changed func(string) bool) (st *clusterState, started bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("cluster up: %w", err)
	}
	unlock, err := lockStateDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if st, err = liveState(streams.Err, dir, true); err != nil {
		return nil, false, err
	}
	if st != nil {
		st, err = clusterAlreadyUp(ctx, streams, dir, st, flags, changed)
		return st, false, err
	}
	if st, err = startCluster(ctx, streams, dir, flags); err != nil {
		removeStateDir(dir)
		return nil, false, fmt.Errorf("cluster up: %w", err)
	}
	return st, true, nil
}

// startCluster builds the control plane if needed, starts the daemon of a
// cluster of flags with its state in dir, and waits until the cluster is
// ready. If it fails, it stops the daemon and what it started, and
// returns an error that ends with the daemon's log; the state is the
// caller's to clear.
func startCluster(ctx context.Context, streams Streams, dir string, flags clusterFlags) (*clusterState, error) {
	steps := newClusterSteps(streams.Err)
	defer steps.finish(false)
	cache, err := controlplane.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	steps.start(fmt.Sprintf("build the control plane (Kubernetes %s, etcd %s)", controlplane.KubernetesVersion, controlplane.EtcdVersion))
	if _, err := controlplane.Build(ctx, cache); err != nil {
		return nil, err
	}

	// The daemon is this binary in a session of its own, so that a
	// terminal's signals and the end of up do not reach it; every process
	// of the cluster belongs to its session.
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the closingtime binary for the daemon: %w", err)
	}
	logPath := filepath.Join(dir, clusterLogFile)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"cluster", "run", "--state-dir", dir, "--nodes", strconv.Itoa(flags.nodes)}
	for _, v := range flags.images {
		args = append(args, "--image-command", v)
	}
	daemon := exec.Command(exe, args...)
	daemon.Dir = dir
	daemon.Stdout, daemon.Stderr = logFile, logFile
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = daemon.Start()
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	// Waiting for the daemon reaps it if it exits while up runs.
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()

	st, err := waitClusterReady(ctx, steps, dir, exited)
	if err != nil {
		steps.finish(false)
		if st, _ := readClusterState(dir); st != nil && st.PID == daemon.Process.Pid {
			stopCluster(st)
		} else {
			// It wrote no state: nothing of its session runs after it.
			daemon.Process.Kill()
			killSession(daemon.Process.Pid)
		}
		return nil, fmt.Errorf("%w; the daemon's log ends:\n%s", err, lastLines(logPath, 30))
	}
	steps.finish(true)
	return st, nil
}

// clusterAlreadyUp returns the state of the cluster of st, up already in
// dir, once it is ready (waiting for a daemon that starts still), or fails
// if the flags given ask for another cluster.
func clusterAlreadyUp(ctx context.Context, streams Streams, dir string, st *clusterState, flags clusterFlags, changed func(string) bool) (*clusterState, error) {
	if changed("nodes") && flags.nodes != st.Nodes {
		return nil, fmt.Errorf("cluster up: a cluster of %d nodes is up (pid %d); run closingtime cluster down first to start one of %d", st.Nodes, st.PID, flags.nodes)
	}
	if changed("image-command") && !slices.Equal(sortedCopy(flags.images), sortedCopy(st.ImageCommands)) {
		return nil, fmt.Errorf("cluster up: a cluster is up (pid %d) with --image-command %q; run closingtime cluster down first to change them", st.PID, st.ImageCommands)
	}
	if st.Phase == phaseReady {
		return st, nil
	}
	steps := newClusterSteps(streams.Err)
	st, err := waitClusterReady(ctx, steps, dir, nil)
	steps.finish(err == nil)
	if err != nil {
		return nil, fmt.Errorf("cluster up: the cluster that was starting (state in %s) did not get ready: %w", dir, err)
	}
	return st, nil
}

// sortedCopy returns a sorted copy of s.
func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// printClusterUsage writes the headline and how to use the cluster of st.
func printClusterUsage(w io.Writer, st *clusterState, headline string) {
	fmt.Fprintf(w, "%s: API server %s (Kubernetes %s), daemon pid %d.\n\n", headline, st.Server, st.KubernetesVersion, st.PID)
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", st.Kubeconfig)
	fmt.Fprintf(w, "  kubectl get nodes\n")
	fmt.Fprintf(w, "  closingtime rollout --kube -f deploy.yaml\n")
	fmt.Fprintf(w, "  closingtime lab --kube --quick 1-plain 3-graceful\n")
	fmt.Fprintf(w, "  closingtime cluster down\n\n")
	fmt.Fprintf(w, "Containers of image %s or %s run this closingtime binary (docs/cluster.md).\n", scenario.Image, kube.DefaultImage)
}

// waitClusterReady waits until the daemon whose state is in dir is ready:
// its state's phase is ready, the API server's /readyz answers ok and
// every node is Ready. exited, if not nil, delivers the daemon's exit;
// otherwise the daemon's PID is watched. steps shows each phase.
func waitClusterReady(ctx context.Context, steps *clusterSteps, dir string, exited <-chan error) (*clusterState, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterUpTimeout)
	defer cancel()
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	shown := ""
	var client kubernetes.Interface
	// Each round reads the state once and, once ready, asks the API
	// server; the loop ends when the cluster is ready or with an error.
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the daemon exited (%v) before the cluster was ready", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("the cluster was not ready after %s (%s)", clusterUpTimeout, cmp.Or(shown, "the daemon wrote no state"))
		case <-tick.C:
		}
		st, err := readClusterState(dir)
		if err != nil {
			return nil, err
		}
		if st == nil {
			continue // the daemon has not written its state yet
		}
		if exited == nil && !st.alive() {
			return nil, fmt.Errorf("the daemon (pid %d) exited before the cluster was ready", st.PID)
		}
		phase := map[string]string{
			phaseControlPlane: "start the control plane",
			phaseNodes:        fmt.Sprintf("start %d nodes", st.Nodes),
			phaseReady:        fmt.Sprintf("wait for %d nodes to be Ready", st.Nodes),
		}[st.Phase]
		if phase != shown {
			steps.start(phase)
			shown = phase
		}
		if st.Phase != phaseReady {
			continue
		}
		if client == nil {
			if client, err = kubeClient(st.Kubeconfig); err != nil {
				return nil, err
			}
		}
		if clusterReady(ctx, client, st.Nodes) {
			return st, nil
		}
	}
}

// clusterReady reports whether the API server of client is ready and
// has nodes Ready nodes.
func clusterReady(ctx context.Context, client kubernetes.Interface, nodes int) bool {
	if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return false
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	ready := 0
	for _, n := range list.Items {
		if nodeReady(&n) == corev1.ConditionTrue {
			ready++
		}
	}
	return ready >= nodes
}

// nodeReady returns the status of node's Ready condition: True, False, or
// Unknown if the node has none.
func nodeReady(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// kubeClient returns a client of the kubeconfig at path.
func kubeClient(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return kubernetes.NewForConfig(cfg)
}

func runClusterDown(streams Streams, flags clusterFlags) error {
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	var st *clusterState
	if _, err := os.Stat(dir); err == nil {
		unlock, err := lockStateDir(dir)
		if err != nil {
			return err
		}
		defer unlock()
		if st, err = liveState(streams.Err, dir, true); err != nil {
			return err
		}
	}
	if st == nil {
		fmt.Fprintf(streams.Out, "cluster down: no cluster is up (state directory %s)\n", dir)
		return nil
	}
	started := time.Now()
	if err := stopCluster(st); err != nil {
		return fmt.Errorf("cluster down: %w", err)
	}
	if err := removeStateDir(dir); err != nil {
		return fmt.Errorf("cluster down: %w", err)
	}
	fmt.Fprintf(streams.Out, "cluster down: stopped in %s; no process of the cluster is left\n", time.Since(started).Round(100*time.Millisecond))
	return nil
}

// clusterStatus is the output of `closingtime cluster status -o json`.
type clusterStatus struct {
	Up                bool                `json:"up"`
	Phase             string              `json:"phase,omitempty"`
	StateDir          string              `json:"stateDir"`
	PID               int                 `json:"pid,omitempty"`
	Started           *time.Time          `json:"started,omitempty"`
	Server            string              `json:"server,omitempty"`
	Kubeconfig        string              `json:"kubeconfig,omitempty"`
	KubernetesVersion string              `json:"kubernetesVersion,omitempty"`
	Nodes             []clusterNodeStatus `json:"nodes,omitempty"`
	NodePorts         []clusterNodePort   `json:"nodePorts,omitempty"`
}

// clusterNodePort is a port of a Service that the cluster serves on a
// node port (nodeagent.ServedNodePorts), in clusterStatus.
type clusterNodePort struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Port is the Service's port.
	Port int32 `json:"port"`
	// NodePort is its node port, served at Address.
	NodePort int32 `json:"nodePort"`
	// Address is where clients on this machine reach it,
	// 127.0.0.1:NodePort.
	Address string `json:"address"`
}

// clusterNodeStatus is a node of clusterStatus.
type clusterNodeStatus struct {
	Name string `json:"name"`
	// Ready is the status of the node's Ready condition: True, False or
	// Unknown.
	Ready corev1.ConditionStatus `json:"ready"`
	// Pods counts the pods bound to the node that have not ended
	// (phase neither Succeeded nor Failed).
	Pods int `json:"pods"`
}

func runClusterStatus(ctx context.Context, streams Streams, flags clusterFlags) error {
	if flags.output != "text" && flags.output != "json" {
		return usagef("cluster status: invalid --output %q: accepted values are text, json", flags.output)
	}
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	st, err := liveState(streams.Err, dir, false)
	if err != nil {
		return err
	}
	status := clusterStatus{StateDir: dir}
	if st != nil {
		status = clusterStatus{Up: true, Phase: st.Phase, StateDir: dir, PID: st.PID, Started: &st.Started,
			Server: st.Server, Kubeconfig: st.Kubeconfig, KubernetesVersion: st.KubernetesVersion}
	}
	if st != nil && st.Phase == phaseReady {
		client, err := kubeClient(st.Kubeconfig)
		if err == nil {
			status.Nodes, err = clusterNodes(ctx, client)
		}
		if err == nil {
			status.NodePorts, err = clusterNodePorts(ctx, client)
		}
		if err != nil {
			return fmt.Errorf("cluster status: the daemon (pid %d) runs, but its API server %s: %w", st.PID, st.Server, err)
		}
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
	if status.Phase != phaseReady {
		state = "starting: " + status.Phase
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

// clusterNodePorts returns the ports of the Services of client's cluster
// that its nodes serve on node ports, by namespace, name and port.
func clusterNodePorts(ctx context.Context, client kubernetes.Interface) ([]clusterNodePort, error) {
	services, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []clusterNodePort
	for _, svc := range services.Items {
		for _, p := range nodeagent.ServedNodePorts(&svc) {
			out = append(out, clusterNodePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Port, NodePort: p.NodePort,
				Address: net.JoinHostPort(nodeagent.NodeInternalIP, strconv.Itoa(int(p.NodePort)))})
		}
	}
	// A Service's ports stay in its order.
	slices.SortStableFunc(out, func(a, b clusterNodePort) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// clusterNodes returns the nodes of client's cluster, with their Ready
// condition and the pods bound to them that have not ended.
func clusterNodes(ctx context.Context, client kubernetes.Interface) ([]clusterNodeStatus, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			counts[p.Spec.NodeName]++
		}
	}
	var out []clusterNodeStatus
	for _, n := range nodes.Items {
		out = append(out, clusterNodeStatus{Name: n.Name, Ready: nodeReady(&n), Pods: counts[n.Name]})
	}
	return out, nil
}

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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

// ensureCluster returns the state of the cluster that is up in state
// directory dir (the default one if empty), once it is ready, or starts
// one of flags' nodes and image commands there. stop stops the cluster if
// ensureCluster started it, and does nothing if it was up already: a
// cluster the user brought up stays up, with its own flags.
func ensureCluster(ctx context.Context, streams Streams, dir string, flags clusterFlags) (st *clusterState, stop func() error, err error) {
	if dir, err = clusterStateDir(dir); err != nil {
		return nil, nil, err
	}
	st, started, err := upCluster(ctx, streams, dir, flags, func(string) bool { return false })
	if err != nil || !started {
		return st, func() error { return nil }, err
	}
	stop = func() error {
		unlock, err := lockStateDir(dir)
		if err != nil {
			return err
		}
		defer unlock()
		if err := stopCluster(st); err != nil {
			return err
		}
		return removeStateDir(dir)
	}
	return st, stop, nil
}
