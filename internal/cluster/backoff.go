package cluster

import "time"

// The kubelet's CrashLoopBackOff rule (k8s.io/kubernetes pkg/kubelet/kubelet.go,
// initialCrashLoopBackOff, MaxCrashLoopBackOff and the HasExpiredFunc set in
// NewMainKubelet): a container that exits waits DefaultCrashLoopBackOffInitial
// before its second restart, twice as long before each further one, at most
// DefaultCrashLoopBackOffMax; a container that ran longer than
// CrashLoopBackOffReset before it exited starts over.
const (
	DefaultCrashLoopBackOffInitial = 10 * time.Second
	DefaultCrashLoopBackOffMax     = 300 * time.Second
	CrashLoopBackOffReset          = 600 * time.Second
)

// CrashLoopBackOff is the restart back-off of one container, as the kubelet
// keeps it (k8s.io/kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go,
// doBackOff, over k8s.io/client-go util/flowcontrol/backoff.go). Its waits
// after successive exits are 0, Initial, 2×Initial, … up to Max: 0, 10, 20,
// 40, 80, 160, 300, 300 s with the defaults.
//
// Initial, Max and Reset are set before first use; zero means the
// default. Tests shorten them; the rule stays the same. A CrashLoopBackOff
// is not safe for concurrent use.
type CrashLoopBackOff struct {
	Initial time.Duration
	Max     time.Duration
	Reset   time.Duration

	delay      time.Duration // zero: no live entry
	lastUpdate time.Time
}

// Restart is called when the container exited at finishedAt and the
// kubelet wants to start it again at now. It returns how long to wait
// from now: zero means start now, and the wait is recorded as the
// container's next back-off; a positive wait means the container is in
// CrashLoopBackOff and Restart must be called again once it has passed.
func (b *CrashLoopBackOff) Restart(finishedAt, now time.Time) time.Duration {
	initial, maxDelay, reset := b.Initial, b.Max, b.Reset
	if initial <= 0 {
		initial = DefaultCrashLoopBackOffInitial
	}
	if maxDelay <= 0 {
		maxDelay = DefaultCrashLoopBackOffMax
	}
	if reset <= 0 {
		reset = CrashLoopBackOffReset
	}
	// KEP-5593: a maximum below the initial delay lowers the initial delay.
	initial = min(initial, maxDelay)
	expired := b.delay == 0 || finishedAt.Sub(b.lastUpdate) > reset
	// IsInBackOffSince: a live entry holds the restart until delay has
	// passed since the exit.
	if !expired {
		if wait := b.delay - now.Sub(finishedAt); wait > 0 {
			return wait
		}
	}
	// Next: a new entry starts at initial, a live one doubles up to max.
	if expired {
		b.delay = initial
	} else {
		b.delay = min(2*b.delay, maxDelay)
	}
	b.lastUpdate = finishedAt
	return 0
}
