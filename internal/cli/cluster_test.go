package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/hostcluster"
)

// TestClusterUsage gives up, down and status invalid command lines: each
// is a usage error, and none writes anything in the state directory.
func TestClusterUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no subcommand", []string{"cluster"}, "want a subcommand: up, down or status"},
		{"unknown subcommand", []string{"cluster", "start"}, `unknown command "start" for "closingtime cluster"`},
		{"no nodes", []string{"cluster", "up", "--nodes", "0"}, "--nodes 0: want at least 1"},
		{"other version", []string{"cluster", "up", "--kubernetes-version", "1.36.0"},
			"--kubernetes-version 1.36.0 is not supported: closingtime builds Kubernetes " + controlplane.KubernetesVersion + " only"},
		{"image command without command", []string{"cluster", "up", "--image-command", "shop:1.4"}, `--image-command "shop:1.4"`},
		{"argument", []string{"cluster", "up", "now"}, "unknown command"},
		{"unknown flag", []string{"cluster", "down", "--force"}, "unknown flag: --force"},
		{"bad output", []string{"cluster", "status", "-o", "yaml"}, `invalid --output "yaml"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "state")
			status, stdout, stderr := runCLI(context.Background(), append(tt.args, "--state-dir", dir)...)
			if status != ExitUsage || !strings.Contains(stderr, tt.wantErr) || stdout != "" {
				t.Errorf("exit status %d, stderr %q, stdout %q; want %d and an error with %q", status, stderr, stdout, ExitUsage, tt.wantErr)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state directory after a usage error: %v; want none", err)
			}
		})
	}
}

// TestClusterUpDown brings a cluster of two nodes up, checks that a second
// up is idempotent and that one asking for another cluster fails, that
// status shows both nodes Ready, and that a Deployment of closingtime
// serve pods applied through the API server gets Running and Ready pods,
// which a NodePort Service serves to clients of this machine on
// 127.0.0.1:nodePort, as status lists it; then that down stops it and
// leaves no process, no listener and no state behind.
func TestClusterUpDown(t *testing.T) {
	dir := clusterTestDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Two ups at once: one starts the cluster, the other waits for it and
	// finds it up.
	type result struct {
		status         int
		stdout, stderr string
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			var r result
			r.status, r.stdout, r.stderr = runCLI(ctx, "cluster", "up", "--state-dir", dir)
			results <- r
		}()
	}
	first, second := <-results, <-results
	if strings.Contains(first.stdout, "already up") {
		first, second = second, first
	}
	if first.status != ExitOK || second.status != ExitOK {
		t.Fatalf("up twice at once: exit %d and %d\n%s%s\n%s%s", first.status, second.status, first.stderr, first.stdout, second.stderr, second.stdout)
	}
	st := clusterTestStatus(t, ctx, dir)
	if !strings.Contains(first.stdout, "export KUBECONFIG="+st.Kubeconfig) || !strings.Contains(first.stdout, "2 nodes ready") {
		t.Errorf("up printed:\n%s", first.stdout)
	}
	if !strings.Contains(second.stdout, "already up") || !strings.Contains(second.stdout, "daemon pid "+strconv.Itoa(st.PID)) {
		t.Errorf("the other up printed:\n%s", second.stdout)
	}
	t.Logf("up took:\n%s", first.stderr)

	status, stdout, stderr := runCLI(ctx, "cluster", "up", "--state-dir", dir, "--nodes", "2")
	if status != ExitOK || !strings.Contains(stdout, "already up") {
		t.Errorf("second up: exit %d, stdout %q, stderr %q; want 0 and already up", status, stdout, stderr)
	}
	if again := clusterTestStatus(t, ctx, dir); again.PID != st.PID {
		t.Errorf("second up: daemon pid %d, want %d still", again.PID, st.PID)
	}
	status, _, stderr = runCLI(ctx, "cluster", "up", "--state-dir", dir, "--nodes", "3")
	if status != ExitError || !strings.Contains(stderr, "a cluster of 2 nodes is up") {
		t.Errorf("up --nodes 3: exit %d, stderr %q; want %d and the running cluster named", status, stderr, ExitError)
	}

	cs := clusterTestStatus(t, ctx, dir)
	if !cs.Up || cs.PID != st.PID || cs.Server != st.Server || len(cs.Nodes) != 2 {
		t.Fatalf("status %+v; want up, pid %d, server %s, 2 nodes", cs, st.PID, st.Server)
	}
	for _, n := range cs.Nodes {
		if n.Ready != corev1.ConditionTrue {
			t.Errorf("node %s: Ready %s", n.Name, n.Ready)
		}
	}

	client := controlplanetest.ClientOf(t, st.Kubeconfig)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](3), Containers: []corev1.Container{{
					Name: "app", Image: "closingtime", Args: []string{"serve"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env: []corev1.EnvVar{
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				}}}}},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each round lists the pods once; the loop ends when both are Running
	// and Ready.
	for {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && p.Spec.NodeName != "" && p.Status.PodIP != "" {
				ready++
			}
		}
		if ready == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of 2 pods Running and Ready: %+v", ready, pods.Items)
		case <-time.After(200 * time.Millisecond):
		}
	}
	cs = clusterTestStatus(t, ctx, dir)
	pods := 0
	for _, n := range cs.Nodes {
		pods += n.Pods
	}
	if pods != 2 {
		t.Errorf("status counts %d pods on the nodes, want 2: %+v", pods, cs.Nodes)
	}

	// A NodePort Service: GET / through 127.0.0.1:nodePort reaches a pod.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	svc, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	url := "http://127.0.0.1:" + strconv.Itoa(int(nodePort)) + "/"
	httpClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	// One request per round, until one is answered; bounded by ctx.
	for {
		resp, err := httpClient.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s through the node port of Service default/web: %v", url, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	cs = clusterTestStatus(t, ctx, dir)
	want := hostcluster.NodePort{Namespace: "default", Name: "web", Port: 80, NodePort: nodePort, Address: "127.0.0.1:" + strconv.Itoa(int(nodePort))}
	if len(cs.NodePorts) != 1 || cs.NodePorts[0] != want {
		t.Errorf("status lists node ports %+v, want %+v", cs.NodePorts, want)
	}
	if status, stdout, _ := runCLI(ctx, "cluster", "status", "--state-dir", dir); status != ExitOK ||
		!regexp.MustCompile(`default/web\s+80\s+→\s+127\.0\.0\.1:`+strconv.Itoa(int(nodePort))).MatchString(stdout) {
		t.Errorf("status: exit %d, output:\n%s\nwant default/web 80 → 127.0.0.1:%d", status, stdout, nodePort)
	}

	// The scan must see the pods' processes, or finding none after down
	// would prove nothing. A container may be between two runs (a restart
	// after an exit): one scan per round, bounded by ctx; a slow round says
	// why in the log.
	for scans := 1; ; scans++ {
		left := clusterProcesses(t, dir, st.PID)
		if len(left) >= 3+2 {
			break
		}
		pods, _ := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if scans == 1 || ctx.Err() != nil {
			t.Logf("scan %d: %d processes of the cluster (%v); the pods' statuses: %+v", scans, len(left), left, podStatuses(pods))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d processes of the cluster found while it runs; want the daemon, the control plane and the pods", len(left))
		case <-time.After(200 * time.Millisecond):
		}
	}

	status, stdout, stderr = runCLI(ctx, "cluster", "down", "--state-dir", dir)
	if status != ExitOK || !strings.Contains(stdout, "no process of the cluster is left") {
		t.Fatalf("down: exit %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	if left := clusterProcesses(t, dir, st.PID); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after down: %v; want it removed", err)
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(int(nodePort)), 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("node port %d after down: %v, want connection refused", nodePort, err)
	}
	status, stdout, _ = runCLI(ctx, "cluster", "down", "--state-dir", dir)
	if status != ExitOK || !strings.Contains(stdout, "no cluster is up") {
		t.Errorf("second down: exit %d, stdout %q; want 0 and no cluster", status, stdout)
	}
	if cs := clusterTestStatus(t, ctx, dir); cs.Up {
		t.Errorf("status after down: %+v", cs)
	}
}

// TestClusterStaleState kills the daemon with SIGKILL: its control plane
// dies with it, and the next up reports the stale state in one line,
// clears it and starts a new cluster.
func TestClusterStaleState(t *testing.T) {
	dir := clusterTestDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if status, stdout, stderr := runCLI(ctx, "cluster", "up", "--state-dir", dir, "--nodes", "1"); status != ExitOK {
		t.Fatalf("up: exit %d\n%s%s", status, stderr, stdout)
	}
	st := clusterTestStatus(t, ctx, dir)
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The control plane and the pods die with the daemon (their
	// parent-death signal is SIGKILL), a moment after it. One scan per
	// round, for at most 10 s.
	for deadline := time.Now().Add(10 * time.Second); len(clusterProcesses(t, dir, st.PID)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("processes left after the daemon was killed: %v", clusterProcesses(t, dir, st.PID))
			break
		}
	}
	status, stdout, stderr := runCLI(ctx, "cluster", "up", "--state-dir", dir, "--nodes", "1")
	if status != ExitOK {
		t.Fatalf("up after the crash: exit %d\n%s%s", status, stderr, stdout)
	}
	if want := "(pid " + strconv.Itoa(st.PID) + ") is gone; clearing its state"; strings.Count(stderr, want) != 1 {
		t.Errorf("up after the crash: stderr does not report the stale state once (%q):\n%s", want, stderr)
	}
	again := clusterTestStatus(t, ctx, dir)
	if !again.Up || again.PID == st.PID || len(again.Nodes) != 1 || again.Nodes[0].Ready != corev1.ConditionTrue {
		t.Errorf("status after the new up: %+v; want a new daemon, not pid %d, and its node Ready", again, st.PID)
	}
	if status, stdout, stderr := runCLI(ctx, "cluster", "down", "--state-dir", dir); status != ExitOK {
		t.Fatalf("down: exit %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	if left := clusterProcesses(t, dir, again.PID); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
}

// TestClusterUpFails asks for more nodes than a cluster's pod range has
// room for: the daemon starts the control plane, then fails; up reports
// the daemon's log and leaves no process and no state behind.
func TestClusterUpFails(t *testing.T) {
	dir := clusterTestDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	status, stdout, stderr := runCLI(ctx, "cluster", "up", "--state-dir", dir, "--nodes", "300")
	if status != ExitError || stdout != "" || !strings.Contains(stderr, "before the cluster was ready; the daemon's log ends:") ||
		!strings.Contains(stderr, "300 nodes") {
		t.Fatalf("up --nodes 300: exit %d, stdout %q, stderr:\n%s\nwant %d and the daemon's error", status, stdout, stderr, ExitError)
	}
	if left := clusterProcesses(t, dir, -1); len(left) > 0 {
		t.Errorf("processes left after the failed up: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after the failed up: %v; want it removed", err)
	}
}

// clusterTestDir returns a state directory for a test that runs a
// cluster, skipping the test where the control plane cannot be built. The
// daemon that up starts is this test binary, which runs the command line
// because of runAsCommand (TestMain). The cluster is stopped at the end
// of the test if the test did not stop it.
func clusterTestDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real control plane")
	}
	cache, err := controlplane.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.Build(context.Background(), cache); errors.Is(err, controlplane.ErrUnavailable) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Setenv(runAsCommand, "1")
	dir := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() {
		if _, err := hostcluster.Down(hostcluster.Config{StateDir: dir}); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	return dir
}

// clusterTestStatus runs `cluster status -o json` on dir.
func clusterTestStatus(t *testing.T, ctx context.Context, dir string) hostcluster.Report {
	t.Helper()
	status, stdout, stderr := runCLI(ctx, "cluster", "status", "--state-dir", dir, "-o", "json")
	if status != ExitOK {
		t.Fatalf("status: exit %d: %s", status, stderr)
	}
	var cs hostcluster.Report
	if err := json.Unmarshal([]byte(stdout), &cs); err != nil {
		t.Fatalf("status: %v\n%s", err, stdout)
	}
	return cs
}

// clusterProcesses returns the processes, other than this one, that have
// not exited and belong to the cluster of state directory dir and daemon
// sid (-1 if unknown): in its session, or running this test binary (the daemon and the
// pods), or with dir in their command line (the control plane).
func clusterProcesses(t *testing.T, dir string, sid int) []string {
	t.Helper()
	exe, err := filepath.EvalSymlinks(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range hostcluster.Processes() {
		if p.PID == os.Getpid() {
			continue
		}
		proc := filepath.Join("/proc", strconv.Itoa(p.PID))
		cmdline, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
		target, _ := os.Readlink(filepath.Join(proc, "exe"))
		if p.Session == sid || target == exe || strings.Contains(string(cmdline), dir) {
			found = append(found, strconv.Itoa(p.PID)+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

// podStatuses returns the phase and container statuses of each pod of
// list, for a test's log.
func podStatuses(list *corev1.PodList) []string {
	if list == nil {
		return nil
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, fmt.Sprintf("%s %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses))
	}
	return out
}

// podReady reports whether pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
