package hostcluster

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestProcesses runs a helper in a session of its own, under a name with
// spaces and parentheses, which /proc/PID/stat shows as they are:
// Processes finds it in its session, procStat tells its start time, and
// once killSession killed it, it is a zombie until it is reaped, which
// neither Processes nor State.alive counts.
func TestProcesses(t *testing.T) {
	cmd, _, _ := startHelper(t, filepath.Join(t.TempDir(), "pod (a) b)"), "wait")
	pid := cmd.Process.Pid
	if want := (Process{PID: pid, Session: pid}); !slices.Contains(Processes(), want) {
		t.Errorf("Processes does not list %+v", want)
	}
	if got := sessionProcesses(pid); !slices.Equal(got, []int{pid}) {
		t.Errorf("sessionProcesses(%d) = %v, want [%d]", pid, got, pid)
	}
	start, zombie, err := procStat(pid)
	if err != nil || zombie || start == 0 {
		t.Fatalf("procStat: start %d, zombie %v, %v", start, zombie, err)
	}
	st := State{PID: pid, ProcessStart: start}
	if !st.alive() {
		t.Error("alive: false for the running helper")
	}
	if other := (State{PID: pid, ProcessStart: start + 1}); other.alive() {
		t.Error("alive: true for another start time")
	}

	if err := killSession(pid); err != nil {
		t.Fatal(err)
	}
	if _, zombie, err := procStat(pid); err != nil || !zombie {
		t.Errorf("procStat after the kill: zombie %v, %v; want a zombie, not yet reaped", zombie, err)
	}
	if st.alive() || slices.ContainsFunc(Processes(), func(p Process) bool { return p.PID == pid }) {
		t.Error("a zombie counts as running")
	}
	cmd.Wait()
}
