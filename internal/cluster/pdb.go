package cluster

import (
	"fmt"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DesiredHealthy returns how many pods a PodDisruptionBudget counts
// (expected) and how many of them it keeps healthy (desired), as the
// disruption controller computes them (k8s.io/kubernetes
// pkg/controller/disruption/disruption.go, getExpectedPodCount).
//
// scale is the sum of the replicas of the controllers that own the selected
// pods, selected the number of pods the budget selects. An integer
// minAvailable counts the selected pods and keeps the value; a percentage
// minAvailable counts scale and keeps the percentage of it, rounded up;
// maxUnavailable (a percentage rounded up) counts scale and keeps the rest,
// never below zero. A budget with neither keeps nothing. It returns an
// error for a string that is not a percentage.
func DesiredHealthy(spec policyv1.PodDisruptionBudgetSpec, scale, selected int32) (expected, desired int32, err error) {
	switch {
	case spec.MaxUnavailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(scale), true)
		if err != nil {
			return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
		}
		return scale, max(0, scale-int32(v)), nil
	case spec.MinAvailable != nil && spec.MinAvailable.Type == intstr.Int:
		return selected, spec.MinAvailable.IntVal, nil
	case spec.MinAvailable != nil:
		v, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(scale), true)
		if err != nil {
			return 0, 0, fmt.Errorf("minAvailable: %w", err)
		}
		return scale, int32(v), nil
	}
	return 0, 0, nil
}

// DisruptionsAllowed returns how many more pods a budget lets the eviction
// API evict when currentHealthy of its pods are healthy (Ready, not
// terminating, not just evicted): currentHealthy − desired, and none when
// that is negative or nothing is expected (k8s.io/kubernetes
// pkg/controller/disruption/disruption.go, updatePdbStatus). A budget never
// allows an eviction when DisruptionsAllowed(expected, expected, desired) is
// zero: not even with every pod healthy.
func DisruptionsAllowed(currentHealthy, expected, desired int32) int32 {
	if expected <= 0 || currentHealthy <= desired {
		return 0
	}
	return currentHealthy - desired
}

// DisruptedPodTimeout is how long a budget counts a pod that the eviction
// API evicted as disrupted, and so not healthy, while the pod is not yet
// being deleted (k8s.io/kubernetes pkg/controller/disruption/disruption.go,
// DeletionTimeout): its entry in status.disruptedPods is dropped once the
// pod's deletion starts, or after this long.
const DisruptedPodTimeout = 2 * time.Minute
