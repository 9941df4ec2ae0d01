package grpcretry

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/retry"
)

// An Interceptor makes a unary gRPC call again after it failed with
// UNAVAILABLE, only when the rules in the package documentation allow it:
// the call never reached a server, or its method is idempotent. Its
// [Interceptor.Unary] method is the grpc-go unary client interceptor:
//
//	grpc.WithUnaryInterceptor(grpcretry.Interceptor{Idempotent: idempotent}.Unary)
//
// The zero Interceptor is ready to use: it makes at most [retry.DefaultAttempts]
// attempts per call and treats no method as idempotent, so that it retries
// only calls that never reached a server. An Interceptor is safe for
// concurrent use by multiple goroutines.
//
// An Interceptor does not retry streaming calls, nor any status other than
// UNAVAILABLE, and it does not replace grpc-go's own retries: within each
// of its attempts, grpc-go first retries what it knows the server did not
// process, then what its service config's retryPolicy allows. A call made
// with [grpc.WaitForReady] waits for a connection instead of failing
// without one; only a broken connection or the server's answer can then
// make it retry.
type Interceptor struct {
	// Policy sets the number of attempts per call, the first one
	// included, and the backoff between them. Policy.Unprocessed is
	// HTTP's and is ignored.
	Policy retry.Policy

	// Idempotent reports whether a method, named as grpc-go names it
	// ("/package.Service/Method"), has the same effect when the server
	// processes a call twice as when it processes it once. A call of such
	// a method, or one whose outgoing metadata carries an
	// idempotency-key or x-idempotency-key, may be retried after it
	// reached the server. Nil means that no method is idempotent.
	Idempotent func(fullMethod string) bool
}

// Unary is a [grpc.UnaryClientInterceptor]: it invokes the call, and
// invokes it again while the failure allows it (see the package
// documentation). It returns nil once an attempt succeeds, else the last
// attempt's error. It returns at once, with the last attempt's error, when
// ctx is done while it waits to retry, and makes no retry that would start
// after ctx's deadline.
//
// Each attempt is a whole grpc-go call with opts, to which the Interceptor
// adds a [grpc.Peer] and a [grpc.Trailer] option of its own. grpc-go picks
// a connection for each attempt: never one that has closed, since it picks
// only a connection whose subchannel is READY, and retries by itself a call
// that it could not start on a closing one.
func (i Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	isIdempotent := i.idempotent(ctx, method)
	for n := 1; ; n++ {
		// grpc-go fills the peer, and the trailer, only for an attempt that
		// got a stream on a connection; an attempt that never did left
		// nothing on any wire (see notReached). The next attempt is picked
		// afresh (pickerWrapper.pick, picker_wrapper.go): a transport that
		// closed made its subchannel IDLE before its calls failed
		// (http2Client.Close calls onClose first, http2_client.go).
		var p peer.Peer
		var trailer metadata.MD
		attemptOpts := append(opts[:len(opts):len(opts)], grpc.Peer(&p), grpc.Trailer(&trailer))
		err := invoker(ctx, method, req, reply, cc, attemptOpts...)
		if err == nil || ctx.Err() != nil || status.Code(err) != codes.Unavailable {
			return err
		}
		unsent := notReached(p)
		if !unsent && !isIdempotent {
			return err
		}
		asked, ok := pushback(trailer)
		if !ok {
			return err
		}
		wait, ok := i.Policy.Next(ctx, n, asked)
		if !ok || !i.pause(ctx, cc, wait, unsent) {
			return err
		}
	}
}

// idempotent reports whether a call of method with ctx may be processed
// twice: the Interceptor's Idempotent says so of its method, or its sender
// did with an idempotency key, as retry.Transport's rule for HTTP requests
// does.
func (i Interceptor) idempotent(ctx context.Context, method string) bool {
	if i.Idempotent != nil && i.Idempotent(method) {
		return true
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, key := range []string{"idempotency-key", "x-idempotency-key"} {
		if v := md.Get(key); len(v) > 0 && v[0] != "" {
			return true
		}
	}
	return false
}

// notReached reports whether a failed attempt, whose peer grpc-go filled
// through [grpc.Peer], never reached a server. grpc-go fills the peer from
// the attempt's transport stream after the call, and only if the attempt
// got one (clientStream.finish, stream.go). A transport stream exists as
// soon as its headers are queued for the wire (http2Client.NewStream), and
// the attempt that got none — no READY connection to pick, a connect that
// failed, a connection that closed before the stream began — sent nothing.
// grpc-go's balancer API draws the same line: its DoneInfo.BytesSent is
// "whether any bytes have been sent to the server", set when the attempt
// had a transport stream.
//
// The rule errs on the safe side: an attempt whose stream was queued but
// not yet written when its connection closed counts as reached.
func notReached(p peer.Peer) bool {
	return p.Addr == nil
}

// pause waits for wait, the backoff, then, before a call that never
// reached a server (unsent), while cc is in TRANSIENT_FAILURE, for at most
// the rest of the Policy's MaxDelay. It reports whether ctx is still not
// done. A channel in TRANSIENT_FAILURE fails every call that does not wait
// for ready at once, with its last connect's error, and stays there until
// a connect succeeds (gRFC A62's sticky TRANSIENT_FAILURE); it connects
// again when its reconnect backoff ends (grpc.ConnectParams: 1 s at first
// by default, 1.6 times longer each time, up to 120 s). A retry made
// sooner would fail the same way.
func (i Interceptor) pause(ctx context.Context, cc *grpc.ClientConn, wait time.Duration, unsent bool) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	}
	limit := i.Policy.MaxDelay
	if limit <= 0 {
		limit = retry.DefaultMaxDelay
	}
	if unsent && cc != nil && limit > wait && cc.GetState() == connectivity.TransientFailure {
		wctx, cancel := context.WithTimeout(ctx, limit-wait)
		defer cancel()
		cc.WaitForStateChange(wctx, connectivity.TransientFailure)
	}
	// ctx's own timer may not have fired yet at its deadline.
	deadline, ok := ctx.Deadline()
	return ctx.Err() == nil && (!ok || time.Now().Before(deadline))
}

// pushback returns the wait that a server asked for in its trailer's
// grpc-retry-pushback-ms (gRFC A6), or zero. It reports false when the
// server asked not to be retried: a negative or malformed value.
func pushback(trailer metadata.MD) (time.Duration, bool) {
	v := trailer.Get("grpc-retry-pushback-ms")
	if len(v) == 0 {
		return 0, true
	}
	ms, err := strconv.Atoi(v[0])
	if len(v) > 1 || err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
