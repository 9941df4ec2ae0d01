package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The files of a cluster's state directory. Down removes these and
// nothing else, so that a --state-dir given by mistake loses nothing but
// what closingtime put there.
const (
	// clusterStateFile is the daemon's state, as JSON (clusterState).
	clusterStateFile = "state.json"
	// clusterLogFile is the daemon's standard output and error.
	clusterLogFile = "daemon.log"
	// clusterKubeconfig is the administrator's kubeconfig, certificates
	// embedded, that up tells the user to export.
	clusterKubeconfig = "kubeconfig"
	// clusterControlPlaneDir is the control plane's directory:
	// certificates, etcd's data, the programs' logs.
	clusterControlPlaneDir = "controlplane"
)

// The phases of a cluster's daemon, in order, as its state file records
// them.
const (
	phaseControlPlane = "control-plane" // starting the control plane
	phaseNodes        = "nodes"         // starting the nodes
	phaseReady        = "ready"         // the nodes run; they may not be Ready yet
)

// clusterState is what the daemon of `closingtime cluster` records in its
// state directory, and what up, down and status read. The daemon writes it
// atomically at each phase.
type clusterState struct {
	// PID is the daemon's process ID, also the ID of the session that
	// every process of the cluster belongs to.
	PID int `json:"pid"`
	// ProcessStart is the daemon's start time in clock ticks after boot
	// (field 22 of /proc/PID/stat): a process with the same PID and
	// another start time is a later program that reused the PID.
	ProcessStart uint64 `json:"processStart"`
	// Phase is how far the daemon has come: one of the phase constants.
	Phase string `json:"phase"`
	// Started is when the daemon started.
	Started time.Time `json:"started"`
	// Nodes is the number of nodes, node-1 to node-N.
	Nodes int `json:"nodes"`
	// KubernetesVersion is the control plane's version.
	KubernetesVersion string `json:"kubernetesVersion"`
	// ImageCommands are the values of --image-command, as given.
	ImageCommands []string `json:"imageCommands,omitempty"`
	// Kubeconfig is the path of the administrator's kubeconfig; it exists
	// from phaseNodes on.
	Kubeconfig string `json:"kubeconfig"`
	// Server is the API server's URL, from phaseNodes on.
	Server string `json:"server,omitempty"`
}

// clusterStateDir returns the absolute path of the state directory: dir,
// or closingtime/cluster in the user's cache directory.
func clusterStateDir(dir string) (string, error) {
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("cluster: state directory: %w (give --state-dir)", err)
		}
		dir = filepath.Join(cache, "closingtime", "cluster")
	}
	return filepath.Abs(dir)
}

// lockStateDir takes an exclusive lock on the state directory dir, which
// must exist, waiting while another up or down holds it; unlock releases
// it. Only up and down take it: they start and stop clusters.
func lockStateDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// stopCluster stops the daemon of st and every process of its session:
// SIGTERM, and SIGKILL after clusterStopTimeout; then any process left in
// its session (none, unless the daemon was killed before it stopped the
// pods) is killed. It returns when they are gone, or an error naming those
// that did not go.
func stopCluster(st *clusterState) error {
	if st.alive() {
		syscall.Kill(st.PID, syscall.SIGTERM)
		if !waitGone(st.alive, clusterStopTimeout) {
			syscall.Kill(st.PID, syscall.SIGKILL)
			if !waitGone(st.alive, clusterKillTimeout) {
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
	if !waitGone(left, clusterKillTimeout) {
		return fmt.Errorf("processes of the cluster left after SIGKILL: %v", sessionProcesses(sid))
	}
	return nil
}

// waitGone polls running until it reports false or timeout passes, and
// reports whether it did.
func waitGone(running func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for running() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(clusterPoll / 2)
	}
	return true
}

// readClusterState returns the state recorded in dir, or nil if there is
// none.
func readClusterState(dir string) (*clusterState, error) {
	path := filepath.Join(dir, clusterStateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var st clusterState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("cluster: state file %s: %w", path, err)
	}
	return &st, nil
}

// writeClusterState records st in dir, atomically.
func writeClusterState(dir string, st *clusterState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	err = writeAtomically(filepath.Join(dir, clusterStateFile), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	return nil
}

// liveState returns the state of dir's cluster if its daemon runs, or nil.
// A state whose daemon is gone — a crash, a kill -9, a reboot — is
// reported on errw in one line, what is left of its processes killed,
// and the state cleared, so that it never blocks the next up. If locked,
// the caller holds the state directory's lock (lockStateDir), and the
// files of a daemon that died before it wrote its state are cleared too;
// without the lock, they may be those of a daemon that up starts now.
func liveState(errw io.Writer, dir string, locked bool) (*clusterState, error) {
	st, err := readClusterState(dir)
	if err != nil {
		return nil, err
	}
	if st == nil {
		if locked && clusterFilesPresent(dir) {
			fmt.Fprintf(errw, "cluster: clearing the files of a cluster that did not start in %s\n", dir)
			return nil, clearClusterState(dir)
		}
		return nil, nil
	}
	if st.alive() {
		return st, nil
	}
	fmt.Fprintf(errw, "cluster: the daemon of the cluster started %s (pid %d) is gone; clearing its state in %s\n",
		st.Started.Local().Format(time.DateTime), st.PID, dir)
	// The session's members are the cluster's only if no process has the
	// daemon's PID now: a PID is not reused while its session has members.
	if _, _, err := procStat(st.PID); err != nil {
		if err := killSession(st.PID); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	return nil, clearClusterState(dir)
}

// clusterFiles are the files that a cluster puts in its state directory.
var clusterFiles = []string{clusterStateFile, clusterLogFile, clusterKubeconfig, clusterControlPlaneDir}

// clusterFilesPresent reports whether any file of a cluster is in dir.
func clusterFilesPresent(dir string) bool {
	for _, name := range clusterFiles {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// clearClusterState removes the files of a cluster from dir.
func clearClusterState(dir string) error {
	for _, name := range clusterFiles {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("cluster: clear the state: %w", err)
		}
	}
	return nil
}

// removeStateDir removes the files of a cluster from dir, and dir if that
// leaves it empty.
func removeStateDir(dir string) error {
	if err := clearClusterState(dir); err != nil {
		return err
	}
	os.Remove(dir) // fails, as it should, if something else is in it
	return nil
}

// alive reports whether the daemon of st runs: its PID is a process that
// has not exited and started when the daemon did.
func (st *clusterState) alive() bool {
	start, zombie, err := procStat(st.PID)
	return err == nil && !zombie && start == st.ProcessStart
}

// procStat returns the start time of process pid, in clock ticks after
// boot, and whether it has exited (a zombie), from /proc/PID/stat.
func procStat(pid int) (start uint64, zombie bool, err error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, false, err
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, fields[0] == "Z", nil
}

// statFields returns the fields of /proc/PID/stat after the command's
// name: the process's state (field 3 of proc(5)) first.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The name, in parentheses, may itself hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	return fields, nil
}

// sessionProcesses returns the processes of session sid that have not
// exited.
func sessionProcesses(sid int) []int {
	var pids []int
	for _, pid := range runningProcesses() {
		fields, err := statFields(pid)
		if err != nil {
			continue
		}
		if s, err := strconv.Atoi(fields[3]); err == nil && s == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// runningProcesses returns the IDs of the processes in /proc that have
// not exited (zombies left out).
func runningProcesses() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fields, err := statFields(pid); err == nil && fields[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}
