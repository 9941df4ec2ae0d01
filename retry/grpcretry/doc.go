// Package grpcretry provides a grpc-go unary client interceptor that makes
// a call again only when doing so cannot make the server process it twice,
// by the rules of package retry for HTTP requests.
//
//	conn, err := grpc.NewClient("dns:///orders:50051",
//		grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithUnaryInterceptor(grpcretry.Interceptor{
//			Idempotent: func(method string) bool { return method == "/orders.v1.Orders/GetOrder" },
//		}.Unary))
//
// grpc-go itself sends a call again, unseen by the caller, when it knows
// that the server did not process it: a stream that the server refused or
// that a GOAWAY left unprocessed, a stream that could not start on a
// closing connection. A call that fails UNAVAILABLE all the same is sent
// again by an [Interceptor], with the same [retry.Policy] as HTTP requests, if
// its context is not done, attempts remain, and one of these holds:
//
//   - The call never reached a server: grpc-go had no connection to give
//     it (connects refused or timed out, the name not resolved, every
//     subchannel in TRANSIENT_FAILURE). This holds for every method. The
//     Interceptor knows it from [grpc.Peer]: grpc-go fills the peer of a
//     call only once the call had a stream on a connection.
//   - The method is idempotent ([Interceptor.Idempotent] says so, or the
//     call's outgoing metadata carries an idempotency-key or
//     x-idempotency-key) and the call reached a server: its connection
//     broke after it was sent ("transport is closing", "error reading from
//     server: EOF", a reset), or the server's application answered
//     UNAVAILABLE. The server's grpc-retry-pushback-ms is honoured as
//     Retry-After is; a negative one stops the retries.
//
// A call of a method that is not idempotent and that reached a server is
// never sent again, whether its connection broke under it or the server
// answered UNAVAILABLE: either may come after the application did its work
// (gRPC's status code guide warns that UNAVAILABLE is not always safe to
// retry for non-idempotent operations). No other status is retried.
//
// Each retry is a new grpc-go call, for which the channel picks a
// connection again; grpc-go picks only a READY one, never the connection
// that broke. A channel whose connects fail stays in TRANSIENT_FAILURE,
// failing every call at once, until its reconnect backoff (1 s at first
// by default) lets it connect again; before it retries a call that never
// reached a server, the Interceptor waits for the channel to leave
// TRANSIENT_FAILURE, up to the Policy's MaxDelay, rather than spend the
// attempt there. The backoff and that wait together last at most MaxDelay:
// with the zero Policy, a call to an address that refuses every connect
// fails after about 4 s (three attempts, two waits of up to 2 s), where
// the backoff alone would suggest 0.6 s.
//
// grpc-go's own retries, which a service config's retryPolicy sets, send
// again any attempt that ended with one of its retryableStatusCodes before
// the server's response headers, and its retryThrottling stops them on a
// channel whose calls mostly fail. That policy knows nothing of idempotency:
// with UNAVAILABLE among its codes, it also resends a call whose connection
// broke while the server was processing it. Give it to idempotent methods;
// it is then the better choice for streaming calls, for codes other than
// UNAVAILABLE, for a policy that the service's owner publishes in its
// service config, and for many clients failing together, which its throttle
// calms and the Interceptor does not. The Interceptor is for what that
// policy cannot know: that a call of a method that is not idempotent never
// reached a server. Both may be used at once: each attempt of the
// Interceptor is then a whole call with grpc-go's retries, and the numbers
// of attempts multiply.
package grpcretry
