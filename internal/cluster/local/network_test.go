package local

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// namespacedCluster starts a cluster whose pods have network namespaces,
// or skips the test where the system allows none.
func namespacedCluster(t *testing.T) *Cluster {
	t.Helper()
	c := newCluster(t)
	skipUnlessNamespaced(t, c)
	return c
}

// skipUnlessNamespaced skips the test or benchmark unless c's pods have
// network namespaces.
func skipUnlessNamespaced(tb testing.TB, c *Cluster) {
	tb.Helper()
	if !c.Namespaced() {
		tb.Skipf("no network namespaces here (run as root, or with CAP_NET_ADMIN in a user namespace): %s", c.Network())
	}
}

// TestClusterServersBindEveryAddress: three replicas of a server that
// binds 0.0.0.0:8080, as most servers do, run side by side, each in its own
// network, and roll out under load. Where pods share the machine's
// network, all but one would exit with "address already in use".
func TestClusterServersBindEveryAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	servers := map[string][]string{"closingtime serve": {binary, "serve", "--listen=0.0.0.0:8080", "--work=10ms"}}
	if python, err := exec.LookPath("python3"); err == nil {
		servers["python3 http.server"] = []string{python, "-m", "http.server", "--bind", "0.0.0.0", "8080"}
	} else {
		t.Log("python3 is not installed: only closingtime serve runs")
	}
	for name, command := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := namespacedCluster(t)
			d, svc := webDeployment(3, 2)
			d.Spec.Strategy = rollingUpdate("1", "0")
			ctr := &d.Spec.Template.Spec.Containers[0]
			ctr.Command, ctr.Args, ctr.WorkingDir = command, nil, t.TempDir()
			ctr.ReadinessProbe = httpProbe("/", 3)
			tl := underLoad(t, c, "node-1", []runtime.Object{d, svc}, 20*time.Millisecond, 1, 0)
			if tl.ok == 0 {
				t.Errorf("no request succeeded through the rollout")
			}
			ips := map[string]bool{}
			for _, p := range activePods(c) {
				ips[p.Status.PodIP] = true
				if !c.PodCIDR().Contains(netip.MustParseAddr(p.Status.PodIP)) {
					t.Errorf("pod %s has address %s, outside the cluster's %s", p.Name, p.Status.PodIP, c.PodCIDR())
				}
			}
			if len(ips) != 3 {
				t.Errorf("%d pods with %d addresses after the rollout, want 3 pods with one each", len(activePods(c)), len(ips))
			}
		})
	}
}

// TestClusterSidecarOnLocalhost: a pod's first container, a proxy in front
// of its app, reaches the app, the pod's second container, on localhost;
// the app binds 127.0.0.1 only, which nothing outside the pod reaches.
func TestClusterSidecarOnLocalhost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3, which the proxy of this test is written in, is not installed")
	}
	t.Parallel()
	c := namespacedCluster(t)
	script, err := filepath.Abs("testdata/localproxy.py")
	if err != nil {
		t.Fatal(err)
	}
	d, svc := webDeployment(2, 2)
	app := d.Spec.Template.Spec.Containers[0]
	app.Name, app.Args, app.Ports = "app", []string{"--listen=127.0.0.1:9090"}, nil
	app.Command = []string{binary, "serve"}
	proxy := corev1.Container{Name: "proxy", Image: "proxy", Command: []string{python, script},
		Env:            []corev1.EnvVar{{Name: "UPSTREAM_PORT", Value: "9090"}},
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: httpProbe("/ready", 3)}
	d.Spec.Template.Spec.Containers = []corev1.Container{proxy, app}
	tl := underLoad(t, c, "node-2", []runtime.Object{d, svc}, 20*time.Millisecond, 1, 0)
	if tl.ok == 0 {
		t.Fatalf("no request through the proxy reached the app: %v", tl.firstOther)
	}
}

