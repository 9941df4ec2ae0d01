package local

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// delayQueue runs functions after their delays, in the order they were
// pushed, one at a time on a goroutine of its own. It stands for the watch
// streams and work queues between the cluster's components, each of which
// delivers changes late but in order. It is safe for concurrent use.
type delayQueue struct {
	clock clock.Clock
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}
	wake  chan struct{} // a function was pushed

	mu    sync.Mutex
	items []delayed
	last  time.Time // when the latest pushed function is due
}

type delayed struct {
	at time.Time
	fn func()
}

// newDelayQueue starts a queue timed by clk; close stops it.
func newDelayQueue(clk clock.Clock) *delayQueue {
	ctx, stop := context.WithCancel(context.Background())
	q := &delayQueue{clock: clk, ctx: ctx, stop: stop, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	go q.run()
	return q
}

// push queues fn to run delay from now, or after the function pushed
// before it if that one is due later: a later change never overtakes an
// earlier one. After close, fn never runs.
func (q *delayQueue) push(delay time.Duration, fn func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	at := q.clock.Now().Add(delay)
	if at.Before(q.last) {
		at = q.last
	}
	q.last = at
	q.items = append(q.items, delayed{at: at, fn: fn})
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close stops the queue and drops the functions not yet due; it returns
// once the function running, if any, has returned.
func (q *delayQueue) close() {
	q.stop()
	<-q.done
}

// run runs the functions when they are due, until close.
func (q *delayQueue) run() {
	defer close(q.done)
	// Each round runs what is due, then waits for the next due time or
	// push; the loop ends with close.
	for {
		q.mu.Lock()
		now := q.clock.Now()
		var due []delayed
		for len(q.items) > 0 && !q.items[0].at.After(now) {
			due = append(due, q.items[0])
			q.items = q.items[1:]
		}
		wait := time.Duration(-1)
		if len(q.items) > 0 {
			wait = q.items[0].at.Sub(now)
		}
		q.mu.Unlock()
		for _, d := range due {
			if q.ctx.Err() != nil {
				return
			}
			d.fn()
		}
		var timer clock.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = q.clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-q.ctx.Done():
		case <-q.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if q.ctx.Err() != nil {
			return
		}
	}
}
