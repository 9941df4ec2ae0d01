package nodeagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// TestNodePorts drives the node ports of a real API server's Services,
// whose EndpointSlices the test writes, pointing at listeners of its own:
// a NodePort Service answers on 127.0.0.1:nodePort through the view of
// node-a, from an endpoint on another node although its
// internalTrafficPolicy is Local (which holds for its cluster IP only); a
// Service whose node port another program holds gets a FailedToListen
// Warning Event and breaks no other Service, and is served once the port
// is free and the Service changes; a changed node port moves, a
// connection made through the old one carries on; a deleted Service's
// port refuses; Close leaves no listener and no goroutine.
func TestNodePorts(t *testing.T) {
	client := controlplanetest.Client(t)
	ctx := context.Background()
	ns := createNamespace(t, client, "nodeports-")
	before := agentGoroutines()
	if len(before) > 0 {
		t.Fatalf("goroutines of agents before the test:\n%s", strings.Join(before, "\n\n"))
	}
	a, b := newNamedBackend(t, "127.75.0.1", "a"), newNamedBackend(t, "127.75.0.2", "b")
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}

	// web: every connection of its cluster IP would stay on node-a, which
	// has no endpoint; its node port goes to the endpoint on node-b.
	web := nodePortService("web", freeNodePort(t))
	web.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	web = createNodePortService(t, client, ns, web)
	webSlice := endpointSlice(ns, "web-a", a, ready)
	webSlice.Endpoints[0].NodeName = ptr.To("node-b")
	// taken: its node port is held by a listener of the test.
	held, err := net.Listen("tcp", net.JoinHostPort(NodeInternalIP, strconv.Itoa(freeNodePort(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { held.Close() }()
	taken := createNodePortService(t, client, ns, nodePortService("taken", held.Addr().(*net.TCPAddr).Port))
	takenPort := taken.Spec.Ports[0].NodePort
	if int(takenPort) != held.Addr().(*net.TCPAddr).Port {
		// The API server gave it another port: hold that one.
		held.Close()
		if held, err = net.Listen("tcp", net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(takenPort)))); err != nil {
			t.Fatal(err)
		}
	}
	takenSlice := endpointSlice(ns, "taken-b", b, ready)
	takenSlice.Labels[discoveryv1.LabelServiceName] = "taken"
	for _, s := range []*discoveryv1.EndpointSlice{webSlice, takenSlice} {
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var log syncLog
	startCtx, cancel := context.WithTimeout(ctx, routesWait)
	n, err := StartNodePorts(startCtx, NodePortsConfig{Client: client, NodeName: "node-a", Logf: log.printf})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// The node ports of the Services already there are listened on by the
	// time StartNodePorts returns.
	if conn, err := net.Dial("tcp", net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(web.Spec.Ports[0].NodePort)))); err != nil {
		t.Errorf("node port of web as StartNodePorts returned: %v, want it listened on", err)
	} else {
		conn.Close()
	}
	webURL := "http://" + net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(web.Spec.Ports[0].NodePort))) + "/"
	waitAnswers(t, webURL, "a")
	if seen := reached(t, (&net.Dialer{}).DialContext, webURL, 10); seen["a"] != 10 {
		t.Errorf("through node port %d: requests reached %v, want a only", web.Spec.Ports[0].NodePort, seen)
	}
	// The cluster IP's rules, for contrast: internalTrafficPolicy Local
	// with no endpoint on node-a drops the connect.
	dialCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if conn, err := n.routes.DialContext(dialCtx, "tcp", "web."+ns+":80"); !errors.Is(err, context.DeadlineExceeded) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("dial of web's cluster port on node-a: %v, want a dropped connect", err)
	}
	cancel()

	// The taken port is reported, and retried when the Service changes.
	waitServiceEvent(t, client, ns, "taken", FailedToListen)
	if !strings.Contains(log.String(), fmt.Sprintf("node port %d of Service %s/taken (taken.%s:80) not served", takenPort, ns, ns)) {
		t.Errorf("log does not report the taken port %d:\n%s", takenPort, log.String())
	}
	held.Close()
	taken.Labels = map[string]string{"changed": "1"}
	if _, err := client.CoreV1().Services(ns).Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, "http://"+net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(takenPort)))+"/", "b")

	// A connection made through web's node port before it changes.
	kept, err := net.Dial("tcp", net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(web.Spec.Ports[0].NodePort))))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	keptReader := bufio.NewReader(kept)
	if got := getOn(t, kept, keptReader); got != "a" {
		t.Fatalf("GET on a kept connection: %q, want a", got)
	}
	oldPort := web.Spec.Ports[0].NodePort
	web, err = client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.Ports[0].NodePort = int32(freeNodePort(t))
	if web, err = client.CoreV1().Services(ns).Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, "http://"+net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(web.Spec.Ports[0].NodePort)))+"/", "a")
	waitRefused(t, oldPort)
	if got := getOn(t, kept, keptReader); got != "a" {
		t.Errorf("GET on the connection made through the old node port: %q, want a still", got)
	}

	// Deleted: the port refuses.
	if err := client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, web.Spec.Ports[0].NodePort)

	// Close: no listener, no goroutine; the kept connection is closed.
	n.Close()
	waitRefused(t, takenPort)
	kept.SetReadDeadline(time.Now().Add(routesWait))
	if _, err := keptReader.ReadByte(); err == nil {
		t.Errorf("the kept connection still reads after Close")
	}
	checkNoAgentGoroutines(t)
}

