package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// newFake returns a Cluster on a fake clientset holding objects, observing
// namespace "ns", closed at the end of the test.
func newFake(t *testing.T, objects ...runtime.Object) (*Cluster, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objects...)
	c, err := New(Config{Client: cs, Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, cs
}

func web(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "closingtime"}}},
			},
		},
	}
}

func webService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func webBudget() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}

func TestApply(t *testing.T) {
	c, cs := newFake(t)
	ctx := context.Background()
	var patches []k8stesting.PatchAction
	cs.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, a.(k8stesting.PatchAction))
		return false, nil, nil
	})
	if err := c.Apply(ctx, []runtime.Object{web(3), webService(), webBudget()}); err != nil {
		t.Fatal(err)
	}
	if len(patches) != 3 {
		t.Fatalf("got %d patches, want 3", len(patches))
	}
	for _, p := range patches {
		if p.GetPatchType() != types.ApplyPatchType || p.GetNamespace() != "ns" {
			t.Errorf("%s %s: patch type %s in namespace %q, want server-side apply in ns", p.GetResource().Resource, p.GetName(), p.GetPatchType(), p.GetNamespace())
		}
		opts := p.(k8stesting.PatchActionImpl).PatchOptions
		if opts.FieldManager != FieldManager || opts.Force == nil || !*opts.Force {
			t.Errorf("%s: patch options %+v, want field manager %s, forced", p.GetResource().Resource, opts, FieldManager)
		}
		var body map[string]any
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		if body["kind"] == "" || body["apiVersion"] == "" || body["status"] != nil {
			t.Errorf("%s: apply body %s: want apiVersion and kind, no status", p.GetResource().Resource, p.GetPatch())
		}
	}
	d, err := cs.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 3 {
		t.Fatalf("deployment after apply: %v, %v", d, err)
	}
	if _, err := cs.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("ns").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	// Applying again replaces the spec.
	if err := c.Apply(ctx, []runtime.Object{web(5)}); err != nil {
		t.Fatal(err)
	}
	if d, _ := cs.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 5 {
		t.Errorf("replicas after a second apply: %d, want 5", *d.Spec.Replicas)
	}
}

func TestApplyRefusesOtherKinds(t *testing.T) {
	c, cs := newFake(t)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "settings"}}
	err := c.Apply(context.Background(), []runtime.Object{web(1), cm})
	if err == nil || !strings.Contains(err.Error(), "ConfigMap settings") {
		t.Fatalf("apply of a ConfigMap: %v, want an error naming ConfigMap settings", err)
	}
	if _, err := cs.AppsV1().Deployments("ns").Get(context.Background(), "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment after a refused apply: %v, want not found (nothing applied)", err)
	}
}

func TestRolloutRestart(t *testing.T) {
	d := web(2)
	d.Namespace = "ns"
	paused := web(1)
	paused.Name, paused.Namespace, paused.Spec.Paused = "paused", "ns", true
	cs := fake.NewClientset(d, paused)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 10, 0, 0, 123, time.UTC))
	c, err := New(Config{Client: cs, Namespace: "ns", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var patch k8stesting.PatchAction
	cs.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patch = a.(k8stesting.PatchAction)
		return false, nil, nil
	})
	ctx := context.Background()
	if err := c.RolloutRestart(ctx, "ns", "web"); err != nil {
		t.Fatal(err)
	}
	want := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-29T10:00:00Z"}}}}}`
	if patch == nil || patch.GetPatchType() != types.StrategicMergePatchType || string(patch.GetPatch()) != want {
		t.Fatalf("restart patch: %v, want strategic merge patch %s", patch, want)
	}
	got, _ := cs.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{})
	if a := got.Spec.Template.Annotations[cluster.RestartedAtAnnotation]; a != "2026-11-29T10:00:00Z" {
		t.Errorf("restartedAt = %q", a)
	}
	if err := c.RolloutRestart(ctx, "ns", "web"); err == nil {
		t.Error("a second restart in the same second succeeded; want an error")
	}
	clk.Step(time.Second)
	if err := c.RolloutRestart(ctx, "ns", "web"); err != nil {
		t.Errorf("restart a second later: %v", err)
	}
	if err := c.RolloutRestart(ctx, "ns", "paused"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("restart of a paused deployment: %v, want an error saying paused", err)
	}
	if err := c.RolloutRestart(ctx, "ns", "missing"); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("restart of a missing deployment: %v, want ErrNotFound", err)
	}
}

