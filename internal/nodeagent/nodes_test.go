package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/podnet/podnettest"
)

// TestNodesCloseLeavesNothing: StartNodes on the loopback model runs a
// scheduler and two agents,
// node-1 and node-2, which spread a Deployment's pods evenly, each pod on
// its node's /24; Close leaves no process of the pods, no listening pod
// address and no goroutine of the agents, the scheduler, their informers
// or their event broadcasters. The Nodes stay in the API.
func TestNodesCloseLeavesNothing(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	ctx := context.Background()
	before := agentGoroutines()
	if len(before) > 0 {
		t.Fatalf("goroutines of agents before the test:\n%s", strings.Join(before, "\n\n"))
	}
	nodes, err := startTwoNodes(t, client, local.NetworkLoopback)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(nodes.agents); got != 2 {
		t.Fatalf("%d agents, want 2", got)
	}

	create(t, client, ns, serveDeployment("web", 4))
	pods := waitPods(t, client, ns, "app=web", "4 pods Ready", func(pods []corev1.Pod) bool {
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		return len(pods) == 4 && ready == 4
	})
	perNode := map[string]int{}
	var pids []int
	var addrs []string
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		cidr := nodePodCIDR(t, client, p.Spec.NodeName)
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			t.Fatal(err)
		}
		if onNode := PodIPOnNode(ip); !cidr.Contains(onNode) || cidr.Bits() != 24 {
			t.Errorf("pod %s at %s on node %s, whose pod range is %s: want an address of its /24", p.Name, onNode, p.Spec.NodeName, cidr)
		} else {
			addrs = append(addrs, net.JoinHostPort(onNode.String(), "8080"))
		}
		id, ok := strings.CutPrefix(p.Status.ContainerStatuses[0].ContainerID, "local://")
		pid, err := strconv.Atoi(id)
		if !ok || err != nil {
			t.Fatalf("pod %s: container ID %q", p.Name, p.Status.ContainerStatuses[0].ContainerID)
		}
		pids = append(pids, pid)
	}
	if perNode["node-1"] != 2 || perNode["node-2"] != 2 {
		t.Errorf("pods per node %v, want 2 on each of node-1 and node-2", perNode)
	}
	// Each pod's process has its node's routing variables, and the API
	// server reads its log from its node's kubelet API.
	for i, p := range pods {
		environ, err := os.ReadFile("/proc/" + strconv.Itoa(pids[i]) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range RoutingEnv(controlplanetest.Shared(t).Kubeconfig, p.Spec.NodeName, cluster.DefaultMinPropagationDelay, cluster.DefaultMaxPropagationDelay) {
			if !slices.Contains(strings.Split(string(environ), "\x00"), v.Name+"="+v.Value) {
				t.Errorf("pod %s on %s: no %s=%s in its environment", p.Name, p.Spec.NodeName, v.Name, v.Value)
			}
		}
		logs, err := client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil || len(logs) == 0 {
			t.Errorf("log of pod %s through the API server: %q, %v; want its lines", p.Name, logs, err)
		}
	}

	closeCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := nodes.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		// Close reaps the processes: none is left, not even a zombie.
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d of a pod still there after Close", pid)
		}
	}
	for _, addr := range addrs {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Close", addr)
		}
	}
	checkNoAgentGoroutines(t)
	if _, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil {
		t.Errorf("node-1 after Close: %v, want the Node left in the API", err)
	}
}

// nodePodCIDR returns the pod range of node name, as its Node has it.
func nodePodCIDR(t *testing.T, client kubernetes.Interface, name string) netip.Prefix {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node %s: podCIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
	}
	return cidr
}

