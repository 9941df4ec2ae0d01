package local

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/integer"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// The annotations the deployment controller keeps on each of its
// ReplicaSets: the Deployment's replicas and replicas + maxSurge when it
// last sized the ReplicaSet. A desired-replicas that differs from the
// Deployment's marks a scaling event; max-replicas is the base of
// proportional scaling (k8s.io/kubernetes
// pkg/controller/deployment/util/deployment_util.go, DesiredReplicasAnnotation,
// MaxReplicasAnnotation).
const (
	desiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	maxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
)

// The reasons of a Deployment's conditions (deployment_util.go); the
// timed-out one is cluster.TimedOutReason.
const (
	reasonNewRSCreated    = "NewReplicaSetCreated"
	reasonFoundNewRS      = "FoundNewReplicaSet"
	reasonRSUpdated       = "ReplicaSetUpdated"
	reasonNewRSAvailable  = "NewReplicaSetAvailable"
	reasonMinAvailable    = "MinimumReplicasAvailable"
	reasonMinNotAvailable = "MinimumReplicasUnavailable"
)

// burstReplicas is the most pods a ReplicaSet creates or deletes in one
// sync (k8s.io/kubernetes pkg/controller/replicaset/replica_set.go,
// BurstReplicas; D9).
const burstReplicas = 500

// deployment is a stored Deployment, whose status (d.Status) the
// controller keeps, and what the cluster saw of its latest generation.
type deployment struct {
	d             *appsv1.Deployment
	completedAt   time.Time // zero until the latest generation's rollout completed
	oldPodsGoneAt time.Time // zero until then its old pods were gone
}

// setSpec replaces dep's Deployment with d, whose spec differs: the
// generation goes up, the status stays, and the rollout's moments start
// over.
func (dep *deployment) setSpec(d *appsv1.Deployment) {
	d.UID, d.Generation, d.Status = dep.d.UID, dep.d.Generation+1, dep.d.Status
	dep.d = d
	dep.completedAt, dep.oldPodsGoneAt = time.Time{}, time.Time{}
}

// applyDeploymentLocked stores d, defaulted and validated as the API server
// does (D1, D2). Its status is the stored one's; its generation goes
// up when its spec changed.
func (c *Cluster) applyDeploymentLocked(d *appsv1.Deployment) error {
	if d.Spec.Replicas == nil {
		r := cluster.DefaultReplicas
		d.Spec.Replicas = &r
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		p := cluster.DefaultProgressDeadlineSeconds
		d.Spec.ProgressDeadlineSeconds = &p
	}
	if d.Spec.Selector == nil {
		return fmt.Errorf("spec.selector: required")
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("spec.selector: %w", err)
	}
	if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		return fmt.Errorf("spec.template.metadata.labels: the selector does not match them")
	}
	if *d.Spec.ProgressDeadlineSeconds <= d.Spec.MinReadySeconds {
		return fmt.Errorf("spec.progressDeadlineSeconds: %d must be greater than minReadySeconds (%d)", *d.Spec.ProgressDeadlineSeconds, d.Spec.MinReadySeconds)
	}
	switch ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type {
	case appsv1.RollingUpdateDeploymentStrategyType:
		if ru != nil && ru.MaxSurge != nil && ru.MaxUnavailable != nil &&
			ru.MaxSurge.String() == "0" && ru.MaxUnavailable.String() == "0" {
			// Validation rejects a literal 0 for both (D2).
			return fmt.Errorf("spec.strategy.rollingUpdate: maxSurge and maxUnavailable may not both be 0")
		}
		if _, _, err := c.fenceposts(d); err != nil {
			return fmt.Errorf("spec.strategy.rollingUpdate.%w", err)
		}
	case appsv1.RecreateDeploymentStrategyType:
		if ru != nil {
			return fmt.Errorf("spec.strategy.rollingUpdate: may not be specified when strategy type is Recreate")
		}
	default:
		return fmt.Errorf("spec.strategy.type: %q is neither RollingUpdate nor Recreate", d.Spec.Strategy.Type)
	}
	k := key(d.Namespace, d.Name)
	prev := c.deployments[k]
	if prev == nil {
		d.UID, d.Generation, d.Status = types.UID(utilrand.String(16)), 1, appsv1.DeploymentStatus{}
		c.deployments[k] = &deployment{d: d}
		return nil
	}
	if !equality.Semantic.DeepEqual(prev.d.Spec, d.Spec) {
		prev.setSpec(d)
	}
	// Metadata changes no generation.
	prev.d.Labels, prev.d.Annotations = d.Labels, d.Annotations
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

