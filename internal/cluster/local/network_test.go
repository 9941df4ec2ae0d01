package local

import (
	"net/netip"
	"os/exec"
	"path/filepath"
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
