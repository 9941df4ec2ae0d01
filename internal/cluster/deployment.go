package cluster

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
)

// RestartedAtAnnotation is the pod template annotation that `kubectl rollout
// restart` sets to the current time, which changes the template and so
// starts a rollout (k8s.io/kubectl pkg/polymorphichelpers/objectrestarter.go).
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// TimedOutReason is the reason of a Deployment's Progressing condition once
// its rollout made no progress for progressDeadlineSeconds; the condition is
// False then (k8s.io/kubernetes
// pkg/controller/deployment/util/deployment_util.go, TimedOutReason).
const TimedOutReason = "ProgressDeadlineExceeded"

// DeadlineExceededEvent returns the [ProgressDeadlineExceeded] event of
// Deployment d, whose Progressing condition just turned to TimedOutReason:
// its deadline field is d's progressDeadlineSeconds (or
// DefaultProgressDeadlineSeconds when unset) as a Go duration, and its
// replicaset field names newRS, d's new ReplicaSet, unless newRS is nil.
func DeadlineExceededEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet) Event {
	seconds := ptr.Deref(d.Spec.ProgressDeadlineSeconds, DefaultProgressDeadlineSeconds)
	e := Event{Kind: ProgressDeadlineExceeded, Namespace: d.Namespace, Object: "Deployment/" + d.Name,
		Fields: map[string]string{"deadline": (time.Duration(seconds) * time.Second).String()}}
	if newRS != nil {
		e.Fields["replicaset"] = newRS.Name
	}
	return e
}
