package local

import (
	"context"
	"errors"
	"testing"
)

// TestClaimRange checks that a cluster on the loopback range holds its pod
// range while it runs:
// a second cluster asking for the same range is refused, one asking for
// none gets another range, and the range is free again after Close. The
// claim is a socket, so a range held by another process is refused the
// same way.
func TestClaimRange(t *testing.T) {
	first, err := New(Config{Network: NetworkLoopback, Kubelet: KubeletConfig{WorkingDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	taken := first.PodCIDR()
	if _, err := New(Config{PodCIDR: taken}); !errors.Is(err, errRangeClaimed) {
		t.Errorf("second cluster on %s: %v, want %v", taken, err, errRangeClaimed)
	}
	second, err := New(Config{Network: NetworkLoopback, Kubelet: KubeletConfig{WorkingDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if second.PodCIDR() == taken {
		t.Errorf("both clusters on %s", taken)
	}
	for _, c := range []*Cluster{first, second} {
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	again, err := New(Config{PodCIDR: taken, Kubelet: KubeletConfig{WorkingDir: t.TempDir()}})
	if err != nil {
		t.Fatalf("%s after Close: %v", taken, err)
	}
	again.Close(context.Background())
}