// maxSurge is how many pods d may run above its replicas: none unless it
// rolls (deployment_util.go, MaxSurge).
func (c *Cluster) maxSurge(d *appsv1.Deployment) int32 {
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		return 0
	}
	surge, _, _ := c.fenceposts(d)
	return surge
}

// maxUnavailable is how many of d's replicas may be unavailable: none
// unless it rolls, at most its replicas (deployment_util.go,
// MaxUnavailable).
func (c *Cluster) maxUnavailable(d *appsv1.Deployment) int32 {
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || *d.Spec.Replicas == 0 {
		return 0
	}
	_, unavailable, _ := c.fenceposts(d)
	return min(unavailable, *d.Spec.Replicas)
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
// `kubectl rollout restart` does (D11), which starts a rollout. It
// refuses a paused Deployment.
func (c *Cluster) RolloutRestart(ctx context.Context, namespace, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	dep := c.deployments[key(namespace, name)]
	if dep == nil {
		return fmt.Errorf("restart deployment %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	if dep.d.Spec.Paused {
		return fmt.Errorf("restart deployment %s/%s: can't restart paused deployment (run rollout resume first)", namespace, name)
	}
	d := dep.d.DeepCopy()
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	at := c.clock.Now().Format(time.RFC3339Nano)
	if d.Spec.Template.Annotations[cluster.RestartedAtAnnotation] == at {
		return fmt.Errorf("restart deployment %s/%s: already restarted at %s", namespace, name, at)
	}
	d.Spec.Template.Annotations[cluster.RestartedAtAnnotation] = at
	dep.setSpec(d)
	c.changedLocked()
	return nil
}

// Scale sets the Deployment's replicas. Scaling in the middle of a rollout
// resizes every ReplicaSet in proportion (D3; sync.go scale).
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
	if *dep.d.Spec.Replicas == replicas {
		return nil
	}
	d := dep.d.DeepCopy()
	d.Spec.Replicas = &replicas
	dep.setSpec(d)
	c.changedLocked()
	return nil
}

// RolloutStatus waits until the Deployment's rollout completed and its old
// pods are gone. Like `kubectl rollout status`, it returns an error at once
// when the controller, having observed the latest generation, reports that
// the rollout exceeded its progress deadline (D10).
func (c *Cluster) RolloutStatus(ctx context.Context, namespace, name string) (cluster.RolloutStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(namespace, name)
	if c.deployments[k] == nil {
		return cluster.RolloutStatus{}, fmt.Errorf("rollout status of deployment %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	status := func() cluster.RolloutStatus {
		dep := c.deployments[k]
		return cluster.RolloutStatus{Complete: !dep.completedAt.IsZero(), CompletedAt: dep.completedAt, OldPodsGoneAt: dep.oldPodsGoneAt}
	}
	err := c.waitLocked(ctx, func() bool {
		s := status()
		return timedOut(c.deployments[k].d) || s.Complete && !s.OldPodsGoneAt.IsZero()
	})
	if err == nil && timedOut(c.deployments[k].d) {
		err = fmt.Errorf("deployment %q exceeded its progress deadline", name)
	}
	if err != nil {
		err = fmt.Errorf("rollout status of deployment %s/%s: %w", namespace, name, err)
	}
	return status(), err
}

// timedOut reports whether d's status, of its latest generation, says its
// rollout exceeded its progress deadline (kubectl
// pkg/polymorphichelpers/rollout_status.go, DeploymentStatusViewer.Status).
func timedOut(d *appsv1.Deployment) bool {
	cond := deploymentCondition(d.Status, appsv1.DeploymentProgressing)
	return d.Generation <= d.Status.ObservedGeneration && cond != nil && cond.Reason == cluster.TimedOutReason
}

// rsView is a ReplicaSet with the counts its status would hold (D6).
type rsView struct {
	rs                       *appsv1.ReplicaSet
	spec                     int32
	active, ready, available int32
	terminating              int32         // pods being deleted, not yet terminal
	running                  int32         // pods not terminal, terminating ones included
	pods                     []*corev1.Pod // active pods, by name
}

// viewLocked counts rs's pods. It also returns when the next of its pods
// becomes available through minReadySeconds.
func (c *Cluster) viewLocked(rs *appsv1.ReplicaSet) (rsView, time.Time) {
	v := rsView{rs: rs, spec: *rs.Spec.Replicas}
	var next time.Time
	now := c.clock.Now()
	for _, p := range c.pods {
		if !ownedBy(p, rs) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v.running++
		// Active: not terminal and not being deleted (IsPodActive).
		if p.DeletionTimestamp != nil {
			v.terminating++
			continue
		}
		v.active++
		v.pods = append(v.pods, p)
		if !podReady(p) {
			continue
		}
		v.ready++
		since := readySince(p)
		minReady := time.Duration(rs.Spec.MinReadySeconds) * time.Second
		if availableAt := since.Add(minReady); minReady == 0 || !availableAt.After(now) {
			v.available++
		} else if next.IsZero() || availableAt.Before(next) {
			next = availableAt
		}
	}
	// The store's order, by name: rs's pods share its namespace.
	sort.Slice(v.pods, func(i, j int) bool { return v.pods[i].Name < v.pods[j].Name })
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

// replicaSetsLocked returns d's ReplicaSets: the one of its current
// template, nil if there is none yet, and the others, oldest first.
func (c *Cluster) replicaSetsLocked(d *appsv1.Deployment) (newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) {
	hash := templateHash(&d.Spec.Template)
	var all []*appsv1.ReplicaSet
	for _, rs := range c.rss {
		if metav1.IsControlledBy(rs, d) {
			all = append(all, rs)
		}
	}
	sortByCreation(all)
	for _, rs := range all {
		if rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash {
			newRS = rs
		} else {
			old = append(old, rs)
		}
	}
	return newRS, old
}

// withNew returns old followed by newRS, if there is one, in a new slice.
func withNew(old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	all := append([]*appsv1.ReplicaSet(nil), old...)
	if newRS != nil {
		all = append(all, newRS)
	}
	return all
}

// sortByCreation sorts ReplicaSets oldest first, by name when created at
// once (controller_utils.go, ReplicaSetsByCreationTimestamp).
func sortByCreation(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool { return createdBefore(rss[i], rss[j]) })
}

func createdBefore(a, b *appsv1.ReplicaSet) bool {
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.Name < b.Name
	}
	return a.CreationTimestamp.Before(&b.CreationTimestamp)
}

// createReplicaSetLocked creates the ReplicaSet of d's current template,
// with no replicas and with d's sizes in its annotations, and notes the
// start of a rollout in d's Progressing condition (sync.go
// getNewReplicaSet).
func (c *Cluster) createReplicaSetLocked(d *appsv1.Deployment) *appsv1.ReplicaSet {
	hash := templateHash(&d.Spec.Template)
	tmpl := d.Spec.Template.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	zero := int32(0)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-" + hash, Namespace: d.Namespace, UID: types.UID(utilrand.String(16)),
			Labels:            tmpl.Labels,
			CreationTimestamp: metav1.NewTime(c.clock.Now()),
			OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
			Annotations: map[string]string{
				desiredReplicasAnnotation: strconv.Itoa(int(*d.Spec.Replicas)),
				maxReplicasAnnotation:     strconv.Itoa(int(*d.Spec.Replicas + c.maxSurge(d))),
			},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, MinReadySeconds: d.Spec.MinReadySeconds, Template: *tmpl,
			Selector: d.Spec.Selector},
	}
	c.rss[key(rs.Namespace, rs.Name)] = rs
	if hasProgressDeadline(d) {
		setDeploymentCondition(&d.Status, progressing(corev1.ConditionTrue, reasonNewRSCreated,
			fmt.Sprintf("Created new replica set %q", rs.Name), c.clock.Now()))
	}
	return rs
}

