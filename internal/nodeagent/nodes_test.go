package nodeagent

import (
	"context"
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

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// TestNodesCloseLeavesNothing: StartNodes runs a scheduler and two agents,
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
	startCtx, cancel := context.WithTimeout(ctx, waitLimit)
	cp := controlplanetest.Shared(t)
	kubeletTLS, err := cp.KubeletTLS()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := StartNodes(startCtx, NodesConfig{Kubeconfig: cp.Kubeconfig, KubeletTLS: kubeletTLS})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nodes.Close(context.Background())
		for _, name := range []string{"node-1", "node-2"} {
			client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
			client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
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
		n, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s: podCIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			t.Fatal(err)
		}
		if onNode := PodIPOnNode(ip); !cidr.Contains(onNode) || cidr.Bits() != 24 {
			t.Errorf("pod %s at %s on node %s, whose pod range is %s: want an address of its /24", p.Name, onNode, n.Name, cidr)
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
		for _, v := range RoutingEnv(cp.Kubeconfig, p.Spec.NodeName, cluster.DefaultMinPropagationDelay, cluster.DefaultMaxPropagationDelay) {
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
