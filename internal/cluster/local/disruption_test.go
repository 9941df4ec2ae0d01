package local

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// budget returns PodDisruptionBudget name over the pods of web.
func budget(name string, spec policyv1.PodDisruptionBudgetSpec) *policyv1.PodDisruptionBudget {
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       spec,
	}
}

// waitBudget waits until the disruption controller has observed budget
// name's latest generation and ok holds for its status.
func waitBudget(t *testing.T, c *Cluster, name string, ok func(policyv1.PodDisruptionBudgetStatus) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := func() *policyv1.PodDisruptionBudget { return c.pdbs[key("default", name)] }
	err := c.waitLocked(ctx, func() bool {
		return b().Status.ObservedGeneration == b().Generation && ok(b().Status)
	})
	if err != nil {
		t.Fatalf("budget %s: generation %d, status %+v: %v", name, b().Generation, b().Status, err)
	}
}

// refusal returns the latest eviction_refused event of pod.
func refusal(c *Cluster, pod string) cluster.Event {
	var last cluster.Event
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.EvictionRefused && e.Pod == pod {
			last = e
		}
	}
	return last
}

// TestEvictionBudgetNotObserved: until the disruption controller has
// observed a new or changed budget, the eviction API refuses with 429
// (X3); afterwards the budget decides.
func TestEvictionBudgetNotObserved(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(2, 2, "--shutdown=exit")
	rollout(t, c, []runtime.Object{d, svc}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	pods := activePods(c)

	// A budget that would allow one eviction, evicted at once.
	pdb := budget("web", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))})
	applied := time.Now()
	if err := c.Apply(ctx, []runtime.Object{pdb}); err != nil {
		t.Fatal(err)
	}
	err := c.Evict(ctx, "default", pods[0].Name)
	if time.Since(applied) < budgetObserveDelay {
		var refused *cluster.EvictionError
		if !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests {
			t.Fatalf("Evict() right after Apply = %v, want a 429", err)
		}
		if cause := refusal(c, pods[0].Name).Fields["cause"]; !strings.Contains(cause, "still being processed") {
			t.Errorf("refusal cause %q, want the budget still being processed", cause)
		}
	} else {
		t.Logf("the machine took %v from Apply to Evict, past the controller's delay: not checking the refusal", time.Since(applied))
	}
	waitBudget(t, c, "web", func(st policyv1.PodDisruptionBudgetStatus) bool { return st.DisruptionsAllowed == 1 })
	if err := c.Evict(ctx, "default", pods[1].Name); err != nil {
		t.Fatalf("Evict() once the budget is observed = %v, want it evicted", err)
	}
	c.mu.Lock()
	st := c.pdbs[key("default", "web")].Status
	c.mu.Unlock()
	if st.DisruptionsAllowed != 0 {
		t.Errorf("disruptionsAllowed %d after the eviction, want it used up", st.DisruptionsAllowed)
	}
	// The budget's new generation is refused again until observed.
	changed := budget("web", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("100%"))})
	if err := c.Apply(ctx, []runtime.Object{changed}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	g := c.pdbs[key("default", "web")].Generation
	c.mu.Unlock()
	if g != 2 {
		t.Errorf("generation %d after a change, want 2", g)
	}
}

// TestEvictionTwoBudgets: a pod that two budgets select cannot be evicted:
// the eviction API answers 500 and deletes nothing (X3).
func TestEvictionTwoBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pod")
	}
	t.Parallel()
	c := newCluster(t)
	d, svc := webDeployment(1, 2, "--shutdown=exit")
	one := budget("one", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))})
	two := budget("two", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))})
	rollout(t, c, []runtime.Object{d, svc, one, two}, 0)
	waitBudget(t, c, "two", func(policyv1.PodDisruptionBudgetStatus) bool { return true })
	pod := activePods(c)[0]
	err := c.Evict(context.Background(), "default", pod.Name)
	var refused *cluster.EvictionError
	if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), "500") {
		t.Fatalf("Evict() = %v, want a 500 that is no budget's refusal", err)
	}
	if e := refusal(c, pod.Name); e.Fields["status"] != "500" || e.Fields["budget"] != "one,two" {
		t.Errorf("refusal event %+v, want status 500 naming both budgets", e)
	}
	if n := len(activePods(c)); n != 1 {
		t.Errorf("%d active pods, want the pod kept", n)
	}
}

