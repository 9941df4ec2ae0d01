package nodeagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// logWait bounds every wait of the kubelet API's tests; reaching it is a
// failure, so it is far longer than anything should take.
const logWait = 30 * time.Second

// newLogKubelet returns a kubelet of cfg's node on the pod range cidr,
// with a short restart back-off, closed when the test ends.
func newLogKubelet(t *testing.T, cfg local.KubeletConfig, cidr string) *local.Kubelet {
	t.Helper()
	cfg.PodCIDR, cfg.WorkingDir = netip.MustParsePrefix(cidr), t.TempDir()
	cfg.CrashLoopBackOff = cluster.CrashLoopBackOff{Initial: 100 * time.Millisecond, Max: time.Second}
	k, err := local.NewKubelet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeKubelet(t, k) })
	return k
}

// closeKubelet closes k, failing the test if it takes longer than logWait.
func closeKubelet(t *testing.T, k *local.Kubelet) {
	ctx, cancel := context.WithTimeout(context.Background(), logWait)
	defer cancel()
	if err := k.Close(ctx); err != nil {
		t.Errorf("close kubelet: %v", err)
	}
}

// shPod returns a pod of namespace on node whose container "app" runs
// script with /bin/sh, with DIR in its environment.
func shPod(namespace, name, node, dir, script string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name)},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: policy, AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
			Name: "app", Image: "sh", Command: []string{"/bin/sh", "-c", script},
			Env: []corev1.EnvVar{{Name: "DIR", Value: dir}},
		}}},
	}
}

// lineReader reads the lines of a response body as they come.
type lineReader struct {
	lines chan string
	err   chan error // the error that ended the body; nil at EOF
}

func readLines(body io.Reader) *lineReader {
	r := &lineReader{lines: make(chan string), err: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		r.err <- sc.Err()
	}()
	return r
}

// next returns the next line, failing the test if the body ends first or
// none comes within logWait.
func (r *lineReader) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-r.lines:
		return l
	case err := <-r.err:
		t.Fatalf("the log ended (%v) before the next line", err)
	case <-time.After(logWait):
		t.Fatalf("no line within %s", logWait)
	}
	return ""
}

// end fails the test unless the body ends, with no more lines, within
// logWait.
func (r *lineReader) end(t *testing.T) {
	t.Helper()
	select {
	case l := <-r.lines:
		t.Fatalf("line %q, want the end of the log", l)
	case err := <-r.err:
		if err != nil {
			t.Fatalf("the log ended with %v, want its end", err)
		}
	case <-time.After(logWait):
		t.Fatalf("the log did not end within %s", logWait)
	}
}

