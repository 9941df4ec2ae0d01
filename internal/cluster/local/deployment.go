package local

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// deployment is a stored Deployment and what the cluster saw of its
// latest rollout.
type deployment struct {
	d             *appsv1.Deployment
	completedAt   time.Time // zero until the latest rollout completed
	oldPodsGoneAt time.Time // zero until its old pods were gone
}

// applyDeploymentLocked stores d, defaulted as the API server defaults it
// (spec D1), keeping what the cluster saw of the rollout when the pod
// template did not change.
func (c *Cluster) applyDeploymentLocked(d *appsv1.Deployment) error {
	if d.Spec.Replicas == nil {
		r := cluster.DefaultReplicas
		d.Spec.Replicas = &r
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Selector == nil {
		return fmt.Errorf("no selector")
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		return fmt.Errorf("selector does not match the template's labels")
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		var surge, unavailable = d.Spec.Strategy.RollingUpdate, d.Spec.Strategy.RollingUpdate
		if surge != nil && surge.MaxSurge != nil && unavailable.MaxUnavailable != nil &&
			surge.MaxSurge.String() == "0" && unavailable.MaxUnavailable.String() == "0" {
			// Validation rejects a literal 0 for both (D2).
			return fmt.Errorf("maxSurge and maxUnavailable may not both be 0")
		}
		if _, _, err := c.fenceposts(d); err != nil {
			return err
		}
	}
	k := key(d.Namespace, d.Name)
	prev := c.deployments[k]
	if prev == nil {
		d.UID = types.UID(utilrand.String(16))
		c.deployments[k] = &deployment{d: d}
		return nil
	}
	d.UID = prev.d.UID
	if templateHash(&prev.d.Spec.Template) != templateHash(&d.Spec.Template) || *prev.d.Spec.Replicas != *d.Spec.Replicas {
		prev.completedAt, prev.oldPodsGoneAt = time.Time{}, time.Time{}
	}
	prev.d = d
	return nil
}

// fenceposts returns d's surge and unavailable bounds (D2).
func (c *Cluster) fenceposts(d *appsv1.Deployment) (surge, unavailable int32, err error) {
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil {
		ru = &appsv1.RollingUpdateDeployment{}
	}
	return cluster.ResolveFenceposts(ru.MaxSurge, ru.MaxUnavailable, *d.Spec.Replicas)
}

// templateHash is the pod-template-hash of a template: what tells a new
// ReplicaSet from the old ones (k8s.io/kubernetes pkg/controller/controller_utils.go,
// ComputeHash, over the template's JSON here).
func templateHash(t *corev1.PodTemplateSpec) string {
	data, _ := json.Marshal(t)
	h := fnv.New32a()
	h.Write(data)
	return utilrand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// RolloutRestart sets the template's restartedAt annotation to now, as
// `kubectl rollout restart` does (spec D11), which starts a rollout.
func (c *Cluster) RolloutRestart(ctx context.Context, namespace, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	dep := c.deployments[key(namespace, name)]
	if dep == nil {
		return fmt.Errorf("restart deployment %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	d := dep.d.DeepCopy()
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	at := c.clock.Now().Format(time.RFC3339Nano)
	if d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == at {
		return fmt.Errorf("restart deployment %s/%s: already restarted at %s", namespace, name, at)
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = at
	dep.d = d
	dep.completedAt, dep.oldPodsGoneAt = time.Time{}, time.Time{}
	c.changedLocked()
	return nil
}

// Scale sets the Deployment's replicas.
func (c *Cluster) Scale(ctx context.Context, namespace, name string, replicas int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	dep := c.deployments[key(namespace, name)]
	if dep == nil {
		return fmt.Errorf("scale deployment %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	if replicas < 0 {
		return fmt.Errorf("scale deployment %s/%s: negative replicas %d", namespace, name, replicas)
	}
	d := dep.d.DeepCopy()
	d.Spec.Replicas = &replicas
	dep.d = d
	dep.completedAt, dep.oldPodsGoneAt = time.Time{}, time.Time{}
	c.changedLocked()
	return nil
}

// RolloutStatus waits until the Deployment's rollout completed and its old
// pods are gone.
func (c *Cluster) RolloutStatus(ctx context.Context, namespace, name string) (cluster.RolloutStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(namespace, name)
	if c.deployments[k] == nil {
		return cluster.RolloutStatus{}, fmt.Errorf("rollout status of deployment %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	status := func() cluster.RolloutStatus {
		dep := c.deployments[k]
		if dep == nil {
			return cluster.RolloutStatus{}
		}
		return cluster.RolloutStatus{Complete: !dep.completedAt.IsZero(), CompletedAt: dep.completedAt, OldPodsGoneAt: dep.oldPodsGoneAt}
	}
	err := c.waitLocked(ctx, func() bool {
		s := status()
		return s.Complete && !s.OldPodsGoneAt.IsZero()
	})
	if err != nil {
		err = fmt.Errorf("rollout status of deployment %s/%s: %w", namespace, name, err)
	}
	return status(), err
}

// rsView is a ReplicaSet with the counts its status would hold (D6).
type rsView struct {
	rs                *appsv1.ReplicaSet
	spec              int32
	active, available int32
	pods              []*corev1.Pod // active pods
	all               int32         // pods of any state, terminating ones included
}

// viewLocked counts rs's pods. It also returns when the next of its pods
// becomes available through minReadySeconds.
func (c *Cluster) viewLocked(rs *appsv1.ReplicaSet) (rsView, time.Time) {
	v := rsView{rs: rs, spec: *rs.Spec.Replicas}
	var next time.Time
	now := c.clock.Now()
	for _, p := range sortedValues(c.pods) {
		if !ownedBy(p, rs) {
			continue
		}
		v.all++
		// Active: not terminal and not being deleted (IsPodActive).
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v.active++
		v.pods = append(v.pods, p)
		if !podReady(p) {
			continue
		}
		since := readySince(p)
		minReady := time.Duration(rs.Spec.MinReadySeconds) * time.Second
		if availableAt := since.Add(minReady); minReady == 0 || !availableAt.After(now) {
			v.available++
		} else if next.IsZero() || availableAt.Before(next) {
			next = availableAt
		}
	}
	return v, next
}

func ownedBy(p *corev1.Pod, rs *appsv1.ReplicaSet) bool {
	for _, o := range p.OwnerReferences {
		if o.UID == rs.UID {
			return true
		}
	}
	return false
}

func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// replicaSetsLocked returns d's ReplicaSets, oldest first, and the one of
// its current template, creating it (with 0 replicas) if create is true.
func (c *Cluster) replicaSetsLocked(d *appsv1.Deployment, create bool) (newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) {
	hash := templateHash(&d.Spec.Template)
	var all []*appsv1.ReplicaSet
	for _, rs := range c.rss {
		if metav1.IsControlledBy(rs, d) {
			all = append(all, rs)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		return all[i].CreationTimestamp.Before(&all[j].CreationTimestamp) || all[i].Name < all[j].Name && all[i].CreationTimestamp.Equal(&all[j].CreationTimestamp)
	})
	for _, rs := range all {
		if rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash {
			newRS = rs
		} else {
			old = append(old, rs)
		}
	}
	if newRS == nil && create {
		tmpl := d.Spec.Template.DeepCopy()
		if tmpl.Labels == nil {
			tmpl.Labels = map[string]string{}
		}
		tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
		zero := int32(0)
		newRS = &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{
				Name: d.Name + "-" + hash, Namespace: d.Namespace, UID: types.UID(utilrand.String(16)),
				Labels:            tmpl.Labels,
				CreationTimestamp: metav1.NewTime(c.clock.Now()),
				OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
			},
			Spec: appsv1.ReplicaSetSpec{Replicas: &zero, MinReadySeconds: d.Spec.MinReadySeconds, Template: *tmpl,
				Selector: d.Spec.Selector},
		}
		c.rss[key(newRS.Namespace, newRS.Name)] = newRS
	}
	if newRS != nil {
		newRS.Spec.MinReadySeconds = d.Spec.MinReadySeconds
	}
	return newRS, old
}

// scaleLocked sets rs's replicas and records the change.
func (c *Cluster) scaleLocked(rs *appsv1.ReplicaSet, to int32) {
	from := *rs.Spec.Replicas
	if from == to {
		return
	}
	rs.Spec.Replicas = &to
	c.record(cluster.Event{Kind: cluster.ReplicaSetScaled, Namespace: rs.Namespace, Object: "ReplicaSet/" + rs.Name,
		Fields: map[string]string{"from": strconv.Itoa(int(from)), "to": strconv.Itoa(int(to))}})
}

// syncDeploymentLocked runs one pass of the deployment controller over d.
func (c *Cluster) syncDeploymentLocked(dep *deployment) {
	d := dep.d
	replicas := *d.Spec.Replicas
	newRS, old := c.replicaSetsLocked(d, true)
	newView, _ := c.viewLocked(newRS)
	var oldViews []rsView
	var oldSpec int32
	for _, rs := range old {
		v, _ := c.viewLocked(rs)
		oldViews = append(oldViews, v)
		oldSpec += v.spec
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		// Recreate: scale the old ReplicaSets to zero, wait until their
		// pods are gone, then scale the new one up
		// (pkg/controller/deployment/recreate.go, rolloutRecreate).
		oldPods := int32(0)
		for _, v := range oldViews {
			c.scaleLocked(v.rs, 0)
			oldPods += v.all
		}
		if oldPods == 0 {
			c.scaleLocked(newRS, replicas)
		}
		return
	}
	// Only one active ReplicaSet: a scaling event, not a rollout.
	if oldSpec == 0 {
		c.scaleLocked(newRS, replicas)
		return
	}
	surge, maxUnavailable, _ := c.fenceposts(d)
	// rolloutRolling: scale up, else scale down (D3).
	total := newView.spec + oldSpec
	if newSpec := newRSNewReplicas(replicas, surge, total, newView.spec); newSpec != newView.spec {
		c.scaleLocked(newRS, newSpec)
		return
	}
	c.reconcileOldLocked(replicas, min(maxUnavailable, replicas), newView, oldViews)
}

// newRSNewReplicas is the new ReplicaSet's size for the next step (D4,
// deployment_util.go NewRSNewReplicas).
func newRSNewReplicas(replicas, surge, total, newSpec int32) int32 {
	maxTotal := replicas + surge
	if total >= maxTotal {
		return newSpec
	}
	return newSpec + min(maxTotal-total, replicas-newSpec)
}

// reconcileOldLocked scales the old ReplicaSets down as far as the
// unavailability bound allows (D5, rolling.go reconcileOldReplicaSets).
func (c *Cluster) reconcileOldLocked(replicas, maxUnavailable int32, newView rsView, oldViews []rsView) {
	all := newView.spec
	for _, v := range oldViews {
		all += v.spec
	}
	minAvailable := replicas - maxUnavailable
	maxScaledDown := all - minAvailable - (newView.spec - newView.available)
	if maxScaledDown <= 0 {
		return
	}
	// cleanupUnhealthyReplicas: unavailable old pods go first.
	cleaned := int32(0)
	for i := range oldViews {
		v := &oldViews[i]
		if cleaned >= maxScaledDown || v.spec == 0 || v.spec == v.available {
			continue
		}
		n := min(maxScaledDown-cleaned, v.spec-v.available)
		c.scaleLocked(v.rs, v.spec-n)
		v.spec -= n
		cleaned += n
	}
	// scaleDownOldReplicaSetsForRollingUpdate: then as many available
	// ones as keep minAvailable.
	available := newView.available
	for _, v := range oldViews {
		available += v.available
	}
	if available <= minAvailable {
		return
	}
	excess, scaled := available-minAvailable, int32(0)
	for i := range oldViews {
		v := &oldViews[i]
		if scaled >= excess || v.spec == 0 {
			continue
		}
		n := min(v.spec, excess-scaled)
		c.scaleLocked(v.rs, v.spec-n)
		scaled += n
	}
}

// syncReplicaSetLocked creates or deletes pods until rs has its replicas
// active (D6, D8); it also notes when minReadySeconds makes one available.
func (c *Cluster) syncReplicaSetLocked(rs *appsv1.ReplicaSet) {
	v, next := c.viewLocked(rs)
	if !next.IsZero() && (c.nextWake.IsZero() || next.Before(c.nextWake)) {
		c.nextWake = next
	}
	switch diff := v.active - *rs.Spec.Replicas; {
	case diff < 0:
		for range -diff {
			c.createPodLocked(rs)
		}
		c.changedLocked()
	case diff > 0:
		for _, p := range victims(v.pods)[:diff] {
			c.deletePodLocked(p, nil)
		}
	}
}

// victims orders active pods for deletion, first to go first
// (controller_utils.go ActivePodsWithRanks.Less, without deletion cost and
// node ranks): unscheduled, Pending, not Ready, Ready more recently, more
// restarts, newer.
func victims(pods []*corev1.Pod) []*corev1.Pod {
	out := append([]*corev1.Pod(nil), pods...)
	rank := func(p *corev1.Pod) (int, int, int) {
		scheduled, running, ready := 0, 0, 0
		if p.Spec.NodeName != "" {
			scheduled = 1
		}
		if p.Status.Phase == corev1.PodRunning {
			running = 1
		}
		if podReady(p) {
			ready = 1
		}
		return scheduled, running, ready
	}
	restarts := func(p *corev1.Pod) int32 {
		var n int32
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
		return n
	}
	sort.SliceStable(out, func(i, j int) bool {
		si, ri, di := rank(out[i])
		sj, rj, dj := rank(out[j])
		switch {
		case si != sj:
			return si < sj
		case ri != rj:
			return ri < rj
		case di != dj:
			return di < dj
		}
		if ti, tj := readySince(out[i]), readySince(out[j]); di == 1 && !ti.Equal(tj) {
			return ti.After(tj)
		}
		if a, b := restarts(out[i]), restarts(out[j]); a != b {
			return a > b
		}
		return out[j].CreationTimestamp.Before(&out[i].CreationTimestamp)
	})
	return out
}

// observeRolloutLocked notes when d's rollout completed (D12) and when its
// old pods were gone.
func (c *Cluster) observeRolloutLocked(dep *deployment) {
	d := dep.d
	newRS, old := c.replicaSetsLocked(d, false)
	if newRS == nil {
		return
	}
	newView, _ := c.viewLocked(newRS)
	replicas := *d.Spec.Replicas
	total, available, oldPods := newView.active, newView.available, int32(0)
	for _, rs := range old {
		v, _ := c.viewLocked(rs)
		total += v.active
		available += v.available
		oldPods += v.all
		if v.spec != 0 {
			return
		}
	}
	if dep.completedAt.IsZero() && newView.spec == replicas && newView.active == replicas && total == replicas && available == replicas {
		dep.completedAt = c.clock.Now()
		c.notifyLocked()
	}
	if !dep.completedAt.IsZero() && dep.oldPodsGoneAt.IsZero() && oldPods == 0 {
		dep.oldPodsGoneAt = c.clock.Now()
		c.notifyLocked()
	}
}
