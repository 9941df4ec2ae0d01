package target

import (
	"sync"
	"time"
)

// secondsBeforeSigterm is how many whole seconds before SIGTERM the
// "sigterm" event counts /work requests in, as seed 001's app.py does.
const secondsBeforeSigterm = 6

// windowMillis is that window in milliseconds, the resolution of the counts.
const windowMillis = secondsBeforeSigterm * 1000

// workLog records when /work requests arrive, for the "sigterm" and
// "drained" events. It keeps per-millisecond counts of the last
// secondsBeforeSigterm seconds in a ring, so its memory does not grow with
// the request rate. It is safe for concurrent use.
type workLog struct {
	mu sync.Mutex
	// counts[i] is the number of arrivals during the Unix millisecond
	// stamps[i], which is congruent to i modulo windowMillis.
	counts [windowMillis]int
	stamps [windowMillis]int64
	last   time.Time // arrival of the latest request
	// sigterm is when SIGTERM arrived, zero before; after counts the
	// requests that arrived since.
	sigterm time.Time
	after   int
}

// arrive records a request arriving at now.
func (l *workLog) arrive(now time.Time) {
	ms := now.UnixMilli()
	i := ms % windowMillis
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stamps[i] != ms {
		l.stamps[i], l.counts[i] = ms, 0
	}
	l.counts[i]++
	l.last = now
	if !l.sigterm.IsZero() {
		l.after++
	}
}

// signalled records that SIGTERM arrived at now, and returns the number of
// requests that arrived in each whole second before it, oldest first, and
// the arrival of the latest one (zero if none has arrived).
func (l *workLog) signalled(now time.Time) (perSecond []int, last time.Time) {
	end := now.UnixMilli()
	start := end - windowMillis
	perSecond = make([]int, secondsBeforeSigterm)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sigterm = now
	for ms := start; ms < end; ms++ {
		if i := ms % windowMillis; l.stamps[i] == ms {
			perSecond[(ms-start)/1000] += l.counts[i]
		}
	}
	return perSecond, l.last
}

// drained returns the number of requests that arrived after SIGTERM and the
// arrival of the latest request (zero if none has arrived).
func (l *workLog) drained() (after int, last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.after, l.last
}
