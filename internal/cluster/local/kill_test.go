package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/podnet/podnettest"
)

// clusterProcessEnv, in the environment of the test binary, makes it the
// process that runs TestClusterLeavesNothing's cluster (clusterProcess);
// its value is the path of the closingtime command the pods run.
const clusterProcessEnv = "LOCAL_TEST_CLUSTER_PROCESS"

// clusterProcess runs a cluster as closingtime does, in a process of its
// own, for TestClusterLeavesNothing: four pods of a Service in network
// namespaces, served through the nodes' rules, then scaled to three, so
// that one pod is terminating with its preStop hook (a shell that waits)
// running. It writes a line "ready" and the PIDs of the pods' processes to
// its standard output, then reads its standard input: on a line "close"
// it closes the cluster and writes "closed"; at the end of its input it
// exits. It returns the process's exit status.
func clusterProcess(path string) int {
	binary = path
	if err := runClusterProcess(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func runClusterProcess() error {
	c, err := New(Config{Network: NetworkNamespaces, MinPropagationDelay: 100 * time.Millisecond, MaxPropagationDelay: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	d, svc := webDeployment(4, 600)
	d.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 300; :"}}}}
	if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
		return err
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		return fmt.Errorf("rollout: %w; events: %s", err, describe(c.EventLog().Events()))
	}
	// Connections through a node's rules, from its client pod.
	if err := waitServing(ctx, c); err != nil {
		return fmt.Errorf("serving: %w; events: %s", err, describe(c.EventLog().Events()))
	}
	if err := c.Scale(ctx, "default", "web", 3); err != nil {
		return err
	}
	hooked := false
	for e := range c.Events(ctx) {
		if e.Kind == cluster.PreStopStarted {
			hooked = true
			break
		}
	}
	if !hooked {
		return fmt.Errorf("no preStop hook started; events: %s", describe(c.EventLog().Events()))
	}
	line := []string{"ready"}
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.ContainerStarted {
			line = append(line, e.Fields["pid"])
		}
	}
	fmt.Println(strings.Join(line, " "))
	for in := bufio.NewScanner(os.Stdin); in.Scan(); {
		if in.Text() != "close" {
			continue
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), waitLimit)
		err := c.Close(closeCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("close: %w", err)
		}
		fmt.Println("closed")
	}
	return nil
}

// TestClusterLeavesNothing: once closingtime is gone, by SIGKILL with no
// Close and no deferred call run, or once it has closed its cluster, no
// process of the cluster is left (the pods' processes and a preStop hook's
// shell and the process it started), no process is in any of the
// cluster's network namespaces, none holds a file descriptor of one, none
// is mounted, and the machine's own network namespace holds exactly what
// it held before the cluster started: links, addresses, routes, routing
// rules, nftables tables and chains and their rules, and the forwarding
// sysctls. The cluster runs in the test binary run again (clusterProcess).
func TestClusterLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two clusters in processes of their own, a few seconds each")
	}
	if ns, err := podnet.NewNetns(); errors.Is(err, podnet.ErrUnsupported) {
		t.Skipf("no network namespaces here (run as root, or with CAP_NET_ADMIN in a user namespace): %v", err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		ns.Close()
	}
	t.Parallel()
	machine := machineNetns(t)
	tests := []struct {
		name string
		end  func(t *testing.T, p *clusterProc)
	}{
		{name: "SIGKILL", end: func(t *testing.T, p *clusterProc) {
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Wait(); err == nil {
				t.Fatal("the cluster's process exited 0 after SIGKILL")
			}
		}},
		// The checks run while the process lives on after Close.
		{name: "Close", end: func(t *testing.T, p *clusterProc) {
			if _, err := fmt.Fprintln(p.stdin, "close"); err != nil {
				t.Fatal(err)
			}
			p.expect(t, "closed")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := podnettest.NetworkState(t)
			p := startClusterProcess(t)
			pods := p.expect(t, "ready")
			// The processes of the cluster: the pods', and the preStop
			// hook's shell and sleep, once it has started.
			var procs []int
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			for !slices.ContainsFunc(procs, func(pid int) bool { return processName(pid) == "sleep" }) {
				select {
				case <-ctx.Done():
					t.Fatalf("the preStop hook's sleep is not among the cluster's processes %v", procs)
				case <-time.After(10 * time.Millisecond):
				}
				procs = descendants(t, p.cmd.Process.Pid)
			}
			for _, pid := range strings.Fields(pods) {
				if n, _ := strconv.Atoi(pid); !slices.Contains(procs, n) {
					t.Fatalf("pod process %s is not among the cluster's processes %v", pid, procs)
				}
			}
			held := clusterNamespaces(t, p.cmd.Process.Pid, procs, machine)
			if during := podnettest.NetworkState(t); !cmp.Equal(during, before) {
				t.Errorf("the machine's network namespace changed while the cluster ran (-before +during):\n%s", cmp.Diff(before, during))
			}

			tt.end(t, p)

			// Processes killed by their parent-death signal go a moment
			// after the cluster's process.
			ended := time.Now()
			var left []string
			for deadline := ended.Add(waitLimit); ; time.Sleep(20 * time.Millisecond) {
				left = leftBehind(t, procs, held, before)
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			for _, l := range left {
				t.Error(l)
			}
			t.Logf("%d processes and %d namespaces of the cluster; %v from its end to the last check", len(procs), len(held), time.Since(ended).Round(time.Millisecond))
			if tt.name == "Close" {
				p.stdin.Close()
				if err := p.cmd.Wait(); err != nil {
					t.Errorf("the cluster's process after Close: %v; stderr: %s", err, p.stderr(t))
				}
			}
		})
	}
}

// clusterProc is a running clusterProcess.
type clusterProc struct {
	cmd        *exec.Cmd
	stdin      *os.File
	lines      chan string // its standard output, closed at its end
	stderrPath string
}

// startClusterProcess starts clusterProcess; it is killed when the test
// ends, if it has not ended.
func startClusterProcess(t *testing.T) *clusterProc {
	t.Helper()
	p := &clusterProc{lines: make(chan string, 8), stderrPath: filepath.Join(t.TempDir(), "stderr")}
	stderr, err := os.Create(p.stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = inW
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(), clusterProcessEnv+"="+binary)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = p.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		defer outR.Close()
		for out := bufio.NewScanner(outR); out.Scan(); {
			p.lines <- out.Text()
		}
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// expect waits for the process's next line, which must start with word,
// and returns the rest of it.
func (p *clusterProc) expect(t *testing.T, word string) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if rest, found := strings.CutPrefix(line, word); ok && found {
			return strings.TrimSpace(rest)
		}
		t.Fatalf("the cluster's process wrote %q, want %q; stderr: %s", line, word, p.stderr(t))
	case <-time.After(2 * waitLimit):
		t.Fatalf("the cluster's process wrote no %q in %s; stderr: %s", word, 2*waitLimit, p.stderr(t))
	}
	return ""
}

