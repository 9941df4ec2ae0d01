package local

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestClusterDelays: each of the delays between the components holds its
// step back by at least its length, and each step keeps its own event.
// With a kubelet slower to observe the deletion than the endpoints are to
// reach the nodes, every node stops routing to the pod before its
// termination starts (§10, T17, E5, E11).
func TestClusterDelays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pod through its deletion")
	}
	t.Parallel()
	const (
		observe     = 1500 * time.Millisecond
		statusPush  = 400 * time.Millisecond
		sync        = 200 * time.Millisecond
		propagation = 100 * time.Millisecond
	)
	c, err := New(Config{
		MinPropagationDelay: propagation,
		MaxPropagationDelay: propagation,
		KubeletObserveDelay: observe,
		StatusPushDelay:     statusPush,
		EndpointSyncDelay:   sync,
		Kubelet:             KubeletConfig{WorkingDir: t.TempDir()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	d, svc := webDeployment(1, 5, "--shutdown=exit")
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
	rollout(t, c, []runtime.Object{d, svc}, 0)
	pod := activePods(c)[0]
	ip := pod.Status.PodIP
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.DeletePod(ctx, "default", pod.Name, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, pod.Name)

	events := c.EventLog().Events()
	// at returns the first event after index from for which ok holds.
	at := func(from int, what string, ok func(e cluster.Event) bool) (cluster.Event, int) {
		t.Helper()
		for i := from; i < len(events); i++ {
			if ok(events[i]) {
				return events[i], i
			}
		}
		t.Fatalf("no %s after event %d; events: %s", what, from, describe(events))
		return cluster.Event{}, 0
	}
	podEvent := func(kind cluster.EventKind) func(cluster.Event) bool {
		return func(e cluster.Event) bool { return e.Kind == kind && e.Pod == pod.Name }
	}
	endpoints := func(kind cluster.EventKind, node, state string) func(cluster.Event) bool {
		return func(e cluster.Event) bool {
			return e.Kind == kind && (node == "" || e.Node == node) && strings.Contains(e.Endpoints.String(), ip+"="+state)
		}
	}
	after := func(what string, from, to cluster.Event, least time.Duration) {
		t.Helper()
		if got := to.Time.Sub(from.Time); got < least {
			t.Errorf("%s: %v, want at least %v", what, got, least)
		}
	}
	scheduled, i := at(0, "scheduling", podEvent(cluster.PodScheduled))
	started, _ := at(i, "start", podEvent(cluster.PodStarted))
	after("scheduled → kubelet admits", scheduled, started, observe)
	ready, i := at(i, "Ready", podEvent(cluster.PodReady))
	published, j := at(i, "ready endpoint published", endpoints(cluster.EndpointsPublished, "", "1/1/0"))
	after("Ready → endpoint published", ready, published, statusPush+sync)
	for _, node := range c.Nodes() {
		applied, _ := at(j, "ready endpoint applied on "+node, endpoints(cluster.EndpointsApplied, node, "1/1/0"))
		after("published → applied on "+node, published, applied, propagation)
	}

	// The test deletes the pod once the rollout saw it available, which
	// can be before its Ready endpoint is published.
	deleted, i := at(i, "deletion", podEvent(cluster.PodDeleted))
	terminating, _ := at(i, "termination", podEvent(cluster.PodTerminating))
	after("deleted → kubelet terminates", deleted, terminating, observe)
	published, _ = at(i, "terminating endpoint published", endpoints(cluster.EndpointsPublished, "", "0/1/1"))
	after("deleted → endpoint published", deleted, published, sync)
	for _, node := range c.Nodes() {
		applied, _ := at(i, "terminating endpoint applied on "+node, endpoints(cluster.EndpointsApplied, node, "0/1/1"))
		if !applied.Time.Before(terminating.Time) {
			t.Errorf("%s stopped routing to the pod at %v, not before its termination started at %v", node, applied.Time, terminating.Time)
		}
	}
}

// podVia sends GET /work through dial on a new connection and returns the
// name of the pod that served it.
func podVia(dial func(context.Context, string, string) (net.Conn, error)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", "web.default:80")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /work HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Header.Get("X-Pod-Name"), nil
}

// TestClusterDialerLocal: each node's dialer routes as that node does; with
// internalTrafficPolicy Local, a node's clients reach the pod on their own
// node only (E6).
func TestClusterDialerLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods")
	}
	t.Parallel()
	c := newCluster(t)
	if got := c.Nodes(); !slices.Equal(got, []string{"node-1", "node-2"}) {
		t.Errorf("Nodes() = %q, want node-1 and node-2", got)
	}
	if c.Dialer("node-9") != nil {
		t.Error("Dialer() of a node the cluster does not have is not nil")
	}
	d, svc := webDeployment(2, 2, "--shutdown=exit")
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	rollout(t, c, []runtime.Object{d, svc}, 0)
	onNode := map[string]string{}
	for _, p := range activePods(c) {
		onNode[p.Spec.NodeName] = p.Name
	}
	if len(onNode) != 2 {
		t.Fatalf("pods on %v, want one on each node", onNode)
	}
	for node, want := range onNode {
		dial := c.Dialer(node)
		// Wait for the node's view to take its pod in and the pod to
		// listen, then every connection stays on the node.
		deadline := time.Now().Add(waitLimit)
		for {
			if _, err := podVia(dial); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never served", node)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for range 20 {
			got, err := podVia(dial)
			if err != nil || got != want {
				t.Fatalf("a request from %s went to %q (%v), want %s, the pod on the node", node, got, err, want)
			}
		}
	}
}

