package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

func TestKubeUsage(t *testing.T) {
	t.Parallel()
	manifest := filepath.Join("testdata", "rollout-plain.yaml")
	testUsage(t, []usageCase{
		{"rollout no backend", []string{"rollout", "-f", manifest}, "give --local (the embedded cluster) or --kube"},
		{"rollout both backends", []string{"rollout", "-f", manifest, "--local", "--kube"}, "give --local (the embedded cluster) or --kube (the cluster of your kubeconfig), not both"},
		{"deployment without kube", []string{"rollout", "deploy/web", "--local"}, "deploy/web: a Deployment that runs already is rolled out with --kube; with --local, give -f FILE"},
		{"deployment not in the files", []string{"rollout", "deploy/web", "--kube", "-f", manifest}, `deploy/web: no Deployment "web" in ` + manifest},
		{"not a deployment", []string{"rollout", "--kube", "svc/web"}, `"svc/web": only a Deployment can be rolled out`},
		{"no name", []string{"rollout", "--kube", "deploy/"}, `"deploy/": want deploy/NAME`},
		{"two deployments", []string{"rollout", "--kube", "deploy/a", "deploy/b"}, "want at most one deploy/NAME"},
		{"kube flag without kube", []string{"rollout", "-f", manifest, "--local", "-n", "shop"}, "--namespace needs --kube"},
		{"image without kube", []string{"lab", "--image", "x:1"}, "lab: --image needs --kube"},
		{"no load pods", []string{"rollout", "--kube", "deploy/web", "--load-pods", "0"}, "invalid --load-pods 0: must be positive"},
		{"image command on kube", []string{"rollout", "--kube", "-f", manifest, "--image-command", "a=b"}, "--image-command is for --local"},
		{"lab parallel in one namespace", []string{"lab", "--kube", "-n", "shop", "--parallel", "2", "1-plain"}, "--parallel with -n"},
		{"lab nothing runnable", []string{"lab", "--kube", "probe-liveness-deep"}, "none of the scenarios can run on a real cluster"},
	})
}

// TestKubeClusterErrors: with no kubeconfig, or an API server that does
// not answer, the command fails at once and says so.
func TestKubeClusterErrors(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, unreachable); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	t.Setenv("HOME", dir)
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no kubeconfig", []string{"rollout", "--kube", "deploy/web"}, "kubeconfig: invalid configuration"},
		{"missing context", []string{"rollout", "--kube", "deploy/web", "--kubeconfig", unreachable, "--context", "other"}, `kubeconfig: context "other" does not exist`},
		{"unreachable", []string{"rollout", "--kube", "deploy/web", "--kubeconfig", unreachable}, "reach the API server at https://127.0.0.1:1"},
		{"lab unreachable", []string{"lab", "--kube", "1-plain", "--kubeconfig", unreachable, "--results", "", "--report", ""}, "reach the API server at https://127.0.0.1:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			status, _, stderr := runCLI(context.Background(), tt.args...)
			if status != ExitError || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit status %d, stderr %q; want %d and an error with %q", status, stderr, ExitError, tt.wantErr)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v to fail, want it at once", d)
			}
		})
	}
}

// startControlPlane builds (through the cache) and starts a real control
// plane for the test, or skips it under -short and where the control plane
// cannot be built.
func startControlPlane(t *testing.T) (*controlplane.ControlPlane, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Config{Binaries: controlplanetest.Binaries(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	rest, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cp, client
}

// playNode plays node-1 for every pod of the control plane, as a kubelet
// would, as far as a test without containers can: it binds each pod and
// reports a workload pod running and ready at an address of its own (a
// load pod stays Pending: nothing runs its container), and removes a
// deleted pod, as the kubelet does once its containers stopped.
func playNode(t *testing.T, client kubernetes.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	handled := map[string]bool{}
	ips := 0
	act := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		step := "start"
		switch {
		case p.DeletionTimestamp != nil:
			step = "stop"
		case p.Spec.NodeName != "":
			return
		}
		mu.Lock()
		first := !handled[string(p.UID)+step]
		handled[string(p.UID)+step] = true
		ips++
		ip := fmt.Sprintf("10.244.0.%d", ips)
		mu.Unlock()
		if !first {
			return
		}
		wg.Go(func() {
			var err error
			if step == "stop" {
				err = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			} else {
				err = startPod(ctx, client, p, ip)
			}
			// A pod whose namespace is being deleted cannot be bound.
			if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				t.Errorf("node: %s pod %s/%s: %v", step, p.Namespace, p.Name, err)
			}
		})
	}
	factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: act, UpdateFunc: func(_, obj any) { act(obj) }})
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		wg.Wait()
	})
}

