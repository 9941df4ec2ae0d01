package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// EvictAll evicts pods concurrently as `kubectl drain` does once the node
// is cordoned (k8s.io/kubectl pkg/drain/drain.go, evictPods): for each pod,
// evict is called until it succeeds, again after retryDelay (zero means
// DefaultEvictionRetryDelay) each time it returns an [*EvictionError] with
// status 429, and then gone waits until the pod is gone. An evict error
// wrapping [ErrNotFound] means the pod is gone already. Any other error
// ends that pod's attempts. It returns when every pod is done, with the
// errors joined; when ctx ends, each pending pod's error wraps ctx.Err()
// and its last refusal. Timers run on clk.
func EvictAll(ctx context.Context, pods []*corev1.Pod, retryDelay time.Duration, clk clock.Clock,
	evict, gone func(context.Context, *corev1.Pod) error) error {
	if retryDelay <= 0 {
		retryDelay = DefaultEvictionRetryDelay
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Go(func() { errs[i] = evictUntilGone(ctx, p, retryDelay, clk, evict, gone) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// evictUntilGone is EvictAll for one pod.
func evictUntilGone(ctx context.Context, pod *corev1.Pod, retryDelay time.Duration, clk clock.Clock,
	evict, gone func(context.Context, *corev1.Pod) error) error {
	// Each round is one eviction attempt; the loop ends with success, an
	// error other than a 429 refusal, or ctx.
	for {
		err := evict(ctx, pod)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err == nil:
			return gone(ctx, pod)
		}
		var refused *EvictionError
		if !errors.As(err, &refused) || refused.Status != http.StatusTooManyRequests {
			return err
		}
		t := clk.NewTimer(retryDelay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("evict pod %s/%s: %w (last refusal: %w)", pod.Namespace, pod.Name, ctx.Err(), err)
		}
	}
}