// startTwoNodes starts nodes node-1 and node-2 of the shared control
// plane, with their kubelet APIs, their pods networked by network; the
// test's end closes them and deletes their Nodes and Leases.
func startTwoNodes(t *testing.T, client kubernetes.Interface, network local.NetworkMode) (*Nodes, error) {
	t.Helper()
	cp := controlplanetest.Shared(t)
	kubeletTLS, err := cp.KubeletTLS()
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	nodes, err := StartNodes(startCtx, NodesConfig{Kubeconfig: cp.Kubeconfig, KubeletTLS: kubeletTLS, Network: network})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		nodes.Close(context.Background())
		for _, name := range []string{"node-1", "node-2"} {
			client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
			client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return nodes, nil
}

// agentGoroutines returns the stacks of the goroutines that run code of
// the agents, the kubelet, informers or event broadcasters: the
// goroutines of the test's own client are none of those.
func agentGoroutines() []string {
	var buf strings.Builder
	pprof.Lookup("goroutine").WriteTo(&buf, 2)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			own := (strings.Contains(line, "/internal/nodeagent/") || strings.Contains(line, "/internal/cluster/local/")) && !strings.Contains(line, "_test.go")
			if own || strings.Contains(line, "k8s.io/client-go/tools/cache.") || strings.Contains(line, "k8s.io/client-go/tools/record.") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestNodesPodNetwork: with network namespaces, StartNodes runs three
// replicas of a server that binds 0.0.0.0:8080 side by side, each at an
// address of its node's pod range, with the variables of its namespace's
// Service; a `closingtime load` pod reaches that Service by name through
// the relay to the API server and its node's kernel rules, each replica
// answers it, and the node's connection tracking names the pod each
// connection reached; and Close leaves the machine's network namespace as
// it found it, the pods' kubeconfig removed.
func TestNodesPodNetwork(t *testing.T) {
	before := podnettest.NetworkState(t)
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	ctx := context.Background()
	nodes, err := startTwoNodes(t, client, local.NetworkNamespaces)
	if errors.Is(err, podnet.ErrUnsupported) {
		t.Skipf("network namespaces: %v (run as root, or inside unshare --user --map-root-user --net)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := nodes.Network(); got != "netns" {
		t.Fatalf("Network() = %q, want netns", got)
	}
	podKubeconfig := nodes.apiRelay.kubeconfig

	create(t, client, ns, serveService("web"), serveDeployment("web", 3, corev1.EnvVar{Name: "CT_LISTEN", Value: "0.0.0.0:8080"}))
	pods := waitPods(t, client, ns, "app=web", "3 pods Ready", func(pods []corev1.Pod) bool {
		return len(pods) == 3 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !podReady(&p) })
	})
	svc, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names, ips := map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		names[p.Name], ips[p.Status.PodIP] = true, true
		cidr := nodePodCIDR(t, client, p.Spec.NodeName)
		if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || !cidr.Contains(ip) || ip.IsLoopback() {
			t.Errorf("pod %s at %q on node %s, whose pod range is %s: want an address of that range", p.Name, p.Status.PodIP, p.Spec.NodeName, cidr)
		}
		id, _ := strings.CutPrefix(p.Status.ContainerStatuses[0].ContainerID, "local://")
		environ, err := os.ReadFile("/proc/" + id + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		vars := strings.Split(string(environ), "\x00")
		for _, v := range []string{"WEB_SERVICE_HOST=" + svc.Spec.ClusterIP, cluster.PodKubeconfigEnv + "=" + podKubeconfig, NodeNetnsEnv + "="} {
			if !slices.ContainsFunc(vars, func(s string) bool { return s == v || strings.HasSuffix(v, "=") && strings.HasPrefix(s, v) }) {
				t.Errorf("pod %s: no %s in its environment", p.Name, v)
			}
		}
	}

	loader := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "load"}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "load", Image: "closingtime", Command: []string{binary,
			"load", "http://web." + ns + "/", "-o", "jsonl", "--wait-serving", "30s", "--duration", "2s", "--client", "new-conn=30"}}},
	}}
	create(t, client, ns, loader)
	waitPods(t, client, ns, "", "the load pod done", func(pods []corev1.Pod) bool {
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == "load" })
		if i >= 0 && pods[i].Status.Phase == corev1.PodFailed {
			logs, _ := client.CoreV1().Pods(ns).GetLogs("load", &corev1.PodLogOptions{}).DoRaw(ctx)
			t.Fatalf("the load pod failed:\n%s", logs)
		}
		return i >= 0 && pods[i].Status.Phase == corev1.PodSucceeded
	})
	logs, err := client.CoreV1().Pods(ns).GetLogs("load", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	results, report, err := load.ReadStream(bytes.NewReader(logs))
	if err != nil || report == nil {
		t.Fatalf("the load pod's log: report %v, %v:\n%s", report, err, logs)
	}
	served := map[string]bool{}
	for _, r := range results {
		if r.Class != load.OK {
			t.Errorf("request at %s: %s (%s), want ok", r.Time.Format(time.StampMilli), r.Class, r.Err)
		}
		served[r.Pod] = true
		if !ips[r.Addr.Addr().String()] {
			t.Errorf("request at %s reached %s, want the address of a pod: the node's connection tracking names it", r.Time.Format(time.StampMilli), r.Addr)
		}
	}
	if len(results) == 0 || !maps.Equal(served, names) {
		t.Errorf("%d requests served by %v, want some served by each of %v", len(results), slices.Sorted(maps.Keys(served)), slices.Sorted(maps.Keys(names)))
	}

	closeCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := nodes.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(podKubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pods' kubeconfig %s after Close: %v, want it removed", podKubeconfig, err)
	}
	if after := podnettest.NetworkState(t); !slices.Equal(after, before) {
		t.Errorf("the machine's network namespace after Close:\n%s\nbefore:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	checkNoAgentGoroutines(t)
}
