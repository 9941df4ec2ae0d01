package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// clusterApp is a Service and a Deployment of two closingtime serve pods
// that take 2 s to start listening, and answer /work in 100 ms; extra
// goes into the container's spec (probes, lifecycle, and so on), and mode
// is the server's SHUTDOWN_MODE.
func clusterApp(mode, extra string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: app
spec:
  selector:
    app: app
  ports:
  - name: http
    port: 80
    targetPort: http
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 2
  selector:
    matchLabels:
      app: app
  template:
    metadata:
      labels:
        app: app
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: app
        image: closingtime
        args: [serve]
        ports:
        - name: http
          containerPort: 8080
        env:
        - name: SHUTDOWN_MODE
          value: %q
        - name: STARTUP_DELAY
          value: "2"
        - name: WORK_MS
          value: "100"
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
%s`, mode, extra)
}

// TestClusterRollout is seed 001 on `closingtime cluster`: real etcd,
// kube-apiserver and kube-controller-manager, closingtime's kubelet as the
// node agents, traffic from a load pod through its node's routing view.
// Without a readiness probe, a rollout restart makes requests fail,
// refused; with a readiness probe, a preStop sleep and a graceful server,
// three rollouts fail none. A PodDisruptionBudget that allows no
// disruption makes the real API server refuse an eviction with 429.
func TestClusterRollout(t *testing.T) {
	dir := clusterTestDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if status, stdout, stderr := runCLI(ctx, "cluster", "up", "--state-dir", dir); status != ExitOK {
		t.Fatalf("up: exit %d\n%s%s", status, stderr, stdout)
	}
	st := clusterTestStatus(t, ctx, dir)
	files := t.TempDir()
	rollout := func(name, manifest string, repeat int) (int, results.Totals, string) {
		path := filepath.Join(files, name+".yaml")
		if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		status, stdout, stderr := runCLI(ctx, "rollout", "--kube", "--kubeconfig", st.Kubeconfig, "-f", path,
			"--path", "/work", "--rate", "40", "--warm-up", "2s", "--after", "2s", "--repeat", fmt.Sprint(repeat), "-o", "json")
		var r results.Results
		if err := json.Unmarshal([]byte(stdout), &r); err != nil || len(r.Scenarios) != 1 {
			t.Fatalf("rollout %s: exit %d, results %v:\n%s\n%s", name, status, err, stdout, stderr)
		}
		return status, r.Scenarios[0].Totals, stderr
	}

	status, plain, stderr := rollout("plain", clusterApp("exit", ""), 1)
	if status != ExitFailed || plain.Refused == 0 || plain.OK == 0 {
		t.Errorf("without a readiness probe: exit %d, %+v; want exit %d and refused requests among answered ones\n%s", status, plain, ExitFailed, stderr)
	}
	graceful := `        readinessProbe:
          httpGet:
            path: /ready
            port: http
          periodSeconds: 1
        lifecycle:
          preStop:
            sleep:
              seconds: 3
`
	status, safe, stderr := rollout("graceful", clusterApp("graceful", graceful), 3)
	if status != ExitOK || safe.Failed() != 0 || safe.Requests < 3*40*4 {
		t.Errorf("readiness, preStop and a graceful server over 3 rollouts: exit %d, %+v; want exit 0, no failure\n%s", status, safe, stderr)
	}

	// One pod, and a budget that wants it available: the API server
	// refuses its eviction.
	client := controlplanetest.ClientOf(t, st.Kubeconfig)
	labels := map[string]string{"app": "solo"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "solo"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "closingtime", Args: []string{"serve"},
					Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}}}}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "solo"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each round looks once; the loop ends when the disruption controller
	// counts the pod healthy.
	for {
		b, err := client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "solo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the budget never counted the pod healthy: %+v", b.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=solo"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of solo: %v, %v", pods, err)
	}
	err = client.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: "default"}})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("eviction of the only pod under minAvailable 1: %v; want 429 from the disruption budget", err)
	}
	if status, stdout, stderr := runCLI(ctx, "cluster", "down", "--state-dir", dir); status != ExitOK {
		t.Errorf("down: exit %d, stdout %q, stderr %q", status, stdout, stderr)
	}
}

// TestLabCompare runs two catalog scenarios with `lab --compare`: on the
// embedded cluster, then on a closingtime cluster that the lab starts for
// the run and stops after it. Both sides report each scenario: for
// pdb-1-evict, the eviction refused by its budget (429 from the real API
// server on the cluster) and no failed request; for 2-readiness, the same
// causes, none unknown: requests cut by servers that exit on SIGTERM
// without draining, and maybe the routing race, which the real
// controllers and node agents may win. No process of the cluster is left.
func TestLabCompare(t *testing.T) {
	dir := clusterTestDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	status, stdout, stderr := runCLI(ctx, "lab", "--compare", "--quick", "pdb-1-evict", "2-readiness", "--state-dir", dir,
		"-o", "json", "--results", "", "--report", "")
	if status != ExitOK {
		t.Fatalf("lab --compare: exit %d\n%s", status, stderr)
	}
	var c report.Comparison
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("lab --compare -o json: %v\n%s", err, stdout)
	}
	if len(c.Sides) != 2 || c.Sides[0].Cluster != sideEmbedded || c.Sides[1].Cluster != sideCluster {
		t.Fatalf("sides %+v, want embedded and cluster", c.Sides)
	}
	for _, side := range c.Sides {
		if len(side.Results.Scenarios) != 2 || len(side.Results.Scenarios[0].Runs) != 1 || len(side.Results.Scenarios[1].Runs) != 1 {
			t.Fatalf("%s: %+v, want one run of pdb-1-evict and one of 2-readiness", side.Cluster, side.Results)
		}
		run := side.Results.Scenarios[0].Runs[0]
		if run.Evictions == nil || run.Evictions.Accepted != 0 || run.Evictions.Refused == 0 || run.Totals.Requests == 0 || run.Totals.Failed() != 0 {
			t.Errorf("%s: evictions %+v, totals %+v; want the eviction refused by the budget and no failed request", side.Cluster, run.Evictions, run.Totals)
		}
		run = side.Results.Scenarios[1].Runs[0]
		if run.Diagnosis == nil {
			t.Fatalf("%s: 2-readiness: no diagnosis; totals %+v", side.Cluster, run.Totals)
		}
		got := map[results.Cause]int{}
		for _, cc := range run.Diagnosis.Causes {
			got[cc.Cause] = cc.Failed
		}
		if got[diagnosis.ExitWithoutDrain] == 0 || len(got) > 2 || (len(got) == 2 && got[diagnosis.RoutingRace] == 0) {
			t.Errorf("%s: 2-readiness: causes %+v; want exit-without-drain, and maybe routing-race, only", side.Cluster, run.Diagnosis.Causes)
		}
	}
	if left := clusterProcesses(t, dir, -1); len(left) > 0 {
		t.Errorf("processes of the cluster left after lab --compare: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after lab --compare: %v; want it removed", err)
	}
}
