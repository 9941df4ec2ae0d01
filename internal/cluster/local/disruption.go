package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// Evict evicts pod namespace/name as the eviction API does (spec X3, X4):
// a pod that is Pending, terminal or already terminating is deleted
// without a budget check; otherwise the one PodDisruptionBudget that
// selects it must allow a disruption, or the eviction is refused with a
// 429 [*cluster.EvictionError].
func (c *Cluster) Evict(ctx context.Context, namespace, name string) error {
	return c.evict(namespace, name, nil)
}

// evict is Evict with the eviction's DeleteOptions grace period.
func (c *Cluster) evict(namespace, name string, grace *int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pod := c.pods[key(namespace, name)]
	if pod == nil {
		return fmt.Errorf("evict pod %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	if pod.Status.Phase == corev1.PodPending || pod.Status.Phase == corev1.PodSucceeded ||
		pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil {
		c.evictLocked(pod, "", grace)
		return nil
	}
	var budgets []*policyv1.PodDisruptionBudget
	for _, b := range sortedValues(c.pdbs) {
		if b.Namespace != namespace {
			continue
		}
		// In policy/v1 an empty selector selects every pod of the
		// namespace, and a missing one none.
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			budgets = append(budgets, b)
		}
	}
	switch len(budgets) {
	case 0:
		c.evictLocked(pod, "", grace)
		return nil
	case 1:
	default:
		return fmt.Errorf("evict pod %s/%s: %d: more than one PodDisruptionBudget selects it", namespace, name, http.StatusInternalServerError)
	}
	b := budgets[0]
	expected, desired, healthy, err := c.budgetLocked(b)
	if err != nil {
		return fmt.Errorf("evict pod %s/%s: budget %s: %w", namespace, name, b.Name, err)
	}
	// X4: an unhealthy (Running, not Ready) pod goes without using the
	// budget when the budget is met, or always with AlwaysAllow.
	if !podReady(pod) {
		policy := b.Spec.UnhealthyPodEvictionPolicy
		if (policy != nil && *policy == policyv1.AlwaysAllow) || (healthy >= desired && desired > 0) {
			c.evictLocked(pod, b.Name, grace)
			return nil
		}
	}
	if cluster.DisruptionsAllowed(healthy, expected, desired) == 0 {
		c.record(cluster.Event{Kind: cluster.EvictionRefused, Namespace: namespace, Pod: name, Object: "PodDisruptionBudget/" + b.Name,
			Fields: map[string]string{"budget": b.Name, "status": strconv.Itoa(http.StatusTooManyRequests)}})
		return &cluster.EvictionError{Namespace: namespace, Pod: name, Budget: b.Name, Status: http.StatusTooManyRequests}
	}
	c.disrupted[key(namespace, name)] = c.clock.Now()
	c.evictLocked(pod, b.Name, grace)
	return nil
}

// evictLocked records an eviction and deletes pod gracefully, with grace
// overriding its own when not nil.
func (c *Cluster) evictLocked(pod *corev1.Pod, budget string, grace *int64) {
	e := cluster.Event{Kind: cluster.PodEvicted, Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName}
	if budget != "" {
		e.Object = "PodDisruptionBudget/" + budget
	}
	c.record(e)
	c.deletePodLocked(pod, grace)
}

// budgetLocked returns the budget's expected and desired healthy pods
// (cluster.DesiredHealthy) and how many of its pods are healthy now:
// Ready, not terminating, not just evicted (spec X2).
func (c *Cluster) budgetLocked(b *policyv1.PodDisruptionBudget) (expected, desired, healthy int32, err error) {
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil {
		return 0, 0, 0, err
	}
	var selected int32
	owners := map[string]*appsv1.ReplicaSet{}
	for _, p := range c.pods {
		if p.Namespace != b.Namespace || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		selected++
		if podReady(p) && p.DeletionTimestamp == nil && c.disrupted[key(p.Namespace, p.Name)].IsZero() {
			healthy++
		}
		for _, rs := range c.rss {
			if ownedBy(p, rs) {
				owners[rs.Name] = rs
			}
		}
	}
	// The scale of a ReplicaSet a Deployment owns is the Deployment's
	// (disruption.go, getExpectedScale via the scale subresource).
	var scale int32
	counted := map[string]bool{}
	for _, rs := range owners {
		ref := metav1.GetControllerOf(rs)
		if ref == nil {
			scale += *rs.Spec.Replicas
			continue
		}
		if dep := c.deployments[key(rs.Namespace, ref.Name)]; dep != nil && !counted[ref.Name] {
			counted[ref.Name] = true
			scale += *dep.d.Spec.Replicas
		}
	}
	expected, desired, err = cluster.DesiredHealthy(b.Spec, scale, selected)
	return expected, desired, healthy, err
}

// Cordon marks node unschedulable or schedulable again.
func (c *Cluster) Cordon(ctx context.Context, node string, unschedulable bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cordonLocked(node, unschedulable)
}

func (c *Cluster) cordonLocked(name string, unschedulable bool) error {
	for _, n := range c.nodes {
		if n.name != name {
			continue
		}
		if n.unschedulable != unschedulable {
			n.unschedulable = unschedulable
			kind := cluster.NodeUncordoned
			if unschedulable {
				kind = cluster.NodeCordoned
			}
			c.record(cluster.Event{Kind: kind, Node: name})
			c.changedLocked()
		}
		return nil
	}
	return fmt.Errorf("node %s: %w", name, cluster.ErrNotFound)
}

// Drain cordons node, evicts its pods concurrently, retrying each refusal
// after opts.RetryDelay, and waits until they are gone, as `kubectl drain`
// does (spec X6).
func (c *Cluster) Drain(ctx context.Context, node string, opts cluster.DrainOptions) error {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	retry := opts.RetryDelay
	if retry <= 0 {
		retry = cluster.DefaultEvictionRetryDelay
	}
	c.mu.Lock()
	if err := c.cordonLocked(node, true); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("drain: %w", err)
	}
	var targets []*corev1.Pod
	for _, p := range sortedValues(c.pods) {
		if p.Spec.NodeName == node {
			targets = append(targets, p.DeepCopy())
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, p := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.evictUntilGone(ctx, p, opts.GracePeriodSeconds, retry)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drain node %s: %w", node, err)
	}
	return nil
}

// evictUntilGone evicts pod, retrying while a budget refuses, and waits
// until the pod (this UID) is gone from the store.
func (c *Cluster) evictUntilGone(ctx context.Context, pod *corev1.Pod, grace *int64, retry time.Duration) error {
	// Each round is one eviction attempt; the loop ends with success or
	// ctx.
	for {
		err := c.evict(pod.Namespace, pod.Name, grace)
		if errors.Is(err, cluster.ErrNotFound) {
			return nil
		}
		var refused *cluster.EvictionError
		if err == nil {
			break
		}
		if !errors.As(err, &refused) {
			return err
		}
		t := c.clock.NewTimer(retry)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("evict pod %s/%s: %w (last refusal: %v)", pod.Namespace, pod.Name, ctx.Err(), err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitLocked(ctx, func() bool {
		p := c.pods[key(pod.Namespace, pod.Name)]
		return p == nil || p.UID != pod.UID
	})
}
