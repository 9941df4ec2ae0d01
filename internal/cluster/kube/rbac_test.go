package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// rbacObjects reads the Roles and ClusterRoles of the manifest at path.
func rbacObjects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var obj runtime.Object
		switch meta.Kind {
		case "":
			continue
		case "Role":
			obj = &rbacv1.Role{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		default:
			t.Fatalf("%s: unexpected kind %s", path, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// forbidden fails the test if err is the API's refusal to authorize.
func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if apierrors.IsForbidden(err) || (err != nil && strings.Contains(err.Error(), "forbidden")) {
		t.Errorf("%s: %v: the shipped RBAC does not allow it", what, err)
	}
}

// TestRBAC binds the Role of deploy/rbac.yaml in a namespace, and the
// ClusterRoles of deploy/rbac-cluster.yaml, to a user, and makes every
// request of the backend as that user on a real API server: observing,
// applying, restarting, scaling, evicting, deleting, following logs,
// load pods, waiting for a Service, reading a workload, draining a node,
// and a namespace of its own. None is forbidden; before the bindings, the
// same user is refused.
func TestRBAC(t *testing.T) {
	cp := controlplanetest.Shared(t)
	restCfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(restCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const user = "closingtime-rbac"
	ns := fmt.Sprintf("rbac-%d", time.Now().UnixNano()%100000)
	nodes := []string{"rbac-1", "rbac-2"}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		for _, n := range nodes {
			admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	as := rest.CopyConfig(restCfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	client := kubernetes.NewForConfigOrDie(as)

	// Unbound, the user may not even list the Deployments.
	if _, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("an unbound user listed the Deployments: %v; want it forbidden, or the test could not fail", err)
	}

	// Bind the shipped roles.
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, path := range []string{"rbac.yaml", "rbac-cluster.yaml"} {
		for _, obj := range rbacObjects(t, filepath.Join("..", "..", "..", "deploy", path)) {
			switch r := obj.(type) {
			case *rbacv1.Role:
				if _, err := admin.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
				if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			case *rbacv1.ClusterRole:
				r.Name += "-" + ns
				if _, err := admin.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}
				if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), r.Name, metav1.DeleteOptions{})
					admin.RbacV1().ClusterRoles().Delete(context.Background(), r.Name, metav1.DeleteOptions{})
				})
			}
		}
	}

	// The backend, as the user, with the test playing the nodes as admin.
	var c *Cluster
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The authorizer sees new bindings within moments.
		if c, err = New(Config{Client: client, Namespace: ns}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("observe as %s: %v", user, err)
	}
	defer c.Close(context.Background())
	kctx, stopKubelet := context.WithCancel(context.Background())
	k := &kubelet{t: t, client: admin, namespace: ns, nodes: nodes, handled: map[string]bool{}}
	kubeletDone := k.run(kctx)
	defer func() {
		stopKubelet()
		<-kubeletDone
		k.wg.Wait()
	}()

	objects := workload(2, intstr.FromInt32(1))
	forbidden(t, "apply", c.Apply(ctx, objects))
	_, err = c.RolloutStatus(ctx, ns, "web")
	forbidden(t, "rollout status", err)
	forbidden(t, "rollout restart", c.RolloutRestart(ctx, ns, "web"))
	_, err = c.RolloutStatus(ctx, ns, "web")
	forbidden(t, "rollout status after the restart", err)
	forbidden(t, "apply again", c.Apply(ctx, objects))
	forbidden(t, "scale", c.Scale(ctx, ns, "web", 3))
	_, _, err = c.Workload(ctx, ns, "web", "")
	forbidden(t, "workload", err)
	_, _, err = c.Workload(ctx, ns, "web", "web")
	forbidden(t, "workload with its service", err)
	lp := c.LoadPods(LoadConfig{StartTimeout: 30 * time.Second})
	forbidden(t, "wait serving", lp.WaitServing(ctx, load.Config{URL: "http://web." + ns + ":80/"}, nil))
	// The nodes are played: the load pods run but have no log to follow.
	_, _, err = lp.Run(ctx, load.Config{URL: "http://web." + ns + ":80/"}, func() {})
	forbidden(t, "load pods", err)

	waitBudget(t, admin, ns, 3)
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Labels[LoadLabel] == "" {
			live = append(live, p.Name)
		}
	}
	if len(live) < 2 {
		t.Fatalf("pods %v: want at least two to act on", live)
	}
	err = c.Evict(ctx, ns, live[0])
	var refused *cluster.EvictionError
	if !errors.As(err, &refused) {
		forbidden(t, "evict", err)
	}
	forbidden(t, "delete pod", c.DeletePod(ctx, ns, live[1], nil))
	forbidden(t, "drain", c.Drain(ctx, nodes[0], cluster.DrainOptions{RetryDelay: 200 * time.Millisecond, Timeout: time.Minute}))
	forbidden(t, "uncordon", c.Cordon(ctx, nodes[0], false))
	for _, p := range live {
		lines, _ := c.Logs(ctx, ns, p, "app")
		for _, l := range lines {
			forbidden(t, "follow the log of "+p, errors.New(l.Text))
		}
	}

	// A namespace of its own, created and deleted, as New and Close do.
	own, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "closingtime-"}},
		metav1.CreateOptions{FieldManager: FieldManager})
	forbidden(t, "create a namespace", err)
	if err == nil {
		forbidden(t, "delete the namespace", client.CoreV1().Namespaces().Delete(ctx, own.Name, metav1.DeleteOptions{}))
	}
}
