package podnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/closingtime-dev/closingtime/internal/podnet/podnettest"
)

// newNetwork returns a network of nodes that the test closes, or skips the
// test where the system allows no network namespaces.
func newNetwork(t testing.TB, nodes int) *Network {
	t.Helper()
	nw, err := New(Config{Nodes: nodes})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no network namespaces here (run as root, or in a user namespace with CAP_NET_ADMIN): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return nw
}

// sandbox makes a sandbox on n that the test closes, and returns its
// namespace too.
func sandbox(t *testing.T, n *NetnsNode) (*netnsSandbox, *Netns) {
	t.Helper()
	s, err := n.NewSandbox()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ns := s.(*netnsSandbox)
	return ns, ns.ns
}

// serve answers each connection of ln with its own address and closes it.
func serve(t *testing.T, ln net.Listener, name string) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		// One connection per round; the loop ends when ln is closed.
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, name)
			c.Close()
		}
	}()
}

// get dials address from dial and returns what the server wrote.
func get(dial func(context.Context, string, string) (net.Conn, error), address string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", address)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestPodsBindTheSamePortAndReachEachOther(t *testing.T) {
	nw := newNetwork(t, 2)
	n1, n2 := nw.Nodes()[0], nw.Nodes()[1]
	var pods []*netnsSandbox
	for i, n := range []*NetnsNode{n1, n1, n2} {
		s, ns := sandbox(t, n)
		ln, err := ns.Listen("tcp", "0.0.0.0:8080")
		if err != nil {
			t.Fatalf("pod %d: listen on 0.0.0.0:8080: %v", i, err)
		}
		serve(t, ln, s.IP().String())
		pods = append(pods, s)
	}
	if !n1.PodCIDR().Contains(pods[0].IP()) || !n2.PodCIDR().Contains(pods[2].IP()) || pods[0].IP() == pods[1].IP() {
		t.Fatalf("addresses %s %s %s: want two of %s and one of %s", pods[0].IP(), pods[1].IP(), pods[2].IP(), n1.PodCIDR(), n2.PodCIDR())
	}
	for _, from := range []struct {
		name string
		dial func(context.Context, string, string) (net.Conn, error)
	}{{"node-1", n1.DialContext}, {"node-2", n2.DialContext}, {"pod on node-2", pods[2].ns.DialContext}} {
		for _, to := range pods {
			addr := netip.AddrPortFrom(to.IP(), 8080).String()
			got, err := get(from.dial, addr)
			if err != nil || got != to.IP().String() {
				t.Errorf("from %s to %s: %q, %v; want %q", from.name, addr, got, err, to.IP())
			}
		}
	}
	// A pod's localhost is its own.
	ln, err := pods[0].ns.Listen("tcp", "127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, "sidecar")
	if got, err := get(pods[0].ns.DialContext, "127.0.0.1:9000"); err != nil || got != "sidecar" {
		t.Errorf("pod to its own localhost: %q, %v", got, err)
	}
	if _, err := get(pods[1].ns.DialContext, "127.0.0.1:9000"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("another pod's localhost: %v, want refused", err)
	}
}

func TestClosedSandboxStopsAnswering(t *testing.T) {
	nw := newNetwork(t, 2)
	for _, from := range nw.Nodes() {
		t.Run("from "+from.IP().String(), func(t *testing.T) {
			s, _ := sandbox(t, nw.Nodes()[0])
			addr := netip.AddrPortFrom(s.IP(), 8080).String()
			// The sandbox is there, with nothing listening: refused.
			if _, err := get(from.DialContext, addr); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial %s before the sandbox goes: %v, want refused", addr, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Gone: nothing answers, and the connect times out.
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			c, err := from.DialContext(ctx, "tcp", addr)
			if err == nil {
				c.Close()
			}
			var ne net.Error
			if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("dial %s after the sandbox went: %v, want a connect timeout", addr, err)
			}
		})
	}
}

// TestLastFINsLeave: connections that a pod closes just before its
// sandbox goes end for their clients with a FIN, never a hang: the
// teardown lets the FINs out first.
func TestLastFINsLeave(t *testing.T) {
	nw := newNetwork(t, 2)
	const conns = 100
	// ":8080" takes IPv4 connections on IPv6 sockets, as a Go server's
	// listener does.
	for round, address := range []string{"0.0.0.0:8080", ":8080", "0.0.0.0:8080", ":8080"} {
		s, ns := sandbox(t, nw.Nodes()[0])
		ln, err := ns.Listen("tcp", address)
		if err != nil {
			t.Fatal(err)
		}
		var clients, servers []net.Conn
		for range conns {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := nw.Nodes()[1].DialContext(ctx, "tcp", netip.AddrPortFrom(s.IP(), 8080).String())
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			clients, servers = append(clients, c), append(servers, sc)
		}
		for _, sc := range servers {
			sc.Close()
		}
		ln.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range clients {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
			if !errors.Is(err, io.EOF) {
				t.Fatalf("round %d, connection %d: the client's read after the pod closed its connection and went: %v, want EOF", round, i, err)
			}
		}
	}
}

