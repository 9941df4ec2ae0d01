package hostcluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLiveStateStale gives liveState the state of a daemon that died and
// left a pod in its session: the state is reported gone in one line, the
// pod is killed, and every file of the cluster is cleared, while a file
// of someone else's stays.
func TestLiveStateStale(t *testing.T) {
	dir := t.TempDir()
	st, pod := deadDaemon(t)
	if err := writeState(dir, st); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, logFile, kubeconfigFile, "notes.txt")
	if !slices.Contains(sessionProcesses(st.PID), pod) {
		t.Fatalf("the pod %d is not in the dead daemon's session %d: %v", pod, st.PID, sessionProcesses(st.PID))
	}

	var notes bytes.Buffer
	got, err := liveState(&notes, dir, true)
	if err != nil || got != nil {
		t.Fatalf("liveState: %+v, %v; want no state", got, err)
	}
	if want := "(pid " + strconv.Itoa(st.PID) + ") is gone; clearing its state in " + dir; strings.Count(notes.String(), want) != 1 ||
		strings.Count(notes.String(), "\n") != 1 {
		t.Errorf("notes %q; want one line with %q", notes.String(), want)
	}
	if left := sessionProcesses(st.PID); len(left) > 0 {
		t.Errorf("processes left in the dead daemon's session: %v", left)
	}
	if clusterFilesPresent(dir) {
		t.Errorf("files of the cluster left in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("a file that is not the cluster's: %v; want it kept", err)
	}
}

// TestLiveStateReusedPID gives liveState a state whose PID is a process
// that started at another time: a later program given the daemon's PID.
// The state is stale, but that program and its session are not the
// cluster's, and they are left alone.
func TestLiveStateReusedPID(t *testing.T) {
	dir := t.TempDir()
	other, _, _ := startHelper(t, "", "wait")
	start, _, err := procStat(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	st := &State{PID: other.Process.Pid, ProcessStart: start + 1, Phase: PhaseReady, Started: time.Now()}
	if err := writeState(dir, st); err != nil {
		t.Fatal(err)
	}
	var notes bytes.Buffer
	if got, err := liveState(&notes, dir, false); err != nil || got != nil {
		t.Fatalf("liveState: %+v, %v; want no state", got, err)
	}
	if !strings.Contains(notes.String(), "is gone") {
		t.Errorf("notes %q; want the state reported gone", notes.String())
	}
	if _, zombie, err := procStat(other.Process.Pid); err != nil || zombie {
		t.Errorf("the process that has the PID now: %v, exited %v; want it running", err, zombie)
	}
	if st, _ := readState(dir); st != nil {
		t.Errorf("state left: %+v", st)
	}
}

// TestLiveState gives liveState the states that are not stale, and the
// files of a daemon that wrote no state, with and without the lock.
func TestLiveState(t *testing.T) {
	start, _, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live := &State{PID: os.Getpid(), ProcessStart: start, Phase: PhaseNodes, Started: time.Now(), Nodes: 2}
	for _, tt := range []struct {
		name      string
		state     *State
		files     []string
		locked    bool
		wantState bool
		wantNote  string
		wantFiles bool
	}{
		{name: "empty", locked: true},
		{name: "a live daemon", state: live, files: []string{logFile}, locked: true, wantState: true, wantFiles: true},
		{name: "no state, locked", files: []string{logFile, kubeconfigFile}, locked: true,
			wantNote: "clearing the files of a cluster that did not start"},
		{name: "no state, not locked", files: []string{logFile}, wantFiles: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.state != nil {
				if err := writeState(dir, tt.state); err != nil {
					t.Fatal(err)
				}
			}
			writeFiles(t, dir, tt.files...)
			var notes bytes.Buffer
			got, err := liveState(&notes, dir, tt.locked)
			if err != nil || (got != nil) != tt.wantState {
				t.Fatalf("liveState: %+v, %v; want a state %v", got, err, tt.wantState)
			}
			if got != nil && (got.PID != live.PID || got.Nodes != live.Nodes || got.Phase != live.Phase) {
				t.Errorf("state %+v, want %+v", got, live)
			}
			if tt.wantNote == "" && notes.Len() > 0 || !strings.Contains(notes.String(), tt.wantNote) {
				t.Errorf("notes %q, want %q", notes.String(), tt.wantNote)
			}
			if clusterFilesPresent(dir) != tt.wantFiles {
				t.Errorf("files of the cluster present %v, want %v", clusterFilesPresent(dir), tt.wantFiles)
			}
		})
	}
}

