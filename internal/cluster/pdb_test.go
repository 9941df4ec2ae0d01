package cluster

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestDisruptionBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		spec                  policyv1.PodDisruptionBudgetSpec
		scale, selected       int32
		healthy               int32
		wantExpected, wantDes int32
		wantAllowed           int32
		wantErr               bool
	}{
		// docs/kubernetes.md X7: one replica, minAvailable 1 blocks every
		// eviction; maxUnavailable 1 does not.
		{name: "single replica minAvailable 1", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("1"))},
			scale: 1, selected: 1, healthy: 1, wantExpected: 1, wantDes: 1, wantAllowed: 0},
		{name: "single replica maxUnavailable 1", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))},
			scale: 1, selected: 1, healthy: 1, wantExpected: 1, wantDes: 0, wantAllowed: 1},
		{name: "minAvailable 100%", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("100%"))},
			scale: 3, selected: 3, healthy: 3, wantExpected: 3, wantDes: 3, wantAllowed: 0},
		{name: "integer minAvailable counts selected pods", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("2"))},
			scale: 3, selected: 4, healthy: 4, wantExpected: 4, wantDes: 2, wantAllowed: 2},
		{name: "percent minAvailable rounds up", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("50%"))},
			scale: 3, selected: 4, healthy: 3, wantExpected: 3, wantDes: 2, wantAllowed: 1},
		{name: "percent maxUnavailable rounds up", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("10%"))},
			scale: 3, selected: 3, healthy: 3, wantExpected: 3, wantDes: 2, wantAllowed: 1},
		{name: "maxUnavailable 0", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("0"))},
			scale: 3, selected: 3, healthy: 3, wantExpected: 3, wantDes: 3, wantAllowed: 0},
		{name: "one unhealthy uses the budget", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))},
			scale: 3, selected: 3, healthy: 2, wantExpected: 3, wantDes: 2, wantAllowed: 0},
		{name: "nothing expected", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.Parse("1"))},
			scale: 0, selected: 0, healthy: 0, wantExpected: 0, wantDes: 0, wantAllowed: 0},
		{name: "not a percentage", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.Parse("half"))},
			scale: 3, selected: 3, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			expected, desired, err := DesiredHealthy(tt.spec, tt.scale, tt.selected)
			if (err != nil) != tt.wantErr {
				t.Fatalf("DesiredHealthy() error = %v, want error %v", err, tt.wantErr)
			}
			if expected != tt.wantExpected || desired != tt.wantDes {
				t.Errorf("DesiredHealthy() = (%d, %d), want (%d, %d)", expected, desired, tt.wantExpected, tt.wantDes)
			}
			if got := DisruptionsAllowed(tt.healthy, expected, desired); !tt.wantErr && got != tt.wantAllowed {
				t.Errorf("DisruptionsAllowed(%d, %d, %d) = %d, want %d", tt.healthy, expected, desired, got, tt.wantAllowed)
			}
		})
	}
}
