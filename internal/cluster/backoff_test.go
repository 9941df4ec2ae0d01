package cluster

import (
	"slices"
	"testing"
	"time"
)

// TestCrashLoopBackOff follows a container that crashes as soon as it
// starts: the kubelet restarts it at once, then after 10, 20, 40, 80, 160,
// 300 and 300 s (docs/kubernetes.md B2), and starts over after a run
// longer than the reset (B3).
func TestCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	var b CrashLoopBackOff
	got := crashAtStart(t, &b, 8)
	want := []time.Duration{0, 10, 20, 40, 80, 160, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("waits = %v, want %v", got, want)
	}

	// A run longer than the reset starts the back-off over.
	started := b.lastUpdate
	if wait := b.Restart(started.Add(CrashLoopBackOffReset+time.Second), started.Add(CrashLoopBackOffReset+time.Second)); wait != 0 {
		t.Errorf("Restart after a long run = %v, want 0", wait)
	}
	finished := started.Add(CrashLoopBackOffReset + 2*time.Second)
	if wait := b.Restart(finished, finished); wait != DefaultCrashLoopBackOffInitial {
		t.Errorf("Restart after reset and a crash = %v, want %v", wait, DefaultCrashLoopBackOffInitial)
	}
}

func TestCrashLoopBackOffScaled(t *testing.T) {
	t.Parallel()
	b := CrashLoopBackOff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}
	got := crashAtStart(t, &b, 5)
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Errorf("waits = %v, want %v", got, want)
	}
}

// crashAtStart returns the waits of a container that crashes as soon as it
// starts, n times, and leaves b after the last restart.
func crashAtStart(t *testing.T, b *CrashLoopBackOff, n int) []time.Duration {
	t.Helper()
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	var waits []time.Duration
	for range n {
		finished := now
		wait := b.Restart(finished, now)
		if wait > 0 {
			now = now.Add(wait)
			if again := b.Restart(finished, now); again != 0 {
				t.Fatalf("Restart after waiting %v = %v, want 0", wait, again)
			}
		}
		waits = append(waits, wait)
	}
	return waits
}
