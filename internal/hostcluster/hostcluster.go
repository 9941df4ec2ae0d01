package hostcluster

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
)

// DefaultReadyTimeout bounds Up's wait for a daemon, from its start until
// the API server and every node are ready, when Config.ReadyTimeout is
// zero.
const DefaultReadyTimeout = 5 * time.Minute

// Bounds of Down's waits, and the period of every wait's checks.
const (
	// stopTimeout is how long Down waits for the daemon after SIGTERM
	// before it kills it: the daemon kills every pod, then stops the
	// control plane (which waits up to 10 s per program).
	stopTimeout = 90 * time.Second
	// killTimeout is how long Down waits for a process it killed.
	killTimeout = 10 * time.Second
	// poll is the period of every wait's checks.
	poll = 200 * time.Millisecond
)

// Config is a cluster: where its state is kept, and what Up starts or Run
// runs. The zero value is a cluster of local.DefaultNodes nodes, with its
// state in the user's cache directory.
type Config struct {
	// StateDir is the cluster's state directory; empty means
	// closingtime/cluster in the user's cache directory ([StateDir]). Up
	// creates it, and Down removes it if nothing but
	// the cluster's files was in it.
	StateDir string
	// Nodes is the number of nodes, node-1 to node-N; zero means
	// local.DefaultNodes. Unless it is zero or AnyCluster is set, a
	// cluster that is up already must have as many, or Up fails.
	Nodes int
	// ImageCommands map images to local commands, each IMAGE=CMD ARGS… as
	// local.ParseImageCommand reads it, on top of the images closingtime
	// and kube.DefaultImage, whose containers run this binary. Unless it
	// is nil or AnyCluster is set, a cluster that is up already must have
	// the same ones, in any order, or Up fails.
	ImageCommands []string
	// AnyCluster makes Up take a cluster that is up already whatever its
	// nodes and image commands: Nodes and ImageCommands are then those of
	// a cluster that Up starts.
	AnyCluster bool
	// ReadyTimeout bounds Up's wait for the cluster to get ready; zero
	// means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Step, if not nil, is called by Up as each of its steps begins, with
	// the step's name ("build the control plane (…)", "start the control
	// plane", …); a step ends when the next begins or Up returns.
	Step func(name string)
	// Notes, if not nil, gets a line for each stale state that Up, Down
	// or Status clears: that of a daemon that is gone, or the files of one
	// that did not start.
	Notes io.Writer
}

// resolved returns cfg with its state directory absolute and its defaults
// filled in, with the commands of its ImageCommands, or an error naming
// the field that is invalid.
func (cfg Config) resolved() (_ Config, images map[string][]string, err error) {
	if cfg.StateDir, err = StateDir(cfg.StateDir); err != nil {
		return cfg, nil, err
	}
	if cfg.Nodes < 0 {
		return cfg, nil, fmt.Errorf("Config.Nodes %d: want at least 1", cfg.Nodes)
	}
	images = map[string][]string{}
	for _, v := range cfg.ImageCommands {
		image, argv, err := local.ParseImageCommand(v)
		if err != nil {
			return cfg, nil, fmt.Errorf("Config.ImageCommands: %w", err)
		}
		images[image] = argv
	}
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	if cfg.Step == nil {
		cfg.Step = func(string) {}
	}
	if cfg.Notes == nil {
		cfg.Notes = io.Discard
	}
	return cfg, images, nil
}

// Up returns the state of the cluster that is up in cfg's state
// directory, once it is ready, or starts a cluster of cfg there and
// returns its state once it is ready; started reports whether it started
// one. It holds the directory's lock meanwhile, so that two Ups at once
// start one cluster. A stale state is cleared first, with a line on
// cfg.Notes.
//
// The daemon that Up starts is this binary, run in a session of its own as
// `closingtime cluster run --state-dir DIR --nodes N [--image-command
// IMAGE=CMD…]`: that command line must call [Run] with that Config. If the
// cluster does not get ready within cfg.ReadyTimeout, or the daemon exits
// first, Up stops what it started, clears the state, and returns an error
// that ends with the daemon's log. When ctx is done, Up returns the same
// way, and stops a cluster it started; a cluster that was up already stays
// up.
func Up(ctx context.Context, cfg Config) (st *State, started bool, err error) {
	cfg, _, err = cfg.resolved()
	if err != nil {
		return nil, false, err
	}
	dir := cfg.StateDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	unlock, err := lockStateDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if st, err = liveState(cfg.Notes, dir, true); err != nil {
		return nil, false, err
	}
	if st != nil {
		st, err = alreadyUp(ctx, cfg, st)
		return st, false, err
	}
	if st, err = start(ctx, cfg); err != nil {
		removeStateDir(dir)
		return nil, false, err
	}
	return st, true, nil
}