// scaleLocked sets rs's replicas to to, and its annotations to d's sizes,
// and records the change. Unless force is set, a ReplicaSet of that size
// is left alone, annotations and all (sync.go scaleReplicaSet).
func (c *Cluster) scaleLocked(d *appsv1.Deployment, rs *appsv1.ReplicaSet, to int32, force bool) {
	from := *rs.Spec.Replicas
	if from == to && !force {
		return
	}
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	rs.Annotations[desiredReplicasAnnotation] = strconv.Itoa(int(*d.Spec.Replicas))
	rs.Annotations[maxReplicasAnnotation] = strconv.Itoa(int(*d.Spec.Replicas + c.maxSurge(d)))
	if from == to {
		return
	}
	rs.Spec.Replicas = &to
	c.record(cluster.Event{Kind: cluster.ReplicaSetScaled, Namespace: rs.Namespace, Object: "ReplicaSet/" + rs.Name,
		Fields: map[string]string{"from": strconv.Itoa(int(from)), "to": strconv.Itoa(int(to))}})
}

// syncDeploymentLocked runs one pass of the deployment controller over d
// (deployment_controller.go, syncDeployment): a paused Deployment, or one
// whose replicas changed, is only scaled; otherwise it rolls out as its
// strategy says.
func (c *Cluster) syncDeploymentLocked(dep *deployment) {
	d := dep.d
	newRS, old := c.replicaSetsLocked(d)
	if newRS != nil {
		newRS.Spec.MinReadySeconds = d.Spec.MinReadySeconds
		if hasProgressDeadline(d) && deploymentCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setDeploymentCondition(&d.Status, progressing(corev1.ConditionTrue, reasonFoundNewRS,
				fmt.Sprintf("Found new replica set %q", newRS.Name), c.clock.Now()))
		}
	}
	switch {
	case d.Spec.Paused || c.isScalingEvent(d, newRS, old):
		c.scaleDeploymentLocked(d, newRS, old)
	case d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType:
		c.rolloutRecreateLocked(d, newRS, old)
	default:
		c.rolloutRollingLocked(d, newRS, old)
	}
}