func TestStartRunsInTheSandbox(t *testing.T) {
	nw := newNetwork(t, 1)
	s, ns := sandbox(t, nw.Nodes()[0])
	var st unix.Stat_t
	if err := unix.Fstat(ns.FD(), &st); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("readlink", "/proc/self/ns/net")
	var out strings.Builder
	cmd.Stdout = &out
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("net:[%d]", st.Ino); strings.TrimSpace(out.String()) != want {
		t.Errorf("the process's network namespace is %s, want the sandbox's %s", out.String(), want)
	}
}

func TestNodeSysctlsStayInTheNode(t *testing.T) {
	before, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Skip(err)
	}
	nw := newNetwork(t, 1)
	var inNode []byte
	nw.Nodes()[0].Netns().Do(func() { inNode, err = os.ReadFile("/proc/sys/net/ipv4/ip_forward") })
	if err != nil || strings.TrimSpace(string(inNode)) != "1" {
		t.Errorf("node's ip_forward: %q, %v; want 1", inNode, err)
	}
	after, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if string(after) != string(before) {
		t.Errorf("the machine's ip_forward went from %q to %q", before, after)
	}
}

func TestNothingLeftBehind(t *testing.T) {
	before := podnettest.NetworkState(t)
	socketsBefore := openSockets(t)
	nw, err := New(Config{Nodes: 2})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no network namespaces here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var inodes []uint64
	for _, n := range nw.Nodes() {
		s, err := n.NewSandbox()
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		unix.Fstat(s.(*netnsSandbox).ns.FD(), &st)
		inodes = append(inodes, st.Ino)
		// A dial takes one of a batch of sockets made ahead, which
		// would hold the namespace if Close left the rest open.
		if c, err := s.DialContext(context.Background(), "tcp", "127.0.0.1:1"); err == nil {
			c.Close()
		}
	}
	if during := podnettest.NetworkState(t); !slices.Equal(during, before) {
		t.Errorf("the machine's network changed while the cluster's ran:\nbefore %q\nduring %q", before, during)
	}
	if err := nw.Close(); err != nil {
		t.Fatal(err)
	}
	if after := podnettest.NetworkState(t); !slices.Equal(after, before) {
		t.Errorf("the machine's network changed:\nbefore %q\nafter  %q", before, after)
	}
	if after := openSockets(t); after != socketsBefore {
		t.Errorf("%d sockets open after Close, %d before New", after, socketsBefore)
	}
	// No thread of this process is in a namespace of the network.
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		link, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue
		}
		for _, ino := range inodes {
			if link == fmt.Sprintf("net:[%d]", ino) {
				t.Errorf("thread %s is still in a sandbox's namespace %s", task.Name(), link)
			}
		}
	}
}

