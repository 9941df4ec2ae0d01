package cluster

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestResolveFenceposts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                       string
		maxSurge, maxUnavailable   *intstr.IntOrString
		replicas                   int32
		wantSurge, wantUnavailable int32
		wantErr                    bool
	}{
		// The defaults at 25%/25%, as docs/kubernetes.md D2 derives them.
		{name: "defaults 1 replica", replicas: 1, wantSurge: 1, wantUnavailable: 0},
		{name: "defaults 2 replicas", replicas: 2, wantSurge: 1, wantUnavailable: 0},
		{name: "defaults 3 replicas", replicas: 3, wantSurge: 1, wantUnavailable: 0},
		{name: "defaults 4 replicas", replicas: 4, wantSurge: 1, wantUnavailable: 1},
		{name: "defaults 10 replicas", replicas: 10, wantSurge: 3, wantUnavailable: 2},
		{name: "integers as given", maxSurge: ptr.To(intstr.Parse("1")), maxUnavailable: ptr.To(intstr.Parse("0")), replicas: 3, wantSurge: 1, wantUnavailable: 0},
		{name: "both round to zero", maxSurge: ptr.To(intstr.Parse("0%")), maxUnavailable: ptr.To(intstr.Parse("10%")), replicas: 3, wantSurge: 0, wantUnavailable: 1},
		{name: "surge unset unavailable 100%", maxUnavailable: ptr.To(intstr.Parse("100%")), replicas: 3, wantSurge: 1, wantUnavailable: 3},
		{name: "zero replicas", replicas: 0, wantSurge: 0, wantUnavailable: 1},
		{name: "not a percentage", maxSurge: ptr.To(intstr.Parse("one")), replicas: 3, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			surge, unavailable, err := ResolveFenceposts(tt.maxSurge, tt.maxUnavailable, tt.replicas)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ResolveFenceposts() error = %v, want error %v", err, tt.wantErr)
			}
			if surge != tt.wantSurge || unavailable != tt.wantUnavailable {
				t.Errorf("ResolveFenceposts() = (%d, %d), want (%d, %d)", surge, unavailable, tt.wantSurge, tt.wantUnavailable)
			}
		})
	}
}

// TestDefaultDelays pins what the embedded cluster's documentation says of
// its delays: none between the API and its watchers, a propagation range
// of 100 ms to 1 s, and three hours of session affinity.
func TestDefaultDelays(t *testing.T) {
	t.Parallel()
	for name, d := range map[string]time.Duration{
		"DefaultKubeletObserveDelay":      DefaultKubeletObserveDelay,
		"DefaultStatusPushDelay":          DefaultStatusPushDelay,
		"DefaultEndpointSyncDelay":        DefaultEndpointSyncDelay,
		"DefaultEndpointSliceBatchPeriod": DefaultEndpointSliceBatchPeriod,
	} {
		if d != 0 {
			t.Errorf("%s = %v, want none", name, d)
		}
	}
	if DefaultMinPropagationDelay != 100*time.Millisecond || DefaultMaxPropagationDelay != time.Second {
		t.Errorf("propagation delay %v–%v, want 100ms–1s", DefaultMinPropagationDelay, DefaultMaxPropagationDelay)
	}
	if DefaultSessionAffinityTimeout != 3*time.Hour {
		t.Errorf("DefaultSessionAffinityTimeout = %v, want 3h", DefaultSessionAffinityTimeout)
	}
}