// isScalingEvent reports whether an active ReplicaSet of d was sized for
// other replicas than d's (sync.go isScalingEvent).
func (c *Cluster) isScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range withNew(old, newRS) {
		if *rs.Spec.Replicas == 0 {
			continue
		}
		if desired, ok := annotationInt32(rs, desiredReplicasAnnotation); ok && desired != *d.Spec.Replicas {
			return true
		}
	}
	return false
}

// annotationInt32 returns rs's annotation key as a non-negative int32, and
// whether it is one (deployment_util.go, getNonNegativeInt32FromAnnotation).
func annotationInt32(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, err := strconv.ParseUint(rs.Annotations[key], 10, 32)
	if err != nil || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

// scaleDeploymentLocked resizes d's ReplicaSets to d's replicas without
// rolling out (sync.go scale): the one active ReplicaSet, or the newest if
// none is, takes them all; a saturated new ReplicaSet leaves the old ones
// none; otherwise, in a rolling update, the change is shared among the
// active ReplicaSets in proportion to their sizes.
func (c *Cluster) scaleDeploymentLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) {
	replicas := *d.Spec.Replicas
	var active []*appsv1.ReplicaSet
	for _, rs := range withNew(old, newRS) {
		if *rs.Spec.Replicas > 0 {
			active = append(active, rs)
		}
	}
	// FindActiveOrLatest.
	if len(active) <= 1 {
		target := newRS
		switch {
		case len(active) == 1:
			target = active[0]
		case target == nil && len(old) > 0:
			target = old[len(old)-1]
		}
		if target != nil {
			c.scaleLocked(d, target, replicas, false)
		}
		return
	}
	if newRS != nil && c.saturated(d, newRS) {
		for _, rs := range active {
			if rs != newRS {
				c.scaleLocked(d, rs, 0, false)
			}
		}
		return
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		return
	}
	sizes := make([]rsSize, len(active))
	for i, rs := range active {
		maxReplicas, _ := annotationInt32(rs, maxReplicasAnnotation)
		sizes[i] = rsSize{rs: rs, replicas: *rs.Spec.Replicas, maxReplicas: maxReplicas}
	}
	for _, s := range proportionalSizes(sizes, replicas, c.maxSurge(d), d.Status.Replicas) {
		c.scaleLocked(d, s.rs, s.replicas, true)
	}
}