// TestClusterDialerNamesTheEndpoint: a connection through a Service's
// cluster IP, and a connect that fails there, say which endpoint the
// node's rules chose, as connection tracking has it.
func TestClusterDialerNamesTheEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c := namespacedCluster(t)
	d, svc := webDeployment(2, 2)
	rollout(t, c, []runtime.Object{d, svc}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := waitServing(ctx, c); err != nil {
		t.Fatal(err)
	}
	ips := podIPs(c)
	conn, err := c.DialContext(ctx, "tcp", "web.default:80")
	if err != nil {
		t.Fatal(err)
	}
	remote := conn.RemoteAddr().(*net.TCPAddr)
	conn.Close()
	if !ips[remote.IP.String()] || remote.Port != 8080 {
		t.Errorf("connection's remote address %s, want a pod's of %v, port 8080", remote, ips)
	}
}

// TestClusterDialerNamesTheRefuser: a refused connect through a Service's
// cluster IP names the endpoint that refused it.
func TestClusterDialerNamesTheRefuser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	t.Parallel()
	c := namespacedCluster(t)
	// Ready without a probe, and listening on another port than the
	// Service's.
	d, svc := webDeployment(2, 2)
	d.Spec.Template.Spec.Containers[0].Command = []string{binary, "serve", "--listen=0.0.0.0:9999"}
	rollout(t, c, []runtime.Object{d, svc}, 0)
	ips := podIPs(c)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// Until the node's view has the Service, its name is unknown; until
	// it has the endpoints, the Service rejects.
	for {
		conn, err := c.DialContext(ctx, "tcp", "web.default:80")
		if err == nil {
			conn.Close()
			t.Fatal("a connection to a Service whose pods do not listen on its target port")
		}
		var oe *net.OpError
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr):
		case !errors.As(err, &oe) || !errors.Is(err, syscall.ECONNREFUSED):
			t.Fatalf("dial: %v, want a refused *net.OpError", err)
		default:
			if a, ok := oe.Addr.(*net.TCPAddr); ok && ips[a.IP.String()] {
				if a.Port != 8080 {
					t.Errorf("refused by %s, want port 8080", a)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no refused connect names a pod of %v; the last: %v", ips, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestClusterKernelAffinityAndNotReady: through the kernel's rules, a
// Service of sessionAffinity ClientIP sends every connection of the
// dialer's client pod to one pod, and publishNotReadyAddresses makes
// pods that never pass their readiness probe reachable (E4, E9).
func TestClusterKernelAffinityAndNotReady(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts")
	}
	t.Parallel()
	t.Run("ClientIP affinity", func(t *testing.T) {
		t.Parallel()
		c := namespacedCluster(t)
		d, svc := webDeployment(3, 2)
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		rollout(t, c, []runtime.Object{d, svc}, 0)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := waitServing(ctx, c); err != nil {
			t.Fatal(err)
		}
		pods := map[string]int{}
		for range 30 {
			pod, err := podVia(c.DialContext)
			if err != nil {
				t.Fatal(err)
			}
			pods[pod]++
		}
		if len(pods) != 1 {
			t.Errorf("30 connections of one client reached %v, want one pod", pods)
		}
	})
	t.Run("publishNotReadyAddresses", func(t *testing.T) {
		t.Parallel()
		c := namespacedCluster(t)
		d, svc := webDeployment(2, 2)
		d.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/never-ready", 1)
		svc.Spec.PublishNotReadyAddresses = true
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := c.Apply(ctx, []runtime.Object{d, svc}); err != nil {
			t.Fatal(err)
		}
		// No pod is ever ready; the Service answers all the same.
		if err := waitServing(ctx, c); err != nil {
			t.Fatalf("a Service that publishes not-ready addresses never answered: %v", err)
		}
		for _, p := range activePods(c) {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					t.Errorf("pod %s is ready, want none: its probe's path is not served", p.Name)
				}
			}
		}
	})
}

// podIPs returns the addresses of c's pods that are not terminating.
func podIPs(c *Cluster) map[string]bool {
	ips := map[string]bool{}
	for _, p := range activePods(c) {
		ips[p.Status.PodIP] = true
	}
	return ips
}