// TestNodesServeNodePorts: StartNodes with NodePorts serves a NodePort
// Service of `closingtime serve` pods on 127.0.0.1:nodePort, and Close
// leaves no listener and no goroutine.
func TestNodesServeNodePorts(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	cp := controlplanetest.Shared(t)
	startCtx, cancel := context.WithTimeout(context.Background(), waitLimit)
	nodes, err := StartNodes(startCtx, NodesConfig{Kubeconfig: cp.Kubeconfig, Nodes: 1, NodePorts: true, Logf: t.Logf,
		MinPropagationDelay: time.Millisecond, MaxPropagationDelay: time.Millisecond})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nodes.Close(context.Background())
		client.CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{})
		client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), "node-1", metav1.DeleteOptions{})
	})
	svc := serveService("web")
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = createNodePortService(t, client, ns, svc)
	create(t, client, ns, serveDeployment("web", 1))
	url := "http://" + net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort))) + "/"
	waitFor(t, "an answer on "+url, func() (bool, error) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	closeCtx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := nodes.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, svc.Spec.Ports[0].NodePort)
	checkNoAgentGoroutines(t)
}

// nodePortService returns a Service of type NodePort whose port 80, named
// http, has node port nodePort.
func nodePortService(name string, nodePort int) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), NodePort: int32(nodePort)}}}}
}

// freeNodePort returns a port of the API server's default node port range
// that nothing on this machine listens on now, so that the tests do not
// meet a node port of another cluster on the machine.
func freeNodePort(t *testing.T) int {
	t.Helper()
	// One port tried per round; bounded.
	for range 100 {
		port := 30000 + rand.IntN(2768)
		ln, err := net.Listen("tcp", net.JoinHostPort(NodeInternalIP, strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no free port in 30000-32767")
	return 0
}

// createNodePortService creates svc in ns; if the API server has
// allocated its node port (or the one it asked for) to another Service of
// the shared API server, or another program holds it, it tries again with
// another free port. It returns the Service as created.
func createNodePortService(t *testing.T, client kubernetes.Interface, ns string, svc *corev1.Service) *corev1.Service {
	t.Helper()
	// One attempt per round; bounded.
	for range 10 {
		created, err := client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
		if err == nil {
			return created
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
			t.Fatal(err)
		}
		svc.Spec.Ports[0].NodePort = int32(freeNodePort(t))
	}
	t.Fatalf("Service %s/%s: no free node port", ns, svc.Name)
	return nil
}

// waitAnswers waits until GET url is answered by the backend name.
func waitAnswers(t *testing.T, url, name string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	waitFor(t, url+" answered by "+name, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return err == nil && string(body) == name, nil
	})
}

// waitRefused waits until a connect to node port port is refused.
func waitRefused(t *testing.T, port int32) {
	t.Helper()
	addr := net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(port)))
	waitFor(t, addr+" refusing connections", func() (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			conn.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED), nil
	})
}

// getOn sends GET / on conn and returns the body of the answer that r,
// conn's reader, reads.
func getOn(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	conn.SetDeadline(time.Now().Add(routesWait))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// waitServiceEvent waits for an Event of reason about Service name of ns.
func waitServiceEvent(t *testing.T, client kubernetes.Interface, ns, name, reason string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a %s event about Service %s", reason, name), func() (bool, error) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
}

// checkNoAgentGoroutines fails the test if goroutines of the agents, the
// node ports, informers or event broadcasters are left, after giving
// those that were returning a moment.
func checkNoAgentGoroutines(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if left = agentGoroutines(); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// syncLog collects log lines; safe for concurrent use.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
