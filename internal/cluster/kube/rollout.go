package kube

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// revisionAnnotation is the revision that the deployment controller gives
// a Deployment and the ReplicaSet of its current template
// (k8s.io/kubernetes pkg/controller/deployment/util/deployment_util.go,
// RevisionAnnotation).
const revisionAnnotation = "deployment.kubernetes.io/revision"

// listers read the informers' caches.
type listers struct {
	pods        corelisters.PodLister
	rss         appslisters.ReplicaSetLister
	deployments appslisters.DeploymentLister
	slices      discoverylisters.EndpointSliceLister
}

// rollout is what the backend saw of a Deployment's current generation.
type rollout struct {
	uid                        types.UID
	generation                 int64
	completedAt, oldPodsGoneAt time.Time
	failed                     string // the Progressing condition's message once the deadline passed
}

// observeRolloutsLocked updates the rollout of each Deployment from the
// caches: a new generation starts a new rollout; it completes when the
// Deployment's status says so, and its old pods are gone when no pod of a
// ReplicaSet of an older revision is left, terminating ones included.
func (c *Cluster) observeRolloutsLocked(l listers) {
	ds, err := l.deployments.List(labels.Everything())
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, d := range ds {
		k := d.Namespace + "/" + d.Name
		seen[k] = true
		r := c.rollouts[k]
		if r == nil || r.uid != d.UID || r.generation != d.Generation {
			r = &rollout{uid: d.UID, generation: d.Generation}
			c.rollouts[k] = r
		}
		if d.Status.ObservedGeneration < d.Generation {
			continue
		}
		if r.completedAt.IsZero() && deploymentComplete(d) {
			r.completedAt = c.clock.Now()
		}
		newRS, old := replicaSets(l, d)
		if r.completedAt.IsZero() && r.failed == "" {
			for _, cond := range d.Status.Conditions {
				if cond.Type == appsv1.DeploymentProgressing && cond.Reason == cluster.TimedOutReason {
					r.failed = cond.Message
					c.deadlineExceededLocked(d, newRS)
				}
			}
		}
		if !r.completedAt.IsZero() && r.oldPodsGoneAt.IsZero() && !hasOldPods(l, d, old) {
			r.oldPodsGoneAt = c.clock.Now()
		}
	}
	for k := range c.rollouts {
		if !seen[k] {
			delete(c.rollouts, k)
		}
	}
}

// deploymentComplete reports whether d's status shows its rollout
// complete: every replica updated and available, none more, and the
// latest generation observed (k8s.io/kubernetes
// pkg/controller/deployment/util/deployment_util.go, DeploymentComplete).
func deploymentComplete(d *appsv1.Deployment) bool {
	replicas := ptr.Deref(d.Spec.Replicas, cluster.DefaultReplicas)
	s := d.Status
	return s.UpdatedReplicas == replicas && s.Replicas == replicas && s.AvailableReplicas == replicas &&
		s.ObservedGeneration >= d.Generation
}

// replicaSets returns d's ReplicaSet of d's revision, if the cache has
// it, and the UIDs of its ReplicaSets of older revisions.
func replicaSets(l listers, d *appsv1.Deployment) (*appsv1.ReplicaSet, map[types.UID]bool) {
	rss, _ := l.rss.ReplicaSets(d.Namespace).List(labels.Everything())
	var newRS *appsv1.ReplicaSet
	old := map[types.UID]bool{}
	for _, rs := range rss {
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != d.UID {
			continue
		}
		if rs.Annotations[revisionAnnotation] == d.Annotations[revisionAnnotation] {
			newRS = rs
		} else {
			old[rs.UID] = true
		}
	}
	return newRS, old
}

// hasOldPods reports whether a pod of one of d's ReplicaSets of an older
// revision, old, is left.
func hasOldPods(l listers, d *appsv1.Deployment, old map[types.UID]bool) bool {
	if len(old) == 0 {
		return false
	}
	pods, err := l.pods.Pods(d.Namespace).List(labels.Everything())
	if err != nil {
		return true
	}
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil && old[ref.UID] && !podGoneForGood(p) {
			return true
		}
	}
	return false
}

// deadlineExceededLocked records that d's rollout passed its progress
// deadline, newRS being its new ReplicaSet (nil if not known), unless the
// backend is still listing what was there before it started.
func (c *Cluster) deadlineExceededLocked(d *appsv1.Deployment, newRS *appsv1.ReplicaSet) {
	if !c.synced {
		return
	}
	c.record(cluster.DeadlineExceededEvent(d, newRS))
}

// podGoneForGood reports whether p is terminal and being deleted: the
// kubelet is done with it and only the removal of the object is left.
func podGoneForGood(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

// RolloutStatus waits until Deployment name's current generation has
// rolled out and its old pods are gone, as `kubectl rollout status` waits
// for the first, and returns both moments as the backend saw them. A
// Deployment whose progress deadline passed is an error, as with kubectl.
// Only the observed namespace can be waited for.
func (c *Cluster) RolloutStatus(ctx context.Context, namespace, name string) (cluster.RolloutStatus, error) {
	op := fmt.Sprintf("rollout status of deployment %s/%s", namespace, name)
	if namespace != c.namespace {
		return cluster.RolloutStatus{}, fmt.Errorf("%s: the backend observes namespace %s only", op, c.namespace)
	}
	d, err := c.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return cluster.RolloutStatus{}, apiError(op, err)
	}
	var st cluster.RolloutStatus
	failed := ""
	err = c.wait(ctx, func() bool {
		r := c.rollouts[namespace+"/"+name]
		if r == nil || r.uid != d.UID || r.generation < d.Generation {
			return false
		}
		st = cluster.RolloutStatus{Complete: !r.completedAt.IsZero(), CompletedAt: r.completedAt, OldPodsGoneAt: r.oldPodsGoneAt}
		failed = r.failed
		return failed != "" || (st.Complete && !st.OldPodsGoneAt.IsZero())
	})
	switch {
	case err != nil:
		return st, fmt.Errorf("%s: %w", op, err)
	case failed != "":
		return st, fmt.Errorf("%s: exceeded its progress deadline: %s", op, failed)
	}
	return st, nil
}
