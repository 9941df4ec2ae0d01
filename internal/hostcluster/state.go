package hostcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/closingtime-dev/closingtime/internal/nodeagent"
)

// The files of a cluster's state directory. Down removes these and
// nothing else, so that a state directory given by mistake loses nothing
// but what closingtime put there.
const (
	// stateFile is the daemon's State, as JSON.
	stateFile = "state.json"
	// logFile is the daemon's standard output and error.
	logFile = "daemon.log"
	// kubeconfigFile is the administrator's kubeconfig, certificates
	// embedded, that up tells the user to export.
	kubeconfigFile = "kubeconfig"
	// controlPlaneDir is the control plane's directory: certificates,
	// etcd's data, the programs' logs.
	controlPlaneDir = "controlplane"
)

// clusterFiles are the files that a cluster puts in its state directory.
var clusterFiles = []string{stateFile, logFile, kubeconfigFile, nodeagent.PodKubeconfigFile, controlPlaneDir}

// Phase is how far a cluster's daemon has come, as its State records it.
type Phase string

// The phases of a daemon, in order.
const (
	// PhaseControlPlane: the daemon starts the control plane.
	PhaseControlPlane Phase = "control-plane"
	// PhaseNodes: the control plane is up; the daemon starts the nodes.
	PhaseNodes Phase = "nodes"
	// PhaseReady: the nodes run; they may not be Ready yet.
	PhaseReady Phase = "ready"
)

// State is what the daemon records in its state directory, and what Up,
// Down and Status read. The daemon writes it atomically at each phase.
type State struct {
	// PID is the daemon's process ID, also the ID of the session that
	// every process of the cluster belongs to.
	PID int `json:"pid"`
	// ProcessStart is the daemon's start time in clock ticks after boot
	// (field 22 of /proc/PID/stat): a process with the same PID and
	// another start time is a later program that reused the PID.
	ProcessStart uint64 `json:"processStart"`
	// Phase is how far the daemon has come.
	Phase Phase `json:"phase"`
	// Started is when the daemon started.
	Started time.Time `json:"started"`
	// Nodes is the number of nodes, node-1 to node-N.
	Nodes int `json:"nodes"`
	// KubernetesVersion is the control plane's version.
	KubernetesVersion string `json:"kubernetesVersion"`
	// ImageCommands are the daemon's Config.ImageCommands, as given.
	ImageCommands []string `json:"imageCommands,omitempty"`
	// Kubeconfig is the path of the administrator's kubeconfig; it exists
	// from PhaseNodes on.
	Kubeconfig string `json:"kubeconfig"`
	// Server is the API server's URL, from PhaseNodes on.
	Server string `json:"server,omitempty"`
}

// StateDir returns the absolute path of the state directory that
// Config.StateDir dir names: dir, or closingtime/cluster in the user's
// cache directory if dir is empty.
func StateDir(dir string) (string, error) {
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("state directory: %w", err)
		}
		dir = filepath.Join(cache, "closingtime", "cluster")
	}
	return filepath.Abs(dir)
}

// lockStateDir takes an exclusive lock on the state directory dir, which
// must exist, waiting while another Up or Down holds it; unlock releases
// it. Only Up and Down take it: they start and stop clusters.
func lockStateDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// readState returns the state recorded in dir, or nil if there is none.
func readState(dir string) (*State, error) {
	path := filepath.Join(dir, stateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	return &st, nil
}

// writeState records st in dir atomically: through a temporary file
// renamed over the state file, so that a reader finds the state before
// or after, never a part. Only the daemon writes it.
func writeState(dir string, st *State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	temp := filepath.Join(dir, "."+stateFile+".new")
	err = os.WriteFile(temp, append(data, '\n'), 0o644)
	if err == nil {
		err = os.Rename(temp, filepath.Join(dir, stateFile))
	}
	if err != nil {
		os.Remove(temp)
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// liveState returns the state of dir's cluster if its daemon runs, or nil.
// A state whose daemon is gone (a crash, a kill -9, a reboot) is reported
// on notes in one line, what is left of its processes killed, and the
// state cleared, so that it never blocks the next Up. If locked, the
// caller holds the state directory's lock (lockStateDir), and the files of
// a daemon that died before it wrote its state are cleared too; without
// the lock, they may be those of a daemon that an Up starts now.
func liveState(notes io.Writer, dir string, locked bool) (*State, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if st == nil {
		if locked && clusterFilesPresent(dir) {
			fmt.Fprintf(notes, "cluster: clearing the files of a cluster that did not start in %s\n", dir)
			return nil, clearState(dir)
		}
		return nil, nil
	}
	if st.alive() {
		return st, nil
	}
	fmt.Fprintf(notes, "cluster: the daemon of the cluster started %s (pid %d) is gone; clearing its state in %s\n",
		st.Started.Local().Format(time.DateTime), st.PID, dir)
	// The session's members are the cluster's only if no process has the
	// daemon's PID now: a PID is not reused while its session has members.
	if _, _, err := procStat(st.PID); err != nil {
		if err := killSession(st.PID); err != nil {
			return nil, err
		}
	}
	return nil, clearState(dir)
}

// clusterFilesPresent reports whether any file of a cluster is in dir.
func clusterFilesPresent(dir string) bool {
	for _, name := range clusterFiles {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// clearState removes the files of a cluster from dir.
func clearState(dir string) error {
	for _, name := range clusterFiles {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("clear the state: %w", err)
		}
	}
	return nil
}

// removeStateDir removes the files of a cluster from dir, and dir if that
// leaves it empty.
func removeStateDir(dir string) error {
	if err := clearState(dir); err != nil {
		return err
	}
	os.Remove(dir) // fails, as it should, if something else is in it
	return nil
}

// alive reports whether the daemon of st runs: its PID is a process that
// has not exited and started when the daemon did.
func (st *State) alive() bool {
	start, zombie, err := procStat(st.PID)
	return err == nil && !zombie && start == st.ProcessStart
}

// stopDaemon stops the daemon of st and every process of its session:
// SIGTERM, and SIGKILL after stopTimeout; then any process left in its
// session (none, unless the daemon was killed before it stopped the pods)
// is killed. It returns when they are gone, or an error naming those that
// did not go.
func stopDaemon(st *State) error {
	if st.alive() {
		syscall.Kill(st.PID, syscall.SIGTERM)
		if !waitGone(st.alive, stopTimeout) {
			syscall.Kill(st.PID, syscall.SIGKILL)
			if !waitGone(st.alive, killTimeout) {
				return fmt.Errorf("the daemon (pid %d) did not exit after SIGKILL", st.PID)
			}
		}
	}
	return killSession(st.PID)
}

// killSession kills every process left in session sid, whose leader has
// exited, and waits until they are gone. The session's ID stays taken
// while any of them lives, so the processes found are the cluster's.
func killSession(sid int) error {
	for _, pid := range sessionProcesses(sid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	left := func() bool { return len(sessionProcesses(sid)) > 0 }
	if !waitGone(left, killTimeout) {
		return fmt.Errorf("processes of the cluster left after SIGKILL: %v", sessionProcesses(sid))
	}
	return nil
}

// sessionProcesses returns the IDs of the processes of session sid that
// have not exited.
func sessionProcesses(sid int) []int {
	var pids []int
	for _, p := range Processes() {
		if p.Session == sid {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// waitGone polls running until it reports false or timeout passes, and
// reports whether it did.
func waitGone(running func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for running() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll / 2)
	}
	return true
}