func TestScale(t *testing.T) {
	d := web(2)
	d.Namespace = "ns"
	c, cs := newFake(t, d)
	var patch k8stesting.PatchAction
	cs.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patch = a.(k8stesting.PatchAction)
		return false, nil, nil
	})
	ctx := context.Background()
	if err := c.Scale(ctx, "ns", "web", 5); err != nil {
		t.Fatal(err)
	}
	if patch == nil || patch.GetSubresource() != "scale" || string(patch.GetPatch()) != `{"spec":{"replicas":5}}` {
		t.Fatalf("scale patch: %+v, want {\"spec\":{\"replicas\":5}} on the scale subresource", patch)
	}
	if got, _ := cs.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{}); *got.Spec.Replicas != 5 {
		t.Errorf("replicas = %d, want 5", *got.Spec.Replicas)
	}
	if err := c.Scale(ctx, "ns", "web", -1); err == nil {
		t.Error("scale to -1 succeeded")
	}
	if err := c.Scale(ctx, "ns", "missing", 1); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("scale of a missing deployment: %v, want ErrNotFound", err)
	}
}

func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app"}}},
	}
}

func TestDeletePod(t *testing.T) {
	c, cs := newFake(t, pod("a", "node-1"))
	var opts metav1.DeleteOptions
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts = a.(k8stesting.DeleteActionImpl).DeleteOptions
		return false, nil, nil
	})
	if err := c.DeletePod(context.Background(), "ns", "a", ptr.To[int64](3)); err != nil {
		t.Fatal(err)
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 3 {
		t.Errorf("delete options %+v, want grace 3", opts)
	}
	if err := c.DeletePod(context.Background(), "ns", "a", nil); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

// refusal returns the error the eviction API answers when budget allows
// no disruption (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go,
// checkAndDecrement).
func refusal(budget string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget " + budget + " needs 2 healthy pods and has 2 currently"})
	return err
}

// evictions makes the fake API answer evictions: with refusals from
// budget "web" for the first refuse[pod] evictions of each pod, then by
// deleting the pod. It returns the count of eviction requests by pod.
func evictions(cs *fake.Clientset, refuse map[string]int) map[string]*atomic.Int32 {
	counts := map[string]*atomic.Int32{}
	for _, name := range []string{"a", "b", "c", "d"} {
		counts[name] = &atomic.Int32{}
	}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		n := counts[ev.Name].Add(1)
		if int(n) <= refuse[ev.Name] {
			return true, nil, refusal("web")
		}
		err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
		return true, nil, err
	})
	return counts
}

func TestEvict(t *testing.T) {
	c, cs := newFake(t, pod("a", "node-1"), pod("b", "node-1"))
	evictions(cs, map[string]int{"a": 1})
	ctx := context.Background()
	err := c.Evict(ctx, "ns", "a")
	var refused *cluster.EvictionError
	if !errors.As(err, &refused) {
		t.Fatalf("evict a: %v, want an *EvictionError", err)
	}
	if want := (cluster.EvictionError{Namespace: "ns", Pod: "a", Budget: "web", Status: http.StatusTooManyRequests}); *refused != want {
		t.Errorf("refusal %+v, want %+v", *refused, want)
	}
	if err := c.Evict(ctx, "ns", "b"); err != nil {
		t.Fatalf("evict b: %v", err)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod b after its eviction: %v, want not found", err)
	}
	var kinds []string
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.EvictionRefused || e.Kind == cluster.PodEvicted {
			kinds = append(kinds, string(e.Kind)+" "+e.Pod+" "+e.Object+" "+e.Fields["budget"]+" "+e.Fields["status"])
		}
	}
	want := []string{"eviction_refused a PodDisruptionBudget/web web 429", "pod_evicted b   "}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", kinds, want)
	}
	// A refusal without a budget cause is an API error, not a refusal.
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("slow down", 1)
	})
	if err := c.Evict(ctx, "ns", "a"); err == nil || errors.As(err, &refused) {
		t.Errorf("evict with a plain 429: %v, want an error that is not an *EvictionError", err)
	}
}

func TestEvictMissing(t *testing.T) {
	c, cs := newFake(t)
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), "a")
	})
	if err := c.Evict(context.Background(), "ns", "a"); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("evict a missing pod: %v, want ErrNotFound", err)
	}
}