// TestClusterHeadlessLookup: a headless Service's name looks up to its
// ready pods' addresses, and a connection to each address reaches that
// pod, on either network, as a client pod's lookup and connect do; a
// Service with a cluster IP, or none, does not look up.
func TestClusterHeadlessLookup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods")
	}
	t.Parallel()
	for _, mode := range []NetworkMode{NetworkLoopback, NetworkNamespaces} {
		t.Run(string(mode), func(t *testing.T) {
			network := mode
			if mode == NetworkNamespaces {
				network = NetworkAuto // namespaces where they can be made
			}
			c := startCluster(t, Config{Network: network, MinPropagationDelay: 100 * time.Millisecond, MaxPropagationDelay: 500 * time.Millisecond})
			if mode == NetworkNamespaces {
				skipUnlessNamespaced(t, c)
			}
			d, svc := webDeployment(2, 2, "--shutdown=exit")
			withIP := svc.DeepCopy()
			withIP.Name = "web-ip"
			svc.Spec.ClusterIP = corev1.ClusterIPNone
			rollout(t, c, []runtime.Object{d, svc, withIP}, 0)
			ctx := context.Background()
			// The node's view takes the Service and its endpoints in
			// after the propagation delay.
			var addrs []netip.Addr
			for deadline := time.Now().Add(waitLimit); len(addrs) < 2; time.Sleep(50 * time.Millisecond) {
				var err error
				addrs, err = c.LookupHost(ctx, "web.default.svc.cluster.local")
				if time.Now().After(deadline) {
					t.Fatalf("lookup: %v, %v; want the 2 pods' addresses", addrs, err)
				}
			}
			reached := map[string]bool{}
			for _, a := range addrs {
				pod, err := podVia(func(ctx context.Context, network, _ string) (net.Conn, error) {
					return c.DialContext(ctx, network, net.JoinHostPort(a.String(), "8080"))
				})
				if err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				reached[pod] = true
			}
			if len(reached) != 2 {
				t.Errorf("the addresses reached %v, want the 2 pods", reached)
			}
			for _, host := range []string{"nothere.default", "web-ip.default"} {
				if got, err := c.LookupHost(ctx, host); err == nil {
					t.Errorf("lookup of %s: %v, want an error", host, got)
				}
			}
		})
	}
}