// saturated reports whether newRS runs all of d's replicas, sized for
// them, and all available (deployment_util.go, IsSaturated).
func (c *Cluster) saturated(d *appsv1.Deployment, newRS *appsv1.ReplicaSet) bool {
	desired, ok := annotationInt32(newRS, desiredReplicasAnnotation)
	v, _ := c.viewLocked(newRS)
	return ok && desired == *d.Spec.Replicas && v.spec == *d.Spec.Replicas && v.available == *d.Spec.Replicas
}

// rsSize is an active ReplicaSet as proportional scaling sees it.
type rsSize struct {
	rs          *appsv1.ReplicaSet
	replicas    int32 // spec.replicas
	maxReplicas int32 // its max-replicas annotation; 0 if missing or invalid
}

// proportionalSizes returns the new sizes of the active ReplicaSets of a
// RollingUpdate Deployment scaled to replicas (with surge) in the middle of
// a rollout, largest first, as sync.go scale and deployment_util.go
// GetReplicaSetProportion compute them. The room up to replicas + surge,
// or the excess above it, is shared in proportion to each ReplicaSet's
// size relative to the replicas + surge it was last sized for; newer
// ReplicaSets grow first and older ones shrink first among equals, and what
// rounding leaves goes to the largest. statusReplicas, the Deployment's
// status.replicas, stands for a missing annotation.
func proportionalSizes(rss []rsSize, replicas, surge, statusReplicas int32) []rsSize {
	out := append([]rsSize(nil), rss...)
	var total int32
	for _, s := range out {
		total += s.replicas
	}
	allowed := int32(0)
	if replicas > 0 {
		allowed = replicas + surge
	}
	toAdd := allowed - total
	if toAdd == 0 {
		return out
	}
	// ReplicaSetsBySizeNewer when growing, ReplicaSetsBySizeOlder when
	// shrinking.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].replicas != out[j].replicas {
			return out[i].replicas > out[j].replicas
		}
		if toAdd > 0 {
			return createdBefore(out[j].rs, out[i].rs)
		}
		return createdBefore(out[i].rs, out[j].rs)
	})
	added := int32(0)
	for i := range out {
		s := &out[i]
		if s.replicas == 0 || added == toAdd {
			continue
		}
		// getReplicaSetFraction.
		var fraction int32
		base := s.maxReplicas
		if base == 0 {
			base = statusReplicas
		}
		switch {
		case replicas == 0:
			fraction = -s.replicas
		case base != 0:
			fraction = integer.RoundToInt32(float64(s.replicas*(replicas+surge))/float64(base)) - s.replicas
		}
		// Never past what is left to add or remove.
		proportion := min(fraction, toAdd-added)
		if toAdd < 0 {
			proportion = max(fraction, toAdd-added)
		}
		s.replicas += proportion
		added += proportion
	}
	out[0].replicas = max(out[0].replicas+toAdd-added, 0)
	return out
}

// rolloutRollingLocked runs one step of a RollingUpdate (D3, rolling.go
// rolloutRolling): scale the new ReplicaSet up, creating it if need be;
// if that changed nothing, scale the old ones down.
func (c *Cluster) rolloutRollingLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) {
	if newRS == nil {
		newRS = c.createReplicaSetLocked(d)
	}
	replicas := *d.Spec.Replicas
	newView, _ := c.viewLocked(newRS)
	total := newView.spec
	var oldViews []rsView
	for _, rs := range old {
		v, _ := c.viewLocked(rs)
		oldViews = append(oldViews, v)
		total += v.spec
	}
	// reconcileNewReplicaSet.
	switch {
	case newView.spec > replicas:
		c.scaleLocked(d, newRS, replicas, false)
		return
	case newView.spec < replicas:
		if n := newRSNewReplicas(replicas, c.maxSurge(d), total, newView.spec); n != newView.spec {
			c.scaleLocked(d, newRS, n, false)
			return
		}
	}
	c.reconcileOldLocked(d, newView, oldViews)
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
func (c *Cluster) reconcileOldLocked(d *appsv1.Deployment, newView rsView, oldViews []rsView) {
	all := newView.spec
	for _, v := range oldViews {
		all += v.spec
	}
	minAvailable := *d.Spec.Replicas - c.maxUnavailable(d)
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
		c.scaleLocked(d, v.rs, v.spec-n, false)
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
		c.scaleLocked(d, v.rs, v.spec-n, false)
		scaled += n
	}
}