// TestEvictionUnhealthyPods follows X4 with a Running pod that is not
// Ready: with the default policy, IfHealthyBudget, it is refused while the
// budget lacks healthy pods and evicted, without using the budget, once
// the budget has them; with AlwaysAllow it is evicted regardless. A
// readiness probe that looks for a file named after the pod decides which
// pods are Ready.
func TestEvictionUnhealthyPods(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods and probes")
	}
	t.Parallel()
	c := newCluster(t)
	readyDir := t.TempDir()
	d, svc := webDeployment(2, 2, "--shutdown=exit")
	ctr := &d.Spec.Template.Spec.Containers[0]
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "READY_DIR", Value: readyDir})
	ctr.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", `test -e "$READY_DIR/$POD_NAME"`}}},
		PeriodSeconds: 1,
	}
	pdb := budget("web", policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("2"))})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Apply(ctx, []runtime.Object{d, svc, pdb}); err != nil {
		t.Fatal(err)
	}
	running := func(n int) []*corev1.Pod {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		var pods []*corev1.Pod
		err := c.waitLocked(ctx, func() bool {
			pods = nil
			for _, p := range c.podsLocked("default") {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
					pods = append(pods, p)
				}
			}
			return len(pods) == n
		})
		if err != nil {
			t.Fatalf("%d running pods, want %d", len(pods), n)
		}
		return pods
	}
	pods := running(2)
	ready, unready := pods[0], pods[1]
	if err := os.WriteFile(filepath.Join(readyDir, ready.Name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitBudget(t, c, "web", func(st policyv1.PodDisruptionBudgetStatus) bool { return st.CurrentHealthy == 1 })

	// minAvailable 2 with one healthy pod: the unready pod counts against
	// the budget, which allows nothing.
	var refused *cluster.EvictionError
	if err := c.Evict(ctx, "default", unready.Name); !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests {
		t.Fatalf("Evict(unready) under a budget short of healthy pods = %v, want a 429", err)
	}

	// minAvailable 1 with one healthy pod: the budget is met, so the
	// unready pod goes without using it, while the budget still allows
	// nothing for the Ready one.
	if err := c.Apply(ctx, []runtime.Object{budget("web", policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("1"))})}); err != nil {
		t.Fatal(err)
	}
	waitBudget(t, c, "web", func(st policyv1.PodDisruptionBudgetStatus) bool {
		return st.CurrentHealthy == 1 && st.DesiredHealthy == 1 && st.DisruptionsAllowed == 0
	})
	if err := c.Evict(ctx, "default", unready.Name); err != nil {
		t.Fatalf("Evict(unready) under a met budget = %v, want it evicted", err)
	}
	if err := c.Evict(ctx, "default", ready.Name); !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests {
		t.Fatalf("Evict(ready) under a budget that allows nothing = %v, want a 429", err)
	}

	// AlwaysAllow: the unready replacement goes although the budget lacks
	// healthy pods.
	always := policyv1.AlwaysAllow
	if err := c.Apply(ctx, []runtime.Object{budget("web", policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("2")), UnhealthyPodEvictionPolicy: &always})}); err != nil {
		t.Fatal(err)
	}
	var replacement *corev1.Pod
	for _, p := range running(2) {
		if p.Name != ready.Name {
			replacement = p
		}
	}
	waitBudget(t, c, "web", func(st policyv1.PodDisruptionBudgetStatus) bool { return st.DesiredHealthy == 2 })
	if err := c.Evict(ctx, "default", replacement.Name); err != nil {
		t.Fatalf("Evict(unready) under AlwaysAllow = %v, want it evicted", err)
	}
}