func (p *clusterProc) stderr(t *testing.T) string {
	b, err := os.ReadFile(p.stderrPath)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// netnsID names a network namespace: its inode, which the kernel hands
// out again once the namespace is freed, and its 64-bit id, which it never
// does (NS_GET_ID); id is 0 on kernels without that ioctl.
type netnsID struct{ ino, id uint64 }

// nsGetID is linux/nsfs.h's NS_GET_ID, _IOR(0xb7, 0xd, __u64).
const nsGetID = 0x8008b70d

// netnsOf returns the namespace of the nsfs file at path, such as
// /proc/<pid>/ns/net.
func netnsOf(path string) (netnsID, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netnsID{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return netnsID{}, err
	}
	var id uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetID, uintptr(unsafe.Pointer(&id))); errno != 0 {
		id = 0
	}
	return netnsID{ino: st.Ino, id: id}, nil
}

// machineNetns returns the machine's network namespace: that of a thread
// of the test no cluster's namespace has (a namespace's thread is locked
// to its goroutine, so this goroutine never runs on one).
func machineNetns(t *testing.T) netnsID {
	t.Helper()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	ns, err := netnsOf("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// clusterNamespaces returns the network namespaces of the threads of the
// cluster's process pid other than the machine's, each with what was in
// it, and fails the test unless each of the cluster's other processes
// procs is in one of them, each pod's process in its own: a namespace is
// held by a thread of closingtime.
func clusterNamespaces(t *testing.T, pid int, procs []int, machine netnsID) map[netnsID]string {
	t.Helper()
	held := map[netnsID]string{}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if ns, err := netnsOf(dir + task.Name() + "/ns/net"); err == nil && ns != machine {
			held[ns] = "thread " + task.Name() + " of the cluster's process"
		}
	}
	if len(held) == 0 {
		t.Fatal("no thread of the cluster's process is in a namespace of its own")
	}
	for _, proc := range procs {
		ns, err := netnsOf("/proc/" + strconv.Itoa(proc) + "/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := held[ns]; !ok {
			t.Errorf("process %d (%s) of the cluster is in network namespace %+v, none of its threads' (the machine's is %+v)", proc, processName(proc), ns, machine)
		}
	}
	return held
}

// leftBehind says what of the cluster is left: a process of procs still
// running, a thread of any process in a namespace of held, a file
// descriptor of one, a mount of one, or a change of the machine's network
// namespace from before.
func leftBehind(t *testing.T, procs []int, held map[netnsID]string, before []string) []string {
	t.Helper()
	var left []string
	for _, pid := range procs {
		if state := processState(pid); state != "" && state != "Z" {
			left = append(left, fmt.Sprintf("process %d (%s) of the cluster is still there, state %s", pid, processName(pid), state))
		}
	}
	byIno := map[uint64]netnsID{}
	for ns := range held {
		byIno[ns.ino] = ns
	}
	// ours says which namespace of held the nsfs file at path, which
	// readlink names link, is.
	ours := func(path, link string) (netnsID, bool) {
		var ino uint64
		if _, err := fmt.Sscanf(link, "net:[%d]", &ino); err != nil {
			return netnsID{}, false
		}
		want, ok := byIno[ino]
		if !ok {
			return netnsID{}, false
		}
		got, err := netnsOf(path)
		return want, err == nil && got.ino == want.ino && (got.id == 0 || got.id == want.id)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		tasks, _ := os.ReadDir(dir + "/task")
		for _, task := range tasks {
			path := dir + "/task/" + task.Name() + "/ns/net"
			link, _ := os.Readlink(path)
			if ns, ok := ours(path, link); ok {
				left = append(left, fmt.Sprintf("thread %s of process %d (%s) is in the namespace of %s", task.Name(), pid, processName(pid), held[ns]))
			}
		}
		fds, _ := os.ReadDir(dir + "/fd")
		for _, fd := range fds {
			path := dir + "/fd/" + fd.Name()
			link, _ := os.Readlink(path)
			if ns, ok := ours(path, link); ok {
				left = append(left, fmt.Sprintf("process %d (%s) holds file descriptor %s of the namespace of %s", pid, processName(pid), fd.Name(), held[ns]))
			}
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// Fields: ID, parent ID, device, root, mount point…; an nsfs mount's
	// root names its namespace.
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if ns, ok := ours(f[4], f[3]); ok {
				left = append(left, fmt.Sprintf("the namespace of %s is mounted at %s", held[ns], f[4]))
			}
		}
	}
	if after := podnettest.NetworkState(t); !cmp.Equal(after, before) {
		left = append(left, fmt.Sprintf("the machine's network namespace changed (-before +after):\n%s", cmp.Diff(before, after)))
	}
	return left
}

// descendants returns the processes that pid started, and those that they
// started, and so on.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	for parents := []int{pid}; len(parents) > 0; {
		parents = childrenOf(t, parents...)
		out = append(out, parents...)
	}
	return out
}

// processName returns the command name of process pid, or "" if there is
// none.
func processName(pid int) string {
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(comm))
}