// rolloutRecreateLocked runs one step of a Recreate rollout (recreate.go
// rolloutRecreate): scale the old ReplicaSets to zero, wait until none of
// their pods runs, terminating ones included, then create the new
// ReplicaSet if need be and scale it up.
func (c *Cluster) rolloutRecreateLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) {
	scaled := false
	for _, rs := range old {
		if *rs.Spec.Replicas != 0 {
			c.scaleLocked(d, rs, 0, false)
			scaled = true
		}
	}
	if scaled {
		return
	}
	for _, rs := range old {
		if v, _ := c.viewLocked(rs); v.running > 0 {
			return
		}
	}
	if newRS == nil {
		newRS = c.createReplicaSetLocked(d)
	}
	c.scaleLocked(d, newRS, *d.Spec.Replicas, false)
}

// syncReplicaSetLocked creates or deletes pods until rs has its replicas
// active, at most burstReplicas at once (D6, D8, D9); it also notes when
// minReadySeconds makes one available.
func (c *Cluster) syncReplicaSetLocked(rs *appsv1.ReplicaSet) {
	v, next := c.viewLocked(rs)
	if !next.IsZero() {
		c.wakeAtLocked(next)
	}
	switch diff := v.active - *rs.Spec.Replicas; {
	case diff < 0:
		for range min(-diff, burstReplicas) {
			c.createPodLocked(rs)
		}
		c.changedLocked()
	case diff > 0:
		for _, p := range victims(v.pods, c.relatedPodsLocked(rs), c.clock.Now())[:min(diff, burstReplicas)] {
			c.deletePodLocked(p, nil)
		}
	}
}

// wakeAtLocked asks the controllers to run again at t, unless they run
// earlier.
func (c *Cluster) wakeAtLocked(t time.Time) {
	if c.nextWake.IsZero() || t.Before(c.nextWake) {
		c.nextWake = t
	}
}

// relatedPodsLocked returns the pods of every ReplicaSet with rs's
// controller, rs's own if it has none (replica_set.go,
// getIndirectlyRelatedPods).
func (c *Cluster) relatedPodsLocked(rs *appsv1.ReplicaSet) []*corev1.Pod {
	owner := metav1.GetControllerOf(rs)
	related := []*appsv1.ReplicaSet{rs}
	for _, other := range c.rss {
		if ref := metav1.GetControllerOf(other); other != rs && owner != nil && ref != nil && ref.UID == owner.UID {
			related = append(related, other)
		}
	}
	var out []*corev1.Pod
	for _, p := range sortedValues(c.pods) {
		for _, r := range related {
			if ownedBy(p, r) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// podDeletionCost is a pod's controller.kubernetes.io/pod-deletion-cost,
// 0 when unset or invalid (k8s.io/kubernetes pkg/apis/core/helper,
// GetDeletionCostFromPodAnnotations): a decimal int32 that starts with a
// minus sign or a digit, and with 0 only if it is 0.
func podDeletionCost(p *corev1.Pod) int32 {
	s, ok := p.Annotations[corev1.PodDeletionCost]
	if !ok || s == "" || s[0] == '+' || (s[0] == '0' && s != "0") {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0
	}
	return int32(v)
}

// victims orders active pods for deletion, first to go first, as a
// ReplicaSet that scales down does (D8; replica_set.go getPodsToDelete,
// controller_utils.go ActivePodsWithRanks.Less with the PodDeletionCost and
// LogarithmicScaleDown gates on): unscheduled before scheduled; Pending,
// Unknown, then Running; not Ready before Ready; lower deletion cost first;
// more active related pods on the same node first; among Ready pods, Ready
// more recently first; more container restarts first; newer first. Ready
// and creation times compare by the power of two of their age at now, ties
// broken by UID. related are the pods of the ReplicaSets of the same
// controller.
func victims(pods, related []*corev1.Pod, now time.Time) []*corev1.Pod {
	onNode := map[string]int{}
	for _, p := range related {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			onNode[p.Spec.NodeName]++
		}
	}
	phase := map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}
	maxRestarts := func(p *corev1.Pod) int32 {
		var n int32
		for _, s := range p.Status.ContainerStatuses {
			n = max(n, s.RestartCount)
		}
		return n
	}
	readyTime := func(p *corev1.Pod) time.Time {
		if !podReady(p) {
			return time.Time{}
		}
		return readySince(p)
	}
	// olderLess compares two times as the newer first, by the power of two
	// of their age, with UID as the tie; a zero time comes first.
	olderLess := func(ti, tj time.Time, a, b *corev1.Pod) bool {
		if ti.IsZero() || tj.IsZero() {
			return ti.IsZero()
		}
		if d := ageRank(ti, now) - ageRank(tj, now); d != 0 {
			return d < 0
		}
		return a.UID < b.UID
	}
	out := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Spec.NodeName != b.Spec.NodeName && (a.Spec.NodeName == "" || b.Spec.NodeName == "") {
			return a.Spec.NodeName == ""
		}
		if pa, pb := phase[a.Status.Phase], phase[b.Status.Phase]; pa != pb {
			return pa < pb
		}
		if ra, rb := podReady(a), podReady(b); ra != rb {
			return !ra
		}
		if ca, cb := podDeletionCost(a), podDeletionCost(b); ca != cb {
			return ca < cb
		}
		if na, nb := onNode[a.Spec.NodeName], onNode[b.Spec.NodeName]; na != nb {
			return na > nb
		}
		if podReady(a) && podReady(b) {
			if ta, tb := readyTime(a), readyTime(b); !ta.Equal(tb) {
				return olderLess(ta, tb, a, b)
			}
		}
		if ra, rb := maxRestarts(a), maxRestarts(b); ra != rb {
			return ra > rb
		}
		if ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time; !ta.Equal(tb) {
			return olderLess(ta, tb, a, b)
		}
		return false
	})
	return out
}

