package local

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// budgetObserveDelay is how long the disruption controller takes to
// observe a new or changed PodDisruptionBudget: until then the budget's
// status.observedGeneration lags its generation, and the eviction API
// refuses every eviction it guards with 429 (X3). Upstream gives no
// number: the controller syncs a budget as soon as its watch delivers it.
const budgetObserveDelay = 100 * time.Millisecond

// applyBudgetLocked stores PodDisruptionBudget b, validated as the API
// server does. Its generation goes up when its spec changed, and the
// disruption controller observes it after budgetObserveDelay.
func (c *Cluster) applyBudgetLocked(b *policyv1.PodDisruptionBudget) error {
	if b.Spec.MinAvailable != nil && b.Spec.MaxUnavailable != nil {
		return fmt.Errorf("spec: minAvailable and maxUnavailable cannot be both set")
	}
	if _, err := metav1.LabelSelectorAsSelector(b.Spec.Selector); err != nil {
		return fmt.Errorf("spec.selector: %w", err)
	}
	k := key(b.Namespace, b.Name)
	prev := c.pdbs[k]
	switch {
	case prev == nil:
		b.Generation, b.Status = 1, policyv1.PodDisruptionBudgetStatus{}
	case equality.Semantic.DeepEqual(prev.Spec, b.Spec):
		b.Generation, b.Status = prev.Generation, prev.Status
	default:
		b.Generation, b.Status = prev.Generation+1, prev.Status
	}
	c.pdbs[k] = b
	if b.Status.ObservedGeneration < b.Generation {
		c.pdbObserve[k] = c.clock.Now().Add(budgetObserveDelay)
	}
	return nil
}

// syncBudgetsLocked runs the disruption controller over every budget that
// it has observed (k8s.io/kubernetes pkg/controller/disruption/disruption.go,
// trySync and updatePdbStatus): it writes how many of the budget's pods
// are expected and healthy, how many it keeps, how many evictions it
// allows, and which evicted pods it still counts as disrupted (X2).
func (c *Cluster) syncBudgetsLocked() {
	now := c.clock.Now()
	for k, b := range c.pdbs {
		if at, ok := c.pdbObserve[k]; ok {
			if now.Before(at) {
				c.wakeAtLocked(at)
				continue
			}
			delete(c.pdbObserve, k)
		}
		st, recheck, err := c.budgetStatusLocked(b, now)
		if err != nil {
			continue // a bad percentage: the controller fails the sync
		}
		if !equality.Semantic.DeepEqual(b.Status, st) {
			b.Status = st
			c.notifyLocked()
		}
		if !recheck.IsZero() {
			c.wakeAtLocked(recheck)
		}
	}
}

