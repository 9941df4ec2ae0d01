package nodeagent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// TestSchedulerCordonedNode: a cordoned node gets no pods; with every node
// cordoned a pod stays Pending, and it is bound, with its Scheduled Event,
// once a node is uncordoned.
func TestSchedulerCordonedNode(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	agents, _ := startAgents(t, client, ns, 2, local.KubeletConfig{})
	a, b := agents[0].cfg.NodeName, agents[1].cfg.NodeName
	cordon(t, client, a, true)
	s := startScheduler(t)
	ctx := context.Background()

	d := serveDeployment("web", 3)
	create(t, client, ns, d)
	pods := waitPods(t, client, ns, "app=web", "3 pods bound", func(pods []corev1.Pod) bool {
		return len(pods) == 3 && pods[0].Spec.NodeName != "" && pods[1].Spec.NodeName != "" && pods[2].Spec.NodeName != ""
	})
	for _, p := range pods {
		if p.Spec.NodeName != b {
			t.Errorf("pod %s bound to %s, want %s: %s is cordoned", p.Name, p.Spec.NodeName, b, a)
		}
	}

	cordon(t, client, b, true)
	// The pod and node watches are apart: the new pod must not reach the
	// scheduler before the cordon does.
	waitFor(t, "the scheduler to see "+b+" cordoned", func() (bool, error) {
		n, err := s.nodes.Get(b)
		return err == nil && n.Spec.Unschedulable, nil
	})
	scale, err := client.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 4
	if _, err := client.AppsV1().Deployments(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods = waitPods(t, client, ns, "app=web", "a 4th pod", func(pods []corev1.Pod) bool { return len(pods) == 4 })
	var pending *corev1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName == "" {
			pending = &pods[i]
		}
	}
	if pending == nil {
		t.Fatal("the 4th pod was bound with every node cordoned")
	}
	// Long enough for the scheduler to have acted, were it to.
	time.Sleep(2 * time.Second)
	if p := getPod(t, client, ns, pending.Name); p.Spec.NodeName != "" {
		t.Fatalf("pod %s bound to %s with every node cordoned", p.Name, p.Spec.NodeName)
	}

	cordon(t, client, a, false)
	waitFor(t, "the pending pod to be bound to "+a, func() (bool, error) {
		return getPod(t, client, ns, pending.Name).Spec.NodeName == a, nil
	})
	waitEvent(t, client, ns, pending.Name, "Scheduled", "default-scheduler", "")
}

// cordon sets node's spec.unschedulable, as kubectl cordon and uncordon do.
func cordon(t *testing.T, client kubernetes.Interface, node string, unschedulable bool) {
	t.Helper()
	patch := `{"spec":{"unschedulable":false}}`
	if unschedulable {
		patch = `{"spec":{"unschedulable":true}}`
	}
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// getPod returns pod name of ns.
func getPod(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