// ageRank is floor(log2(age in nanoseconds)) of t at now, -1 for a time
// not in the past (controller_utils.go, logarithmicRankDiff).
func ageRank(t, now time.Time) int64 {
	if d := now.Sub(t); d > 0 {
		return int64(math.Log2(float64(d)))
	}
	return -1
}

// observeRolloutLocked writes d's status as the deployment controller does
// at the end of each sync (sync.go syncRolloutStatus, calculateStatus), and
// notes when d's rollout completed (D12) and when its old pods were gone.
func (c *Cluster) observeRolloutLocked(dep *deployment) {
	d := dep.d
	newRS, old := c.replicaSetsLocked(d)
	st := c.deploymentStatusLocked(d, newRS, old)
	wasTimedOut := timedOut(d)
	// A paused Deployment's progress is not checked (sync.go sync writes
	// its status without syncRolloutStatus).
	if !d.Spec.Paused {
		c.progressLocked(d, newRS, &st)
	}
	d.Status = st
	changed := timedOut(d) != wasTimedOut
	if dep.completedAt.IsZero() && deploymentComplete(d, &st) {
		dep.completedAt, changed = c.clock.Now(), true
	}
	oldPods := int32(0)
	for _, rs := range old {
		v, _ := c.viewLocked(rs)
		oldPods += v.running
	}
	if !dep.completedAt.IsZero() && dep.oldPodsGoneAt.IsZero() && oldPods == 0 {
		dep.oldPodsGoneAt, changed = c.clock.Now(), true
	}
	if changed {
		c.notifyLocked()
	}
}

// deploymentStatusLocked computes d's status from its ReplicaSets' pods,
// with the Available condition (sync.go calculateStatus).
func (c *Cluster) deploymentStatusLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) appsv1.DeploymentStatus {
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Conditions: append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...)}
	var spec int32
	terminating := int32(0)
	for _, rs := range withNew(old, newRS) {
		v, _ := c.viewLocked(rs)
		spec += v.spec
		st.Replicas += v.active
		st.ReadyReplicas += v.ready
		st.AvailableReplicas += v.available
		terminating += v.terminating
		if rs == newRS {
			st.UpdatedReplicas = v.active
		}
	}
	st.UnavailableReplicas = max(spec-st.AvailableReplicas, 0)
	st.TerminatingReplicas = &terminating
	now := c.clock.Now()
	if st.AvailableReplicas >= *d.Spec.Replicas-c.maxUnavailable(d) {
		setDeploymentCondition(&st, condition(appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinAvailable, "Deployment has minimum availability.", now))
	} else {
		setDeploymentCondition(&st, condition(appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinNotAvailable, "Deployment does not have minimum availability.", now))
	}
	return st
}

