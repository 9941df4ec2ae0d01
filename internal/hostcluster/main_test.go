package hostcluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a helper process of the tests instead of
// running them: "wait" waits, as a pod does, until it is killed (or for
// helperLife, so that a failed test leaves nothing running for long);
// "leader" starts a "wait" helper in its own session, writes that
// helper's PID on standard output, and exits when standard input closes,
// as a daemon that dies and leaves a pod behind.
const helperEnv = "HOSTCLUSTER_TEST_HELPER"

// helperLife bounds the life of a "wait" helper.
const helperLife = time.Minute

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "wait":
		time.Sleep(helperLife)
		os.Exit(0)
	case "leader":
		pod := exec.Command(os.Args[0])
		pod.Env = append(os.Environ(), helperEnv+"=wait")
		if err := pod.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(pod.Process.Pid)
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startHelper starts the test binary, through path if not empty (a link
// to it), as a helper of role in a session of its own, and kills it and
// reaps it at the end of the test. It returns the helper and its standard
// input and output.
func startHelper(t *testing.T, path, role string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if path != "" {
		if err := os.Symlink(exe, path); err != nil {
			t.Fatal(err)
		}
		exe = path
	}
	cmd = exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+role)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, stdin, bufio.NewReader(out)
}

// deadDaemon starts a "leader" helper, which leaves a "wait" helper (a
// pod) in its session when it exits, and returns the state that a daemon
// of that PID would have recorded, once the leader has exited and been
// reaped, and the pod's PID.
func deadDaemon(t *testing.T) (*State, int) {
	t.Helper()
	leader, stdin, stdout := startHelper(t, "", "leader")
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("the leader's pod: %v", err)
	}
	pod, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pod, syscall.SIGKILL) })
	start, _, err := procStat(leader.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := leader.Wait(); err != nil {
		t.Fatalf("leader: %v", err)
	}
	return &State{PID: leader.Process.Pid, ProcessStart: start, Phase: PhaseReady, Started: time.Now(), Nodes: 1}, pod
}

// writeFiles writes a file of each name in dir.
func writeFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