// start builds the control plane if needed, starts the daemon of a
// cluster of cfg, and waits until the cluster is ready. If it fails, it
// stops the daemon and what it started, and returns an error that ends
// with the daemon's log; the state is the caller's to clear.
func start(ctx context.Context, cfg Config) (*State, error) {
	cache, err := controlplane.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	cfg.Step(fmt.Sprintf("build the control plane (Kubernetes %s, etcd %s)", controlplane.KubernetesVersion, controlplane.EtcdVersion))
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
	logPath := filepath.Join(cfg.StateDir, logFile)
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"cluster", "run", "--state-dir", cfg.StateDir, "--nodes", strconv.Itoa(cmp.Or(cfg.Nodes, local.DefaultNodes))}
	for _, v := range cfg.ImageCommands {
		args = append(args, "--image-command", v)
	}
	daemon := exec.Command(exe, args...)
	daemon.Dir = cfg.StateDir
	daemon.Stdout, daemon.Stderr = log, log
	daemon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = daemon.Start()
	log.Close()
	if err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	// Waiting for the daemon reaps it if it exits while Up runs.
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()

	st, err := waitReady(ctx, cfg, exited)
	if err != nil {
		if st, _ := readState(cfg.StateDir); st != nil && st.PID == daemon.Process.Pid {
			stopDaemon(st)
		} else {
			// It wrote no state: nothing of its session runs after it.
			daemon.Process.Kill()
			killSession(daemon.Process.Pid)
		}
		return nil, fmt.Errorf("%w; the daemon's log ends:\n%s", err, lastLines(logPath, 30))
	}
	return st, nil
}

// alreadyUp returns the state of the cluster of st, up already in cfg's
// state directory, once it is ready (waiting for a daemon that starts
// still), or fails if cfg asks for another cluster.
func alreadyUp(ctx context.Context, cfg Config, st *State) (*State, error) {
	if !cfg.AnyCluster && cfg.Nodes != 0 && cfg.Nodes != st.Nodes {
		return nil, fmt.Errorf("a cluster of %d nodes is up (pid %d); run closingtime cluster down first to start one of %d", st.Nodes, st.PID, cfg.Nodes)
	}
	if !cfg.AnyCluster && cfg.ImageCommands != nil && !slices.Equal(sortedCopy(cfg.ImageCommands), sortedCopy(st.ImageCommands)) {
		return nil, fmt.Errorf("a cluster is up (pid %d) with --image-command %q; run closingtime cluster down first to change them", st.PID, st.ImageCommands)
	}
	if st.Phase == PhaseReady {
		return st, nil
	}
	st, err := waitReady(ctx, cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("the cluster that was starting (state in %s) did not get ready: %w", cfg.StateDir, err)
	}
	return st, nil
}

// sortedCopy returns a sorted copy of s.
func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// waitReady waits until the daemon whose state is in cfg's state
// directory is ready: its state's phase is ready, the API server's
// /readyz answers ok and every node is Ready. exited, if not nil,
// delivers the daemon's exit; otherwise the daemon's PID is watched.
// cfg.Step is told each phase.
func waitReady(ctx context.Context, cfg Config, exited <-chan error) (*State, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(poll)
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
			return nil, fmt.Errorf("the cluster was not ready after %s (%s)", cfg.ReadyTimeout, cmp.Or(shown, "the daemon wrote no state"))
		case <-tick.C:
		}
		st, err := readState(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		if st == nil {
			continue // the daemon has not written its state yet
		}
		if exited == nil && !st.alive() {
			return nil, fmt.Errorf("the daemon (pid %d) exited before the cluster was ready", st.PID)
		}
		step := map[Phase]string{
			PhaseControlPlane: "start the control plane",
			PhaseNodes:        fmt.Sprintf("start %d nodes", st.Nodes),
			PhaseReady:        fmt.Sprintf("wait for %d nodes to be Ready", st.Nodes),
		}[st.Phase]
		if step != shown {
			cfg.Step(step)
			shown = step
		}
		if st.Phase != PhaseReady {
			continue
		}
		if client == nil {
			if client, err = kubeClient(st.Kubeconfig); err != nil {
				return nil, err
			}
		}
		if ready(ctx, client, st.Nodes) {
			return st, nil
		}
	}
}

// ready reports whether the API server of client is ready and has nodes
// Ready nodes.
func ready(ctx context.Context, client kubernetes.Interface, nodes int) bool {
	if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
		return false
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	n := 0
	for _, node := range list.Items {
		if nodeReady(&node) == corev1.ConditionTrue {
			n++
		}
	}
	return n >= nodes
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

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Down stops the cluster that is up in cfg's state directory: it sends
// its daemon SIGTERM, and SIGKILL if it has not exited after 90 s; the
// daemon kills every pod, then stops the control plane. Down then kills
// whatever is left in the daemon's session, waits until none of it runs,
// and removes the cluster's files, and the directory if nothing else is
// in it; the built control plane stays in the cache. It returns the state
// of the cluster it stopped, or nil if none was up (a stale state is
// cleared, with a line on cfg.Notes). Down holds the directory's lock
// meanwhile, and creates no directory.
//
// Down takes no context: once it has signalled the daemon, it waits until
// the cluster is gone, at most about two minutes, rather than leave a
// cluster half stopped.
func Down(cfg Config) (*State, error) {
	cfg, _, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	dir := cfg.StateDir
	if _, err := os.Stat(dir); err != nil {
		return nil, nil
	}
	unlock, err := lockStateDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := liveState(cfg.Notes, dir, true)
	if err != nil || st == nil {
		return nil, err
	}
	if err := stopDaemon(st); err != nil {
		return nil, err
	}
	if err := removeStateDir(dir); err != nil {
		return nil, err
	}
	return st, nil
}