// budgetStatusLocked computes b's status at now, and when an entry of its
// disruptedPods expires.
func (c *Cluster) budgetStatusLocked(b *policyv1.PodDisruptionBudget, now time.Time) (policyv1.PodDisruptionBudgetStatus, time.Time, error) {
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil {
		return policyv1.PodDisruptionBudgetStatus{}, time.Time{}, err
	}
	var selected, healthy int32
	var recheck time.Time
	disrupted := map[string]metav1.Time{}
	owners := map[string]*appsv1.ReplicaSet{}
	for _, p := range sortedValues(c.pods) {
		if p.Namespace != b.Namespace || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		selected++
		for _, rs := range c.rss {
			if ownedBy(p, rs) {
				owners[rs.Name] = rs
			}
		}
		if p.DeletionTimestamp != nil {
			continue
		}
		// buildDisruptedPodMap and countHealthyPods: an evicted pod not
		// yet being deleted stays disrupted for DisruptedPodTimeout.
		if at, ok := b.Status.DisruptedPods[p.Name]; ok {
			if expires := at.Add(cluster.DisruptedPodTimeout); expires.After(now) {
				disrupted[p.Name] = at
				if recheck.IsZero() || expires.Before(recheck) {
					recheck = expires
				}
				continue
			}
		}
		if podReady(p) {
			healthy++
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
	expected, desired, err := cluster.DesiredHealthy(b.Spec, scale, selected)
	if err != nil {
		return policyv1.PodDisruptionBudgetStatus{}, time.Time{}, err
	}
	st := policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: b.Generation,
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       expected,
		DisruptionsAllowed: cluster.DisruptionsAllowed(healthy, expected, desired),
		Conditions:         append([]metav1.Condition(nil), b.Status.Conditions...),
	}
	if len(disrupted) > 0 {
		st.DisruptedPods = disrupted
	}
	setDisruptionAllowed(&st, b.Generation, now)
	return st, recheck, nil
}

// setDisruptionAllowed sets st's DisruptionAllowed condition from its
// disruptionsAllowed (k8s.io/kubernetes pkg/apis/policy/helper,
// UpdateDisruptionAllowedCondition).
func setDisruptionAllowed(st *policyv1.PodDisruptionBudgetStatus, generation int64, now time.Time) {
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
		Reason: policyv1.SufficientPodsReason, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
	if st.DisruptionsAllowed <= 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// Evict evicts pod namespace/name as the eviction API does (X3, X4;
// k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go,
// EvictionREST.Create): a pod that is Pending, terminal or already
// terminating is deleted without a budget check; a pod no budget selects
// is deleted; a pod that more than one budget selects is an error (500).
// Otherwise the budget decides from its status as the disruption
// controller last wrote it: a pod that is not Ready goes without using the
// budget when the budget has all the healthy pods it wants, or always with
// unhealthyPodEvictionPolicy AlwaysAllow; a budget whose latest generation
// the controller has not observed yet, or that allows no disruption,
// refuses with a 429 [*cluster.EvictionError]; an eviction it allows uses
// one of its disruptions, and the pod counts as disrupted until its
// deletion starts.
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
		names := make([]string, len(budgets))
		for i, b := range budgets {
			names[i] = b.Name
		}
		c.refuseLocked(pod, strings.Join(names, ","), http.StatusInternalServerError, "more than one PodDisruptionBudget selects the pod")
		return fmt.Errorf("evict pod %s/%s: %d: the pod has more than one PodDisruptionBudget (%s), which the eviction API does not support",
			namespace, name, http.StatusInternalServerError, strings.Join(names, ", "))
	}
	b := budgets[0]
	// X4: a pod that is not Ready goes without using the budget when the
	// budget is met, or always with AlwaysAllow.
	if !podReady(pod) {
		policy := b.Spec.UnhealthyPodEvictionPolicy
		if (policy != nil && *policy == policyv1.AlwaysAllow) || (b.Status.CurrentHealthy >= b.Status.DesiredHealthy && b.Status.DesiredHealthy > 0) {
			c.evictLocked(pod, b.Name, grace)
			return nil
		}
	}
	// checkAndDecrement.
	switch {
	case b.Status.ObservedGeneration < b.Generation:
		c.refuseLocked(pod, b.Name, http.StatusTooManyRequests, fmt.Sprintf("The disruption budget %s is still being processed by the server.", b.Name))
		return &cluster.EvictionError{Namespace: namespace, Pod: name, Budget: b.Name, Status: http.StatusTooManyRequests}
	case b.Status.DisruptionsAllowed == 0:
		c.refuseLocked(pod, b.Name, http.StatusTooManyRequests, fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
			b.Name, b.Status.DesiredHealthy, b.Status.CurrentHealthy))
		return &cluster.EvictionError{Namespace: namespace, Pod: name, Budget: b.Name, Status: http.StatusTooManyRequests}
	}
	b.Status.DisruptionsAllowed--
	if b.Status.DisruptedPods == nil {
		b.Status.DisruptedPods = map[string]metav1.Time{}
	}
	b.Status.DisruptedPods[pod.Name] = metav1.NewTime(c.clock.Now())
	setDisruptionAllowed(&b.Status, b.Generation, c.clock.Now())
	c.evictLocked(pod, b.Name, grace)
	return nil
}

// refuseLocked records the eviction API's refusal to evict pod.
func (c *Cluster) refuseLocked(pod *corev1.Pod, budget string, status int, cause string) {
	c.record(cluster.Event{Kind: cluster.EvictionRefused, Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName,
		Object: "PodDisruptionBudget/" + budget,
		Fields: map[string]string{"budget": budget, "status": strconv.Itoa(status), "cause": cause}})
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

// Drain cordons node and evicts its pods concurrently as `kubectl drain`
// does (X6), with cluster.EvictAll: a refusal is retried every
// opts.RetryDelay, and Drain then waits until each evicted pod is gone.
func (c *Cluster) Drain(ctx context.Context, node string, opts cluster.DrainOptions) error {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
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
	evict := func(ctx context.Context, p *corev1.Pod) error {
		return c.evict(p.Namespace, p.Name, opts.GracePeriodSeconds)
	}
	if err := cluster.EvictAll(ctx, targets, opts.RetryDelay, c.clock, evict, c.waitGone); err != nil {
		return fmt.Errorf("drain node %s: %w", node, err)
	}
	return nil
}

// waitGone waits until pod (this UID) is gone from the store.
func (c *Cluster) waitGone(ctx context.Context, pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitLocked(ctx, func() bool {
		p := c.pods[key(pod.Namespace, pod.Name)]
		return p == nil || p.UID != pod.UID
	})
}