// TestLockStateDir checks that the lock is exclusive across open files,
// as across processes: a second lockStateDir waits, as /proc/locks shows
// it, until the first is released, and holds the lock then.
func TestLockStateDir(t *testing.T) {
	dir := t.TempDir()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	inode := ":" + strconv.FormatUint(info.Sys().(*syscall.Stat_t).Ino, 10) + " "
	// waiting reports whether someone waits for the lock: /proc/locks
	// marks a blocked request with "->".
	waiting := func() bool {
		locks, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(locks), "\n") {
			if strings.Contains(line, "-> FLOCK") && strings.Contains(line, inode) {
				return true
			}
		}
		return false
	}
	// held reports whether someone holds the lock: a lock that cannot be
	// taken at once.
	held := func() bool {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatal(err)
		}
		return err != nil
	}
	unlock, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !held() {
		t.Fatal("the lock is not held after lockStateDir")
	}
	second := make(chan func(), 1)
	go func() {
		unlock, err := lockStateDir(dir)
		if err != nil {
			t.Error(err)
			unlock = func() {}
		}
		second <- unlock
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One look per round, until the second waits; bounded by ctx.
	for !waiting() {
		select {
		case <-second:
			t.Fatal("a second lockStateDir took the lock while the first held it")
		case <-ctx.Done():
			t.Fatal("the second lockStateDir does not wait for the lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
	unlock()
	select {
	case unlock = <-second:
	case <-ctx.Done():
		t.Fatal("the second lockStateDir did not take the lock once the first released it")
	}
	if !held() {
		t.Error("the lock is not held by the second lockStateDir")
	}
	unlock()
	if held() {
		t.Error("the lock is held after both released it")
	}
	if _, err := lockStateDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("lockStateDir of a missing directory: no error")
	}
}

// TestState writes a state and reads it back, reads none from an empty
// directory, and fails on a state file that is not JSON, naming it.
func TestState(t *testing.T) {
	dir := t.TempDir()
	if st, err := readState(dir); st != nil || err != nil {
		t.Errorf("readState of an empty directory: %+v, %v; want nil, nil", st, err)
	}
	want := &State{PID: 42, ProcessStart: 7, Phase: PhaseReady, Started: time.Now().Round(0), Nodes: 3,
		KubernetesVersion: "1.35.0", ImageCommands: []string{"shop=./shop"}, Kubeconfig: "/k", Server: "https://127.0.0.1:6443"}
	if err := writeState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := readState(dir)
	if err != nil || got == nil || !got.Started.Equal(want.Started) {
		t.Fatalf("readState: %+v, %v; want %+v", got, err, want)
	}
	got.Started = want.Started
	if !slices.Equal(got.ImageCommands, want.ImageCommands) || got.PID != want.PID || got.ProcessStart != want.ProcessStart ||
		got.Phase != want.Phase || got.Nodes != want.Nodes || got.Server != want.Server || got.Kubeconfig != want.Kubeconfig {
		t.Errorf("readState: %+v; want %+v", got, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files after writeState: %v; want the state file only", entries)
	}
	writeFiles(t, dir, stateFile)
	if _, err := readState(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, stateFile)) {
		t.Errorf("readState of a file that is not JSON: %v; want an error naming it", err)
	}
}

// TestNoCluster runs Status and Down on a state directory without a
// cluster, and Up with an invalid Config: none starts anything or writes
// a file.
func TestNoCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := Config{StateDir: dir}
	r, err := Status(context.Background(), cfg)
	if err != nil || r.Up || r.StateDir != dir {
		t.Errorf("Status: %+v, %v; want down in %s", r, err, dir)
	}
	if st, err := Down(cfg); st != nil || err != nil {
		t.Errorf("Down: %+v, %v; want nil, nil", st, err)
	}
	for _, bad := range []Config{{StateDir: dir, Nodes: -1}, {StateDir: dir, ImageCommands: []string{"shop"}}} {
		if _, _, err := Up(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "Config.") {
			t.Errorf("Up(%+v): %v; want an error naming the field", bad, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory: %v; want none", err)
	}
}
