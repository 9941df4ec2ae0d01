package controlplane

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestStart builds the control plane (through the cache), starts it, and
// checks that its controllers act: a Deployment gets a ReplicaSet, which
// gets its pods, which stay Pending with no node. Stop then ends every
// process.
func TestStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and starts a real control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(ctx, cache)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cp, err := Start(ctx, Config{Binaries: bins, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()
	rest, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	version, err := client.Discovery().ServerVersion()
	if err != nil || version.GitVersion != "v"+KubernetesVersion {
		t.Fatalf("server version %v, %v; want v%s", version, err, KubernetesVersion)
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "closingtime"}}}}},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each round lists once; the loop ends when both pods exist.
	for {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 2 {
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
					t.Errorf("pod %s: phase %s on node %q, want Pending and unbound", p.Name, p.Status.Phase, p.Spec.NodeName)
				}
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the controllers made %d pods of 2", len(pods.Items))
		case <-time.After(100 * time.Millisecond):
		}
	}
	procs := cp.procs
	cp.Stop()
	stopped = true
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			t.Errorf("%s still runs after Stop", p.name)
		}
	}
	if _, err := os.Stat(cp.Kubeconfig); err != nil {
		t.Errorf("kubeconfig after Stop: %v", err)
	}
}
