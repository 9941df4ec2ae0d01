package local

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/internal/proxy"
)

// requireNGINXEnv, set to 1, makes the tests that run Debian's NGINX fail
// where it is missing instead of skipping; CI sets it.
const requireNGINXEnv = "CLOSINGTIME_REQUIRE_NGINX"

// TestNGINXInFront: a real NGINX (Debian's nginx-light) in a pod of the
// cluster, proxying to a Service's cluster IP as an ingress without its
// own endpoint watch does, answers 502 at a readiness-only rollout of
// pods that exit on SIGTERM: the answer that closingtime proxy's edge
// gives for the same refusals and cuts, checked against the real proxy.
func TestNGINXInFront(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout behind NGINX")
	}
	nginx, err := exec.LookPath("nginx")
	if err != nil && os.Getenv(requireNGINXEnv) == "1" {
		t.Fatalf("no nginx in PATH, and %s=1", requireNGINXEnv)
	}
	if err != nil {
		t.Skipf("no nginx in PATH (apt-get install nginx-light; set %s=1 to fail instead)", requireNGINXEnv)
	}
	if err := podnet.Check(); err != nil {
		t.Skipf("NGINX reaches the Service by its cluster IP, which needs network namespaces: %v (run as root)", err)
	}
	t.Parallel()
	c := startCluster(t, Config{Network: NetworkNamespaces, MinPropagationDelay: 300 * time.Millisecond, MaxPropagationDelay: time.Second})
	web, webSvc := webDeployment(3, 10, "--shutdown=exit")
	web.Spec.Template.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 1)
	rollout(t, c, []runtime.Object{web, webSvc}, 0)
	clusterIP := c.servicesOf("default")[0].Spec.ClusterIP

	// NGINX as an ingress's data plane, without keep-alive to the
	// upstream: a connection per request, through the Service's rules.
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	err = os.WriteFile(conf, fmt.Appendf(nil, `user root;
daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log stderr notice;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen 8080;
    location / {
      proxy_pass http://%[2]s:80;
      add_header X-Upstream-Addr $upstream_addr always;
    }
  }
}
`, dir, clusterIP), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	replicas := int32(1)
	labels := map[string]string{"app": "nginx"}
	ingress := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "nginx", Image: "nginx", Command: []string{nginx, "-c", conf},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
						PeriodSeconds: 1},
				}}},
			},
		},
	}
	ingressSvc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitLimit)
	defer cancel()
	if err := c.Apply(ctx, []runtime.Object{ingress, ingressSvc}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "nginx"); err != nil {
		t.Fatal(err)
	}

	// 100 requests/s through NGINX, until the rollout is done.
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		reasons  = map[proxy.Reason]int{}
		upstream string
	)
	stop := getEvery(c, "http://nginx.default:80/work", 10*time.Millisecond, func(_ time.Time, resp *http.Response, body []byte, err error) {
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		statuses[resp.StatusCode]++
		if r := proxy.Recognize(resp.StatusCode, resp.Header, body); r != "" {
			reasons[r]++
		}
		upstream = resp.Header.Get(proxy.UpstreamAddrHeader)
	})
	time.Sleep(time.Second)
	if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stop()

	t.Logf("statuses %v, reasons %v", statuses, reasons)
	if statuses[http.StatusOK] == 0 {
		t.Fatalf("no request answered 200 through NGINX: statuses %v; its log:\n%s", statuses, nginxLog(c))
	}
	if statuses[http.StatusBadGateway] == 0 || reasons[proxy.UpstreamError] != statuses[http.StatusBadGateway] {
		t.Errorf("statuses %v, reasons %v: want 502s, each NGINX's own page", statuses, reasons)
	}
	if !strings.HasPrefix(upstream, clusterIP+":") {
		t.Errorf("X-Upstream-Addr %q, want the Service's %s", upstream, clusterIP)
	}
}

// nginxLog returns the log of the cluster's NGINX pod.
func nginxLog(c *Cluster) string {
	var b strings.Builder
	for _, p := range c.Pods("default") {
		if p.Labels["app"] != "nginx" {
			continue
		}
		lines, _ := c.Logs(context.Background(), "default", p.Name, "nginx")
		for _, l := range lines {
			b.WriteString(l.Text + "\n")
		}
	}
	return b.String()
}