// getLog gets path of srv and returns the status and the body.
func getLog(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestKubeletHandlerFollow: a follower of the current instance gets each
// line as the container writes it, and its stream ends when that instance
// exits, while the container restarts. Then the previous instance's log
// is served with the kubelet's options, the current one without waiting
// for its end, and both stay readable once the pod is gone.
func TestKubeletHandlerFollow(t *testing.T) {
	dir := t.TempDir()
	k := newLogKubelet(t, local.KubeletConfig{NodeName: "kubeletapi-follow"}, "127.78.1.0/24")
	srv := httptest.NewServer(KubeletHandler(k))
	defer srv.Close()
	// The first instance writes a line, then its last line once the test
	// lets it, and exits 1; the second writes a line and sleeps.
	script := `if [ -e "$DIR/ran" ]; then echo second-run; exec sleep 1000; fi
touch "$DIR/ran"; echo first-run; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo first-end; exit 1`
	pod := shPod("kubeletapi", "restarts", "kubeletapi-follow", dir, script, corev1.RestartPolicyAlways)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := srv.Client().Get(srv.URL + "/containerLogs/kubeletapi/restarts/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("follow: HTTP %d, want 200", resp.StatusCode)
	}
	lines := readLines(resp.Body)
	if l := lines.next(t); l != "first-run" {
		t.Fatalf("first line %q, want first-run", l)
	}
	// The container is still running: its last line comes only now.
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := lines.next(t); l != "first-end" {
		t.Fatalf("second line %q, want first-end", l)
	}
	lines.end(t)

	// The container restarts after its back-off; the current instance is
	// then the second, served at once although it runs on.
	deadline := time.Now().Add(logWait)
	for {
		code, body := getLog(t, srv, "/containerLogs/kubeletapi/restarts/app")
		if code == http.StatusOK && body == "second-run\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("current log %d %q, want the second instance's line within %s", code, body, logWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkPrevious := func(t *testing.T) {
		t.Helper()
		for _, c := range []struct{ query, want string }{
			{"previous=true", "first-run\nfirst-end\n"},
			{"previous=true&tailLines=1", "first-end\n"},
			{"previous=true&tail=all", "first-run\nfirst-end\n"},
			{"previous=true&limitBytes=12", "first-run\nfi"},
			{"previous=true&sinceSeconds=3600", "first-run\nfirst-end\n"},
			{"previous=true&sinceTime=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), ""},
			{"previous=1&follow=true", "first-run\nfirst-end\n"},
			{"previous=false", "second-run\n"},
		} {
			if code, body := getLog(t, srv, "/containerLogs/kubeletapi/restarts/app?"+c.query); code != http.StatusOK || body != c.want {
				t.Errorf("?%s: %d %q, want 200 %q", c.query, code, body, c.want)
			}
		}
		code, body := getLog(t, srv, "/containerLogs/kubeletapi/restarts/app?previous=true&timestamps=true")
		lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		if code != http.StatusOK || len(lines) != 2 {
			t.Fatalf("timestamps: %d %q, want two lines", code, body)
		}
		for i, want := range []string{"first-run", "first-end"} {
			stamp, text, _ := strings.Cut(lines[i], " ")
			at, err := time.Parse(time.RFC3339Nano, stamp)
			if err != nil || len(stamp) != len(timestampFormat)-len("Z07:00")+1 || text != want || at.Before(start) || at.After(time.Now()) {
				t.Errorf("timestamps: line %q (%v), want %s after a fixed-width UTC time of this test", lines[i], err, want)
			}
		}
	}
	checkPrevious(t)
	// Once the kubelet is gone, and the pod with it, the logs stay.
	closeKubelet(t, k)
	checkPrevious(t)
}

// TestKubeletHandlerErrors: the kubelet's status codes for what it cannot
// serve, and its health.
func TestKubeletHandlerErrors(t *testing.T) {
	k := newLogKubelet(t, local.KubeletConfig{NodeName: "kubeletapi-errors"}, "127.78.2.0/24")
	srv := httptest.NewServer(KubeletHandler(k))
	defer srv.Close()
	pod := shPod("kubeletapi", "sleeps", "kubeletapi-errors", t.TempDir(), "echo up; exec sleep 1000", corev1.RestartPolicyAlways)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	// The container's first line tells that it runs.
	resp, err := srv.Client().Get(srv.URL + "/containerLogs/kubeletapi/sleeps/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	lines := readLines(resp.Body)
	if l := lines.next(t); l != "up" {
		t.Fatalf("first line %q, want up", l)
	}
	resp.Body.Close()
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/containerLogs/kubeletapi/nopod/app", http.StatusNotFound, `pod "nopod" does not exist`},
		{"/containerLogs/other/sleeps/app", http.StatusNotFound, `pod "sleeps" does not exist`},
		{"/containerLogs/kubeletapi/sleeps/nocontainer", http.StatusNotFound, `container "nocontainer" not found in pod "sleeps"`},
		{"/containerLogs/kubeletapi/sleeps/app?previous=true", http.StatusBadRequest, `previous terminated container "app" in pod "sleeps" not found`},
		{"/containerLogs/kubeletapi/sleeps/app?tailLines=x", http.StatusBadRequest, "Unable to decode query."},
		{"/containerLogs/kubeletapi/sleeps/app?tailLines=-1", http.StatusUnprocessableEntity, "Invalid request."},
		{"/containerLogs/kubeletapi/sleeps/app?sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z", http.StatusUnprocessableEntity, "Invalid request."},
		{"/containerLogs/kubeletapi/sleeps/app?stream=Stdout", http.StatusBadRequest, "PodLogsQuerySplitStreams"},
		{"/containerLogs/kubeletapi/sleeps/app?limitBytes=2", http.StatusOK, "up"},
		{"/healthz", http.StatusOK, "ok"},
	} {
		if code, body := getLog(t, srv, c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, code, body, c.code, c.want)
		}
	}
	resp, err = srv.Client().Post(srv.URL+"/containerLogs/kubeletapi/sleeps/app", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

// TestKubeletHandlerThroughAPIServer: the real API server reaches the
// handler, served with the control plane's kubelet TLS, on the Node's
// InternalIP and kubelet port, for a pod bound to the node: a follower of
// pods/log gets each line as the container writes it, and the stream
// ends when the container exits. The kubelet's errors come through, and
// a client without a certificate of the control plane's CA is refused.
func TestKubeletHandlerThroughAPIServer(t *testing.T) {
	cp := controlplanetest.Shared(t)
	client := controlplanetest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*logWait)
	defer cancel()
	const node = "kubeletapi-node"
	ns := createNamespace(t, client, "kubeletapi-")

	// A kubelet whose status reports go to the API, as a node's would.
	var mu sync.Mutex
	var patchErrs []error
	k := newLogKubelet(t, local.KubeletConfig{NodeName: node, StatusUpdated: func(pod *corev1.Pod) {
		data, err := json.Marshal(map[string]any{"status": pod.Status})
		if err == nil {
			_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, data, metav1.PatchOptions{}, "status")
		}
		if err != nil && ctx.Err() == nil {
			mu.Lock()
			patchErrs = append(patchErrs, err)
			mu.Unlock()
		}
	}}, "127.78.3.0/24")
	tlsConfig, err := cp.KubeletTLS()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(KubeletHandler(k))
	srv.TLS = tlsConfig
	// The refused client below makes the server log its handshake.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	// The node publishes its kubelet's address and port.
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A pod bound to the node, which its kubelet runs: it writes a line,
	// then its last line once the test lets it, and exits.
	dir := t.TempDir()
	script := `echo first; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo second`
	pod := shPod(ns, "logs", "", dir, script, corev1.RestartPolicyNever)
	pod.UID = ""
	waitServiceAccount(ctx, t, client, ns)
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod, err = client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}

	logs, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow the log through the API server: %v", err)
	}
	defer logs.Close()
	lines := readLines(logs)
	if l := lines.next(t); l != "first" {
		t.Fatalf("first line %q, want first", l)
	}
	// The container runs until the test lets it end, and the API shows it.
	for {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod phase %q in the API, want Running", p.Status.Phase)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The kubelet's error comes through with its status.
	_, err = client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Previous: true}).Stream(ctx)
	if want := `previous terminated container "app" in pod "logs" not found`; !apierrors.IsBadRequest(err) || err.Error() != want {
		t.Errorf("previous log through the API server: %v, want a bad request: %s", err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := lines.next(t); l != "second" {
		t.Fatalf("second line %q, want second", l)
	}
	lines.end(t)
	if body, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](1)}).DoRaw(ctx); err != nil || string(body) != "second\n" {
		t.Errorf("tail of the log through the API server: %q, %v; want %q", body, err, "second\n")
	}

	// Only a client certificate of the control plane's CA is let in.
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	admin, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "admin.crt"), filepath.Join(cp.Dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, certs := range [][]tls.Certificate{nil, {admin}} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		resp, err := c.Get(srv.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		if ok := err == nil && resp.StatusCode == http.StatusOK; ok != (certs != nil) {
			t.Errorf("GET /healthz with %d client certificates: %v; want it served only with the CA's", len(certs), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(patchErrs) > 0 {
		t.Errorf("pod status patches: %v", errors.Join(patchErrs...))
	}
}

// waitServiceAccount waits until the service account controller has made
// the default service account of ns, without which no pod is admitted.
func waitServiceAccount(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	// Each round asks once; the loop ends when it exists or ctx ends.
	for {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no default service account in %s: %v", ns, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