func TestCordon(t *testing.T) {
	c, cs := newFake(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	ctx := context.Background()
	for _, un := range []bool{true, true, false} {
		if err := c.Cordon(ctx, "node-1", un); err != nil {
			t.Fatal(err)
		}
		n, _ := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if n.Spec.Unschedulable != un {
			t.Errorf("unschedulable = %v, want %v", n.Spec.Unschedulable, un)
		}
	}
	var kinds []cluster.EventKind
	for _, e := range c.EventLog().Events() {
		kinds = append(kinds, e.Kind)
	}
	if want := []cluster.EventKind{cluster.NodeCordoned, cluster.NodeUncordoned}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v (one for each change)", kinds, want)
	}
	if err := c.Cordon(ctx, "node-9", true); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("cordon of a missing node: %v, want ErrNotFound", err)
	}
}

func drainObjects() []runtime.Object {
	ds := pod("c", "node-1")
	ds.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: ptr.To(true)}}
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		pod("a", "node-1"), pod("b", "node-1"), ds, pod("d", "node-2"),
	}
}

func TestDrain(t *testing.T) {
	c, cs := newFake(t, drainObjects()...)
	counts := evictions(cs, map[string]int{"a": 2})
	ctx := context.Background()
	if err := c.Drain(ctx, "node-1", cluster.DrainOptions{RetryDelay: 10 * time.Millisecond, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	n, _ := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if !n.Spec.Unschedulable {
		t.Error("node-1 is schedulable after the drain")
	}
	for name, want := range map[string]int32{"a": 3, "b": 1, "c": 0, "d": 0} {
		if got := counts[name].Load(); got != want {
			t.Errorf("pod %s: %d eviction requests, want %d", name, got, want)
		}
	}
	list, _ := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
	var left []string
	for _, p := range list.Items {
		left = append(left, p.Name)
	}
	if !slices.Equal(left, []string{"c", "d"}) {
		t.Errorf("pods left %v, want the DaemonSet's c and node-2's d", left)
	}
}

func TestDrainTimeout(t *testing.T) {
	c, cs := newFake(t, drainObjects()...)
	counts := evictions(cs, map[string]int{"a": 1 << 30})
	ctx := context.Background()
	err := c.Drain(ctx, "node-1", cluster.DrainOptions{RetryDelay: 10 * time.Millisecond, Timeout: 300 * time.Millisecond})
	var refused *cluster.EvictionError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &refused) || refused.Pod != "a" {
		t.Fatalf("drain with a budget that never allows: %v, want the deadline and a's last refusal", err)
	}
	if got := counts["a"].Load(); got < 2 {
		t.Errorf("%d eviction requests for a, want retries", got)
	}
	n, _ := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if !n.Spec.Unschedulable {
		t.Error("node-1 is schedulable after a failed drain; it stays cordoned")
	}
}

func TestDialContext(t *testing.T) {
	c, _ := newFake(t)
	if _, err := c.DialContext(context.Background(), "tcp", "web.ns:80"); !errors.Is(err, ErrOutsideCluster) {
		t.Errorf("dial: %v, want ErrOutsideCluster", err)
	}
}

func TestCreateNamespace(t *testing.T) {
	cs := fake.NewClientset()
	c, err := New(Config{Client: cs, Namespace: "run-1", CreateNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "run-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace after New: %v", err)
	}
	if _, err := New(Config{Client: cs, Namespace: "run-1", CreateNamespace: true}); err == nil {
		t.Error("New created a namespace that exists")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "run-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after Close: %v, want not found", err)
	}
	// A namespace the backend did not create stays.
	c2, err := New(Config{Client: cs, Namespace: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}, metav1.CreateOptions{})
	c2.Close(ctx)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("a namespace closingtime did not create: %v after Close, want it kept", err)
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: one
  cluster: {server: "https://127.0.0.1:6443"}
- name: two
  cluster: {server: "https://127.0.0.2:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: a
  context: {cluster: one, user: u, namespace: ns-a}
- name: b
  context: {cluster: two, user: u}
current-context: a
`

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", path)
	for _, tc := range []struct {
		name, path, context string
		host, namespace     string
	}{
		{name: "KUBECONFIG, current context", host: "https://127.0.0.1:6443", namespace: "ns-a"},
		{name: "KUBECONFIG, context b", context: "b", host: "https://127.0.0.2:6443", namespace: "default"},
		{name: "explicit path", path: path, context: "b", host: "https://127.0.0.2:6443", namespace: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ns, err := loadKubeconfig(tc.path, tc.context)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || ns != tc.namespace {
				t.Errorf("host %s, namespace %s; want %s, %s", cfg.Host, ns, tc.host, tc.namespace)
			}
		})
	}
	if _, _, err := loadKubeconfig(filepath.Join(dir, "missing"), ""); err == nil {
		t.Error("a missing explicit kubeconfig loaded")
	}
	if _, _, err := loadKubeconfig("", "nope"); err == nil {
		t.Error("a missing context loaded")
	}
}

// TestApplyMapsImages: a container of an image that Config.Images maps is
// applied with the image it maps to; the caller's object is not changed.
func TestApplyMapsImages(t *testing.T) {
	cs := fake.NewClientset()
	c, err := New(Config{Client: cs, Namespace: "ns", Images: map[string]string{"closingtime": "closingtime:dev"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var body []byte
	cs.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		body = a.(k8stesting.PatchAction).GetPatch()
		return true, &appsv1.Deployment{}, nil
	})
	d := web(1)
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "busybox"})
	if err := c.Apply(context.Background(), []runtime.Object{d}); err != nil {
		t.Fatal(err)
	}
	var applied appsv1.Deployment
	if err := json.Unmarshal(body, &applied); err != nil {
		t.Fatal(err)
	}
	if got := applied.Spec.Template.Spec.Containers; got[0].Image != "closingtime:dev" || got[1].Image != "busybox" {
		t.Errorf("applied images %q and %q, want closingtime:dev and busybox", got[0].Image, got[1].Image)
	}
	if d.Spec.Template.Spec.Containers[0].Image != "closingtime" {
		t.Errorf("Apply changed the caller's Deployment: image %s", d.Spec.Template.Spec.Containers[0].Image)
	}
}

// TestWorkload finds a Deployment's Service by its selector, or by name,
// and says what is missing or ambiguous.
func TestWorkload(t *testing.T) {
	d := web(2)
	d.Namespace = "shop"
	svc := func(name string, selector map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: selector}}
	}
	for _, tt := range []struct {
		name, deployment, service string
		objects                   []runtime.Object
		want, wantErr             string
	}{
		{"by selector", "web", "", []runtime.Object{d, svc("front", map[string]string{"app": "web"}), svc("other", map[string]string{"app": "db"}), svc("external", nil)}, "front", ""},
		{"by name", "web", "other", []runtime.Object{d, svc("front", map[string]string{"app": "web"}), svc("other", map[string]string{"app": "db"})}, "other", ""},
		{"no deployment", "nope", "", []runtime.Object{d}, "", "get deployment shop/nope: not found"},
		{"no service named", "web", "gone", []runtime.Object{d}, "", "get service shop/gone: not found"},
		{"no service selects", "web", "", []runtime.Object{d, svc("other", map[string]string{"app": "db"})}, "", "no Service in namespace shop selects the pods of deployment web"},
		{"two select", "web", "", []runtime.Object{d, svc("a", map[string]string{"app": "web"}), svc("b", map[string]string{"app": "web"})}, "", "services a, b in namespace shop all select the pods of deployment web"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newFake(t, tt.objects...)
			gotD, gotSvc, err := c.Workload(context.Background(), "shop", tt.deployment, tt.service)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Workload: %v, want an error with %q", err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "not found") && !errors.Is(err, cluster.ErrNotFound) {
					t.Errorf("Workload: %v does not wrap cluster.ErrNotFound", err)
				}
			case err != nil:
				t.Fatal(err)
			case gotD.Name != "web" || gotD.Kind != "Deployment" || gotSvc.Name != tt.want || gotSvc.Kind != "Service":
				t.Errorf("Workload: %s %s, %s %s; want Deployment web, Service %s", gotD.Kind, gotD.Name, gotSvc.Kind, gotSvc.Name, tt.want)
			}
		})
	}
}

// TestHasClusterDNS: a cluster has DNS when Service kube-system/kube-dns
// exists, and is not said to lack it when that can't be read.
func TestHasClusterDNS(t *testing.T) {
	ctx := context.Background()
	without, cs := newFake(t)
	if without.HasClusterDNS(ctx) {
		t.Error("no kube-dns Service: HasClusterDNS true")
	}
	cs.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), "kube-dns", errors.New("no"))
	})
	if !without.HasClusterDNS(ctx) {
		t.Error("kube-dns unreadable: HasClusterDNS false")
	}
	dns := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem}}
	if with, _ := newFake(t, dns); !with.HasClusterDNS(ctx) {
		t.Error("kube-dns Service: HasClusterDNS false")
	}
}