// progressLocked updates st's Progressing condition as syncRolloutStatus
// does (D10): complete, or progressing since d.Status (more updated, ready
// or available pods, fewer old ones), or timed out when the condition has
// not moved for progressDeadlineSeconds. It records the timeout, and asks
// for a wake-up when the deadline can pass, a second after it as the
// controller's requeue does (progress.go requeueStuckDeployment).
func (c *Cluster) progressLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, st *appsv1.DeploymentStatus) {
	if !hasProgressDeadline(d) {
		removeDeploymentCondition(st, appsv1.DeploymentProgressing)
		return
	}
	cur := deploymentCondition(d.Status, appsv1.DeploymentProgressing)
	if st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == reasonNewRSAvailable {
		return
	}
	now := c.clock.Now()
	subject := fmt.Sprintf("Deployment %q", d.Name)
	if newRS != nil {
		subject = fmt.Sprintf("ReplicaSet %q", newRS.Name)
	}
	deadline := time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
	switch {
	case deploymentComplete(d, st):
		setDeploymentCondition(st, progressing(corev1.ConditionTrue, reasonNewRSAvailable, subject+" has successfully progressed.", now))
		return
	case deploymentProgressing(d, st):
		cond := progressing(corev1.ConditionTrue, reasonRSUpdated, subject+" is progressing.", now)
		// Progress moves lastUpdateTime even with the same reason.
		if cur != nil && cur.Status == corev1.ConditionTrue {
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		removeDeploymentCondition(st, appsv1.DeploymentProgressing)
		setDeploymentCondition(st, cond)
	}
	cond := deploymentCondition(*st, appsv1.DeploymentProgressing)
	if cond == nil || cond.Reason == reasonNewRSAvailable || cond.Reason == cluster.TimedOutReason {
		return
	}
	deadlineAt := cond.LastUpdateTime.Add(deadline)
	if now.Before(deadlineAt) {
		wake := deadlineAt
		if after := deadlineAt.Sub(now); after >= time.Second {
			wake = now.Add(after + time.Second)
		}
		c.wakeAtLocked(wake)
		return
	}
	setDeploymentCondition(st, progressing(corev1.ConditionFalse, cluster.TimedOutReason, subject+" has timed out progressing.", now))
	c.record(cluster.DeadlineExceededEvent(d, newRS))
}

// hasProgressDeadline reports whether d's progress is checked: a
// progressDeadlineSeconds of MaxInt32 turns the check off
// (deployment_util.go, HasProgressDeadline).
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// deploymentComplete reports whether every replica of d is updated and
// available, no old one runs, and st is of d's generation
// (deployment_util.go, DeploymentComplete).
func deploymentComplete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	r := *d.Spec.Replicas
	return st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r && st.ObservedGeneration >= d.Generation
}

// deploymentProgressing reports whether st shows progress over d.Status
// (deployment_util.go, DeploymentProgressing).
func deploymentProgressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	prev := d.Status
	return st.UpdatedReplicas > prev.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < prev.Replicas-prev.UpdatedReplicas ||
		st.ReadyReplicas > prev.ReadyReplicas ||
		st.AvailableReplicas > prev.AvailableReplicas
}

func progressing(status corev1.ConditionStatus, reason, message string, now time.Time) appsv1.DeploymentCondition {
	return condition(appsv1.DeploymentProgressing, status, reason, message, now)
}

func condition(t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) appsv1.DeploymentCondition {
	at := metav1.NewTime(now)
	return appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: message, LastUpdateTime: at, LastTransitionTime: at}
}

// deploymentCondition returns st's condition of type t, or nil.
func deploymentCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setDeploymentCondition sets cond in st, unless st has it with the same
// status and reason; a condition whose status stays keeps its
// lastTransitionTime (deployment_util.go, SetDeploymentCondition).
func setDeploymentCondition(st *appsv1.DeploymentStatus, cond appsv1.DeploymentCondition) {
	cur := deploymentCondition(*st, cond.Type)
	if cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason {
		return
	}
	if cur != nil && cur.Status == cond.Status {
		cond.LastTransitionTime = cur.LastTransitionTime
	}
	removeDeploymentCondition(st, cond.Type)
	st.Conditions = append(st.Conditions, cond)
}

func removeDeploymentCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	kept := st.Conditions[:0:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
}