// startPod binds p to node-1 and, unless it is a load pod, reports it
// running and ready at ip.
func startPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, ip string) error {
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	if err := client.CoreV1().Pods(p.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return err
	}
	if p.Labels[kube.LoadLabel] != "" {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Phase, cur.Status.PodIP, cur.Status.PodIPs, cur.Status.StartTime = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}, &now
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		c := cur.Spec.Containers[0]
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			ContainerID: "test://" + string(p.UID), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
		_, err = client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// command is a closingtime command line running as a process.
type command struct {
	cmd  *exec.Cmd
	out  string        // the file of its standard output and error
	done chan struct{} // closed when it exited
}

// log returns what the command wrote so far.
func (c *command) log() string {
	data, _ := os.ReadFile(c.out)
	return string(data)
}

// startCommand runs the closingtime command line args as a process (the
// test binary, see TestMain).
func startCommand(t *testing.T, args ...string) *command {
	dir := t.TempDir()
	c := &command{cmd: exec.Command(os.Args[0], args...), out: filepath.Join(dir, "output"), done: make(chan struct{})}
	out, err := os.Create(c.out)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c.cmd.Dir = dir
	c.cmd.Env = append(os.Environ(), runAsCommand+"=1")
	c.cmd.Stderr, c.cmd.Stdout = out, out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// loadPods waits until the control plane has n load pods, and returns
// them.
func loadPods(t *testing.T, client kubernetes.Interface, n int, c *command) []corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LoadLabel})
		if err == nil && len(list.Items) == n {
			return list.Items
		}
		select {
		case <-c.done:
			t.Fatalf("the command exited before it made %d load pods; its output:\n%s", n, c.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("load pods: %d, %v; want %d\ncommand output:\n%s", len(list.Items), err, n, c.log())
		}
	}
}

// interrupt sends cmd SIGINT and checks that it exits with status 130
// within a bound.
func interrupt(t *testing.T, c *command) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("no exit a minute after SIGINT; output:\n%s", c.log())
	}
	if code := c.cmd.ProcessState.ExitCode(); code != ExitInterrupted {
		t.Errorf("exit status %d after SIGINT, want %d; output:\n%s", code, ExitInterrupted, c.log())
	}
}

// goneLoadPods checks that no load pod is left, but those being deleted.
func goneLoadPods(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LoadLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("load pod %s/%s left after the run", p.Namespace, p.Name)
		}
	}
}

// TestRolloutKube runs `closingtime rollout --kube` as a process against
// a real control plane, the test playing the node: the pods of the
// workload run (as far as the API shows), the load pods never do. With -f,
// the manifests are applied into a namespace of closingtime's own with the
// image closingtime mapped to --image, and the load pods are created with
// their share of the traffic; with deploy/NAME, nothing is applied. In
// both, SIGINT while the load pods wait to run deletes them, and the
// namespace if closingtime created it.
func TestRolloutKube(t *testing.T) {
	cp, client := startControlPlane(t)
	playNode(t, client)
	ctx := context.Background()

	t.Run("files", func(t *testing.T) {
		manifest, err := filepath.Abs(filepath.Join("testdata", "rollout-plain.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		c := startCommand(t, "rollout", "--kube", "--kubeconfig", cp.Kubeconfig, "-f", manifest,
			"--image", "closingtime:test", "--load-pods", "2", "--client", "new-conn=50", "--client", "keep-alive=30", "--path", "/work")
		pods := loadPods(t, client, 2, c)
		ns := pods[0].Namespace
		if !strings.HasPrefix(ns, "closingtime-") {
			t.Errorf("load pods in namespace %s, want one of closingtime's own", ns)
		}
		want := []string{"load", "http://app." + ns + ":80/work", "-o", "jsonl", "--wait-serving", "2m0s", "--duration", "5m0s",
			"--connect-timeout", "2s", "--response-timeout", "2s", "--client", "new-conn=25", "--client", "keep-alive=15", "--connections", "4"}
		for _, p := range pods {
			c := p.Spec.Containers[0]
			if c.Image != "closingtime:test" || !slices.Equal(c.Args, want) || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("load pod %s: image %s, args %q, restart %s; want closingtime:test, %q, Never", p.Name, c.Image, c.Args, p.Spec.RestartPolicy, want)
			}
		}
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil || d.Spec.Template.Spec.Containers[0].Image != "closingtime:test" {
			t.Errorf("deployment app: %v; want it applied with image closingtime:test", err)
		}
		interrupt(t, c)
		goneLoadPods(t, client)
		n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil && n.DeletionTimestamp == nil {
			t.Errorf("namespace %s after the run: not deleted", ns)
		}
	})

	t.Run("deployment", func(t *testing.T) {
		ns := "shop"
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "web"}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}}}}}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: labels,
			Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		status, _, stderr := runCLI(ctx, "rollout", "--kube", "--kubeconfig", cp.Kubeconfig, "-n", ns, "deploy/nope")
		if status != ExitUsage || !strings.Contains(stderr, "get deployment shop/nope: not found") {
			t.Errorf("missing deployment: exit %d, %q; want %d and the deployment not found", status, stderr, ExitUsage)
		}

		c := startCommand(t, "rollout", "--kube", "--kubeconfig", cp.Kubeconfig, "-n", ns, "deploy/web", "--image", "closingtime:test")
		pods := loadPods(t, client, 1, c)
		if got, want := pods[0].Spec.Containers[0].Args[1], "http://front.shop:8080/"; pods[0].Namespace != ns || got != want {
			t.Errorf("load pod %s/%s sends to %s, want it in %s sending to %s", pods[0].Namespace, pods[0].Name, got, ns, want)
		}
		gotD, err := client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gotSvc, err := client.CoreV1().Services(ns).Get(ctx, "front", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range []metav1.Object{gotD, gotSvc} {
			for _, m := range obj.GetManagedFields() {
				if m.Manager == kube.FieldManager {
					t.Errorf("%s: closingtime manages fields of it; want nothing applied", obj.GetName())
				}
			}
		}
		interrupt(t, c)
		goneLoadPods(t, client)
		if n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s after the run: %v; want it kept, closingtime did not create it", ns, err)
		}
	})
}
