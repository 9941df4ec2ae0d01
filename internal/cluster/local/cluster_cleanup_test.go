package local

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestClusterCleanup: whatever state a cluster is in when it closes — pods
// serving through the Service's listener, a rollout cut short by its
// context, a crash-looping pod and a refused manifest — Close leaves no
// process, no open file, no listening socket, no temporary file and no
// goroutine of the cluster behind. The test is not parallel: it counts the
// test process's children and open files, which parallel tests would
// change.
func TestClusterCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs clusters through rollouts")
	}
	work := t.TempDir()
	tmp := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	// The runtime's network poller opens its files once, at first use.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	tests := []struct {
		name         string
		pidNamespace PIDNamespaceMode
		// run uses the cluster and returns the addresses that must not
		// accept connections once it is closed, and the connections
		// that Close must end.
		run func(t *testing.T, c *Cluster) ([]string, []net.Conn)
		// background: the containers start processes of their own.
		background bool
	}{
		{name: "serving", run: func(t *testing.T, c *Cluster) ([]string, []net.Conn) {
			d, svc := webDeployment(3, 10, "--shutdown=graceful", "--drain-timeout=5s")
			rollout(t, c, []runtime.Object{d, svc}, 0)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go c.Serve(context.Background(), ln, "web.default:80")
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := waitServing(ctx, c); err != nil {
				t.Fatal(err)
			}
			// Connections open at Close: one through the dialer, one
			// through the listener.
			var conns []net.Conn
			for _, dial := range []func() (net.Conn, error){
				func() (net.Conn, error) { return c.DialContext(context.Background(), "tcp", "web.default:80") },
				func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) },
			} {
				conn, err := dial()
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, conn)
			}
			return append(podAddrs(c), ln.Addr().String()), conns
		}},
		{name: "rollout cut short", run: func(t *testing.T, c *Cluster) ([]string, []net.Conn) {
			d, svc := webDeployment(3, 10, "--shutdown=graceful", "--drain-timeout=5s")
			d.Spec.Strategy = rollingUpdate("1", "0")
			ctr := &d.Spec.Template.Spec.Containers[0]
			ctr.ReadinessProbe = httpProbe("/ready", 3)
			ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
			rollout(t, c, []runtime.Object{d, svc}, 0)
			addrs := podAddrs(c)
			if err := c.RolloutRestart(context.Background(), "default", "web"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := c.RolloutStatus(ctx, "default", "web"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("RolloutStatus() = %v, want the rollout still under way when its context ends", err)
			}
			return append(addrs, podAddrs(c)...), nil
		}},
		{name: "background processes", run: backgroundProcesses, background: true},
		{name: "background processes without PID namespace", pidNamespace: PIDNamespaceNone, run: backgroundProcesses, background: true},
		{name: "errors", run: func(t *testing.T, c *Cluster) ([]string, []net.Conn) {
			d, svc := webDeployment(1, 2)
			d.Spec.Template.Spec.Containers[0].Command = []string{"/nonexistent/server"}
			if err := c.Apply(context.Background(), []runtime.Object{d, svc}); err != nil {
				t.Fatal(err)
			}
			bad := d.DeepCopy()
			bad.Name, bad.Spec.Template.Spec.Containers[0].Command = "bad", nil
			if err := c.Apply(context.Background(), []runtime.Object{bad}); err == nil {
				t.Fatal("Apply() of a container with no command and no image mapping succeeded")
			}
			waitEvent(t, c, cluster.ContainerStartFailed)
			return podAddrs(c), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fds := len(openFiles(t))
			c, err := New(Config{MinPropagationDelay: 100 * time.Millisecond,
				MaxPropagationDelay: 300 * time.Millisecond, Kubelet: KubeletConfig{WorkingDir: work, PIDNamespace: tt.pidNamespace}})
			if err != nil {
				t.Fatal(err)
			}
			addrs, conns := tt.run(t, c)
			// The containers' processes, and the processes they started.
			var pids []int
			for _, e := range c.EventLog().Events() {
				if e.Kind == cluster.ContainerStarted {
					pid, _ := strconv.Atoi(e.Fields["pid"])
					pids = append(pids, pid)
				}
			}
			started := childrenOf(t, pids...)
			if tt.background && len(started) == 0 {
				t.Fatal("the containers' background processes are not there")
			}
			pids = append(pids, started...)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			// The pods' end, or the listener's, ends each connection.
			for _, conn := range conns {
				conn.SetReadDeadline(time.Now().Add(waitLimit))
				if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("connection to %s still open after Close: read %v", conn.RemoteAddr(), err)
				}
				conn.Close()
			}
			checkClean(t, fds, pids, addrs, tmp)
		})
	}

	t.Run("New fails", func(t *testing.T) {
		fds := len(openFiles(t))
		// node-1's kubelet starts before its proxy refuses the range.
		_, err := New(Config{MinPropagationDelay: time.Second, MaxPropagationDelay: time.Millisecond})
		if err == nil {
			t.Fatal("New() with an empty propagation range succeeded")
		}
		checkClean(t, fds, nil, nil, tmp)
	})
}