// openSockets returns how many sockets the test process has open.
func openSockets(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

func TestAllocatorGoesRound(t *testing.T) {
	a := newAllocator(netip.MustParsePrefix("10.244.1.0/29"), netip.MustParseAddr("10.244.1.1"))
	var got []string
	for range 5 {
		ip, err := a.take()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	if want := []string{"10.244.1.2", "10.244.1.3", "10.244.1.4", "10.244.1.5", "10.244.1.6"}; !slices.Equal(got, want) {
		t.Errorf("took %v, want %v", got, want)
	}
	if ip, err := a.take(); err == nil {
		t.Errorf("took %s from a full range", ip)
	}
	a.free(netip.MustParseAddr("10.244.1.3"))
	if ip, err := a.take(); err != nil || ip.String() != "10.244.1.3" {
		t.Errorf("after a free: %s, %v; want 10.244.1.3", ip, err)
	}
}

// TestFirstConnectionsArePrompt: a new network carries the first packets
// between its nodes and pods at once. A link that the kernel had not
// activated yet dropped the first ARP request of a node, and its first
// connection to another node waited for the second, a second later (ARP's
// retransmit time), far longer than a connect takes even on a loaded
// machine.
func TestFirstConnectionsArePrompt(t *testing.T) {
	nw := newNetwork(t, 3)
	var to []netip.AddrPort
	for _, n := range nw.Nodes()[1:] {
		ln, err := n.Netns().Listen("tcp", ":8080")
		if err != nil {
			t.Fatal(err)
		}
		serve(t, ln, "node")
		s, ns := sandbox(t, n)
		ln, err = ns.Listen("tcp", ":8080")
		if err != nil {
			t.Fatal(err)
		}
		serve(t, ln, "pod")
		to = append(to, netip.AddrPortFrom(n.IP(), 8080), netip.AddrPortFrom(s.IP(), 8080))
	}
	for _, addr := range to {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		c, err := nw.Nodes()[0].DialContext(ctx, "tcp", addr.String())
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if took > 700*time.Millisecond {
			t.Errorf("the first connection from node 1 to %s took %v", addr, took)
		}
	}
}

// TestUnsupportedWithoutPrivilege: a process without CAP_NET_ADMIN (here
// the test itself, run again as user nobody) gets ErrUnsupported, the
// error the embedded cluster falls back to the loopback range on.
func TestUnsupportedWithoutPrivilege(t *testing.T) {
	if os.Getenv("PODNET_UNPRIVILEGED") == "1" {
		_, err := New(Config{Nodes: 1})
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("New() as user %d: %v, want ErrUnsupported", os.Getuid(), err)
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("runs itself again as user nobody, which needs root")
	}
	// The test binary, where user nobody can run it.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "podnet.test")
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyPath, "-test.run=^TestUnsupportedWithoutPrivilege$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PODNET_UNPRIVILEGED=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as user nobody: %v\n%s", err, out)
	}
}

// TestPodsReachOutside: a listener on the switch's host, outside every
// node, answers the pods of every node, and the nodes.
func TestPodsReachOutside(t *testing.T) {
	nw := newNetwork(t, 2)
	ln, err := nw.ListenOutside(0)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, "outside")
	for _, n := range nw.Nodes() {
		s, _ := sandbox(t, n)
		for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){"pod": s.DialContext, "node": n.DialContext} {
			if got, err := get(dial, ln.Addr().String()); err != nil || got != "outside" {
				t.Errorf("%s of %s to %s: %q, %v", name, n.IP(), ln.Addr(), got, err)
			}
		}
	}
}

// TestClosedIsClosed: a closed namespace refuses what would run in it, and
// a network closes once however often it is closed.
func TestClosedIsClosed(t *testing.T) {
	nw, err := New(Config{Nodes: 1})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no network namespaces here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := nw.Nodes()[0].NewSandbox()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(exec.Command("true")); !errors.Is(err, ErrClosed) {
		t.Errorf("Start in a closed sandbox: %v, want ErrClosed", err)
	}
	if _, err := s.DialContext(context.Background(), "tcp", "10.244.1.9:80"); !errors.Is(err, ErrClosed) {
		t.Errorf("DialContext from a closed sandbox: %v, want ErrClosed", err)
	}
	for range 2 {
		if err := nw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nw.Nodes()[0].Netns().Listen("tcp", ":80"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen in a closed node: %v, want ErrClosed", err)
	}
}

// TestGatewayStaysAsSandboxesGo: the node's bridge keeps its hardware
// address as sandboxes come and go, so that the pods' gateway never
// changes under them: a pod on node-1 reaches one on node-2, through it,
// at once after each of its neighbours' sandboxes went.
func TestGatewayStaysAsSandboxesGo(t *testing.T) {
	nw := newNetwork(t, 2)
	n1 := nw.Nodes()[0]
	server, sns := sandbox(t, nw.Nodes()[1])
	ln, err := sns.Listen("tcp", "0.0.0.0:8080")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, "server")
	addr := netip.AddrPortFrom(server.IP(), 8080).String()
	client, _ := sandbox(t, n1)
	var neighbours []*netnsSandbox
	for range 6 {
		s, _ := sandbox(t, n1)
		neighbours = append(neighbours, s)
	}
	mac := func() string {
		br, err := n1.nl.LinkByName(bridgeName)
		if err != nil {
			t.Fatal(err)
		}
		return br.Attrs().HardwareAddr.String()
	}
	want := bridgeMAC(1).String()
	for i, s := range neighbours {
		if got, err := get(client.ns.DialContext, addr); err != nil || got != "server" {
			t.Fatalf("after %d sandboxes went: %q, %v; want the server's answer", i, got, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := mac(); got != want {
			t.Fatalf("after %d sandboxes went, the bridge's address is %s, want %s", i+1, got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := client.ns.DialContext(ctx, "tcp", addr)
		cancel()
		if err != nil {
			t.Fatalf("after %d sandboxes went: %v; want a prompt connect", i+1, err)
		}
		c.Close()
	}
}
