package cluster

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// TestEvictAll drives EvictAll with an eviction API that refuses pod a
// twice with 429, refuses pod b with 403 (which is not retried), and has no
// pod c.
func TestEvictAll(t *testing.T) {
	var mu sync.Mutex
	calls, gone := map[string]int{}, map[string]bool{}
	evict := func(ctx context.Context, p *corev1.Pod) error {
		mu.Lock()
		defer mu.Unlock()
		calls[p.Name]++
		switch {
		case p.Name == "a" && calls["a"] <= 2:
			return &EvictionError{Namespace: "ns", Pod: "a", Budget: "web", Status: http.StatusTooManyRequests}
		case p.Name == "b":
			return &EvictionError{Namespace: "ns", Pod: "b", Budget: "web", Status: http.StatusForbidden}
		case p.Name == "c":
			return ErrNotFound
		}
		return nil
	}
	waitGone := func(ctx context.Context, p *corev1.Pod) error {
		mu.Lock()
		defer mu.Unlock()
		gone[p.Name] = true
		return nil
	}
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}},
	}
	err := EvictAll(context.Background(), pods, time.Millisecond, clock.RealClock{}, evict, waitGone)
	var refused *EvictionError
	if !errors.As(err, &refused) || refused.Pod != "b" || refused.Status != http.StatusForbidden {
		t.Errorf("EvictAll: %v, want b's 403 refusal", err)
	}
	if calls["a"] != 3 || calls["b"] != 1 || calls["c"] != 1 {
		t.Errorf("eviction calls %v, want a 3 (two 429s retried), b 1, c 1", calls)
	}
	if !gone["a"] || gone["b"] || gone["c"] {
		t.Errorf("waited for %v, want a only", gone)
	}

	// A budget that never allows: the deadline ends the retries.
	never := func(ctx context.Context, p *corev1.Pod) error {
		return &EvictionError{Namespace: "ns", Pod: p.Name, Budget: "web", Status: http.StatusTooManyRequests}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = EvictAll(ctx, pods[:1], time.Millisecond, clock.RealClock{}, never, waitGone)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &refused) {
		t.Errorf("EvictAll past its deadline: %v, want the deadline and the last refusal", err)
	}
}