// backgroundProcesses runs pods whose shell starts a process in the
// background and execs the server.
func backgroundProcesses(t *testing.T, c *Cluster) ([]string, []net.Conn) {
	d, svc := webDeployment(2, 10)
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.Command = []string{"sh", "-c", `sleep 300 & exec "$0" "$@"`, binary}
	ctr.Args = []string{"serve", "--listen=$(POD_IP):8080", "--shutdown=graceful"}
	rollout(t, c, []runtime.Object{d, svc}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := waitServing(ctx, c); err != nil {
		t.Fatalf("the pods never served: %v; events: %s", err, describe(c.EventLog().Events()))
	}
	return podAddrs(c), nil
}

// otherNetworkNamespaces returns the network namespaces of the test's
// threads other than the process's own.
func otherNetworkNamespaces(t *testing.T) []string {
	t.Helper()
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var other []string
	for _, task := range tasks {
		if ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && ns != own {
			other = append(other, ns)
		}
	}
	return other
}

// podAddrs returns the addresses pods of c listen on.
func podAddrs(c *Cluster) []string {
	var out []string
	for _, p := range c.Pods("default") {
		if p.Status.PodIP != "" {
			out = append(out, net.JoinHostPort(p.Status.PodIP, "8080"))
		}
	}
	return out
}

// waitEvent waits for an event of kind.
func waitEvent(t *testing.T, c *Cluster, kind cluster.EventKind) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for e := range c.Events(ctx) {
		if e.Kind == kind {
			return
		}
	}
	t.Fatalf("no %s event", kind)
}

// checkClean fails the test if the test process has children, more open
// files than fds, a process of pids alive, a listener at one of addrs, a
// file in tmp, or a goroutine running the package's code, once a short
// while has let goroutines that were returning return.
func checkClean(t *testing.T, fds int, pids []int, addrs []string, tmp string) {
	t.Helper()
	// A killed process closes its files, which ends the kubelet's wait
	// for its output, a moment before it is gone.
	for _, pid := range pids {
		state := processState(pid)
		for deadline := time.Now().Add(time.Second); state != "" && state != "Z" && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			state = processState(pid)
		}
		if state != "" && state != "Z" {
			t.Errorf("process %d of a container still there after Close, state %s", pid, state)
		}
	}
	if kids := childrenOf(t, os.Getpid()); len(kids) > 0 {
		t.Errorf("processes %v are still children of the test after Close", kids)
	}
	// An address of a pod's own namespace went with the namespace, and
	// must not be dialled from this one, which may route it elsewhere.
	for _, addr := range addrs {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			continue
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Close", addr)
		}
	}
	if ns := otherNetworkNamespaces(t); len(ns) > 0 {
		t.Errorf("threads of the test are in network namespaces %v after Close", ns)
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) > 0 {
		t.Errorf("temporary directory holds %v (%v) after Close", entries, err)
	}
	// Goroutines that were returning get a moment to return; the race
	// detector's runtime opens pipes of its own for a moment now and then.
	var left []string
	var files []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left, files = clusterGoroutines(), openFiles(t)
		if (len(left) == 0 && len(files) <= fds) || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines of the cluster after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if len(files) > fds {
		t.Errorf("%d open files after Close, %d before the cluster started: %s", len(files), fds, strings.Join(files, " "))
	}
}

// processState returns the state of process pid (R, S, Z…), or "" if
// there is none. A zombie has ended; only its parent's reaping is left.
func processState(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// openFiles returns the test process's open files, as fd→target.
func openFiles(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"→"+target)
	}
	return out
}

// childrenOf returns the processes whose parent is one of parents.
func childrenOf(t *testing.T, parents ...int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command's closing parenthesis: state,
		// then the parent's PID.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil && slices.Contains(parents, ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// clusterGoroutines returns the stacks of the goroutines that run code of
// the package's non-test files.
func clusterGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "/internal/cluster/local/") && !strings.Contains(line, "_test.go") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
