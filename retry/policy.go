package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Defaults of a zero [Policy].
const (
	// DefaultAttempts is the number of attempts per request, the first one
	// included.
	DefaultAttempts = 3
	// DefaultBaseDelay is the backoff ceiling before the first retry; it
	// doubles for each further retry.
	DefaultBaseDelay = 200 * time.Millisecond
	// DefaultMaxDelay caps the backoff between two attempts.
	DefaultMaxDelay = 2 * time.Second
)

// A Policy says how many times and how soon a [Transport] may send a request
// again (or package grpcretry's interceptor a gRPC call), and which HTTP
// responses prove that a request was not processed. The zero Policy makes [DefaultAttempts]
// attempts, waits between [DefaultBaseDelay] and [DefaultMaxDelay], and
// retries no HTTP response.
//
// A Policy only widens or narrows the safe set described in the package
// documentation; no setting makes a Transport or grpcretry's interceptor
// resend a request that may have been processed and is not idempotent.
type Policy struct {
	// Attempts is the most attempts per request, the first one included.
	// Zero means DefaultAttempts; 1 disables retries.
	Attempts int

	// BaseDelay is the backoff ceiling before the first retry; the ceiling
	// doubles for each further retry, up to MaxDelay. The wait is drawn
	// at random between half the ceiling and the ceiling. Zero means
	// DefaultBaseDelay.
	BaseDelay time.Duration

	// MaxDelay caps the wait between two attempts. A response whose
	// Retry-After, or a gRPC status whose grpc-retry-pushback-ms, asks for
	// a longer wait is returned rather than retried. grpcretry's
	// interceptor also waits up to MaxDelay for a channel in
	// TRANSIENT_FAILURE to connect again before it retries a call that
	// never reached a server. Zero means DefaultMaxDelay.
	MaxDelay time.Duration

	// Unprocessed reports whether a response proves that the request was
	// not processed by the application, such as a 503 that a proxy made
	// because it could not connect to any upstream (Envoy's "upstream
	// connect error" with reset reason "connection failure"), or a response
	// that a draining server marks with a header. Such a response is
	// retried whatever the method. Nil means that no response is retried.
	//
	// Unprocessed must not read or close the response body. It applies to
	// HTTP only: grpcretry's interceptor ignores it.
	Unprocessed func(*http.Response) bool
}

func (p Policy) attempts() int {
	if p.Attempts <= 0 {
		return DefaultAttempts
	}
	return p.Attempts
}

func (p Policy) maxDelay() time.Duration {
	if p.MaxDelay <= 0 {
		return DefaultMaxDelay
	}
	return p.MaxDelay
}

// backoff returns the wait before retry number n (1 for the first retry):
// "equal jitter" over an exponential ceiling, so that clients that failed
// together do not come back together, and no wait is shorter than half its
// ceiling.
func (p Policy) backoff(n int) time.Duration {
	ceiling := p.BaseDelay
	if ceiling <= 0 {
		ceiling = DefaultBaseDelay
	}
	limit := p.maxDelay()
	for i := 1; i < n && ceiling < limit; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, limit)
	half := ceiling / 2
	return half + rand.N(ceiling-half+1)
}

// Next returns the wait before the attempt that follows attempt n (1 for
// the first) of a request whose context is ctx, when the server asked for
// a wait of asked (zero if it did not): the backoff, or asked if it is
// longer. It reports false when no attempt may follow: n attempts are the
// most, asked is longer than MaxDelay, or the attempt would start after
// ctx's deadline. [Transport] and the gRPC interceptor of package
// grpcretry space their attempts with it.
func (p Policy) Next(ctx context.Context, n int, asked time.Duration) (time.Duration, bool) {
	if n >= p.attempts() || asked > p.maxDelay() {
		return 0, false
	}
	wait := max(asked, p.backoff(n))
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
		return 0, false
	}
	return wait, true
}

// sleep waits for d, and reports false if ctx is done first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// idempotent reports whether processing req twice has the effect of
// processing it once (RFC 9110 §9.2.2), or whether its sender said so with
// an idempotency key, as net/http's own replay rule does.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// notSent reports whether err proves that the request never reached the
// server: the connection could not be made. Dialers report every such
// failure (refused, timeout, unreachable, name resolution) as a
// *net.OpError whose Op is "dial"; an error from a later stage never has
// that Op.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retryAfter returns the wait that resp's Retry-After header asks for
// (delay-seconds or an HTTP-date, RFC 9110 §10.2.3), or zero.
func retryAfter(resp *http.Response, now time.Time) time.Duration {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
