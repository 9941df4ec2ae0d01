// Package retry provides an [http.RoundTripper] that resends a request only
// when doing so cannot make the server process it twice.
//
// # The problem
//
// When a pod behind a Kubernetes Service goes away, its clients see
// connection-level failures: a refused connect while no endpoint listens, a
// reset or an EOF on a keep-alive connection that the old pod held until it
// was killed. Some of these requests never reached the server and can be
// sent again safely; others may have been processed, and resending them
// executes a POST twice. General-purpose retry libraries (go-retryablehttp,
// failsafe-go) and proxies configured to retry every reset or every 503 do
// not tell the two apart.
//
// # Use
//
//	client := &http.Client{Transport: &retry.Transport{}}
//	resp, err := client.Get("http://orders/api/v1/orders/42")
//
// The zero Transport makes its own connections (HTTP/1.1) with a connect
// timeout of [DefaultConnectTimeout] and a maximum connection lifetime of
// [DefaultMaxConnLifetime], and makes at most [DefaultAttempts] attempts per
// request.
//
// # Safety rules
//
// A failed attempt is sent again only if its body can be replayed (no body,
// or [http.Request.GetBody] is set, as [http.NewRequest] does for in-memory
// bodies), the request's context is not done, attempts remain, and one of
// these holds, as in Envoy's safe retry set (connect-failure,
// refused-stream, reset-before-request):
//
//   - The request never reached the server: the connection to it could not
//     be made (refused, connect timeout, no route, name not resolved). This
//     holds for every method.
//   - The request is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE, or
//     it carries an Idempotency-Key or X-Idempotency-Key header) and the
//     attempt failed without a response: a reset, an EOF before the
//     response, a response timeout.
//   - A response proves that the request was not processed, as decided by
//     [Policy.Unprocessed] (for example a 503 that a proxy produced because
//     it could not connect to any upstream). This holds for every method.
//
// A request that is not idempotent and that failed after it may have been
// sent — a reset, an EOF, a timeout waiting for the response — is never sent
// again: the server may have processed it.
//
// Every retry goes out on a new connection, never on the one that just
// failed nor on another pooled connection that may lead to the same dying
// server. Attempts are spaced by an exponential backoff with jitter, capped
// at [Policy.MaxDelay]; a Retry-After header on a retried response is
// honoured, and no retry is made that would start after the request
// context's deadline.
//
// The connections that the Transport makes itself live at most
// [Transport.MaxConnLifetime], so that a client holding keep-alive
// connections reconnects, through the Service, to pods that exist now.
// net/http's Transport has no such limit (golang/go#23427). A connection past
// its lifetime is closed once its request in flight is done, never in the
// middle of it.
//
// # gRPC
//
// The package grpcretry under this one applies the same rules, and the
// same [Policy], to gRPC calls, as a grpc-go unary client interceptor. It
// is a package of its own so that this one needs nothing but the standard
// library.
package retry
