// Package graceful runs an [http.Server] through the termination sequence
// that Kubernetes imposes on a pod, without dropping a request.
//
// When a pod is deleted, the kubelet's stop signal and the removal of the
// pod from every node's routing race each other: for a moment after SIGTERM
// new connections still arrive, and keep-alive connections that were opened
// earlier stay pinned to the pod for as long as they live. A server that
// closes its listener at once refuses the first; one that only waits for
// idle connections (Node's server.close()) is held hostage by the second
// until SIGKILL resets what is in flight.
//
// A [Server] answers both. On the first configured signal (SIGTERM and
// SIGINT by default), or when the context passed to
// [Server.ListenAndServe] or [Server.Serve] is done:
//
//  1. Readiness fails: [Server.ReadyHandler] answers 503 from this moment,
//     while [Server.LiveHandler] keeps answering 200.
//  2. For [Server.PreStopDelay] the server keeps accepting and serving, for
//     clusters or images without a preStop sleep; every response in this
//     phase carries "Connection: close", so keep-alive clients move to other
//     pods without a race.
//  3. The listener closes. A busy HTTP/1 connection is closed right after
//     its current response, which carries "Connection: close". A request
//     that arrives on a connection the server had already accepted is
//     answered the same way, never dropped: an idle or newly accepted
//     connection is closed only once it has carried no request for a second
//     of the drain (a keep-alive client that has just received a response
//     may be sending its next request; closing under it would drop that
//     request), and not while a request waits unread on its socket (on
//     Unix, where the listener's connections expose their socket as a
//     syscall.Conn) or has been read in part. That second is counted in the
//     server's own running time, so a process that was throttled or
//     descheduled does not find its clients quiet when it was the one not
//     reading. HTTP/2 connections receive GOAWAY once the
//     HTTP/1 connections are done, and close when their streams finish.
//  4. Hijacked connections (WebSockets and the like) are handed to
//     [Server.DrainHijacked], if set, and waited for like any other.
//  5. At the drain deadline, whatever is left is closed and Serve returns
//     [ErrDrainTimeout]. A second signal closes everything at once and Serve
//     returns [ErrInterrupted].
//
// The drain deadline is derived from the termination budget: the time the
// platform allows between the signal and SIGKILL, minus the pre-stop delay,
// minus a slack for the process to exit. With Kubernetes' defaults and no
// preStop hook in the manifest, that is 30 s − PreStopDelay − 2 s.
//
// This differs from [http.Server.Shutdown] in three ways that matter during a
// rollout: Shutdown silently drops a request that it reads after shutdown
// began, even on a connection accepted just before (golang/go#75591);
// it neither closes nor waits for hijacked connections; and when its context
// expires it returns with connections still open. Server does not call
// Shutdown until only HTTP/2 connections remain, and closes everything at
// its deadline.
//
// A gRPC server runs the same sequence with [Server.GRPC] set instead of
// HTTP: readiness fails (its grpc.health.v1 service, [Server.Health],
// answers NOT_SERVING to every check, which fails a kubelet's grpc
// probe), the pre-stop delay serves on, then GracefulStop closes the
// listener, sends each connection GOAWAY and waits for the calls in
// flight; at the drain deadline, or a second signal, Stop cuts what is
// left, and Serve returns [ErrDrainTimeout] or [ErrInterrupted]. The
// clients' channels reconnect to another pod on the GOAWAY, and grpc-go
// retries a call that the server refused this way transparently.
//
//	gs := grpc.NewServer()
//	hs := health.NewServer()
//	healthpb.RegisterHealthServer(gs, hs)
//	pb.RegisterShopServer(gs, shop)
//	srv := &graceful.Server{GRPC: gs, Health: hs, PreStopDelay: 5 * time.Second}
//	ln, err := net.Listen("tcp", ":50051")
//	…
//	err = srv.Serve(context.Background(), ln)
//
// The package itself needs nothing but the standard library: its fields
// take grpc-go's servers through the small interfaces [GRPCServer] and
// [HealthServer], so that a program that serves HTTP alone does not link
// grpc-go.
//
// A minimal use, in main. ListenAndServe blocks until the termination
// sequence is over, which SIGTERM or SIGINT starts, or the end of the
// context it is given; it returns nil after a complete drain.
//
//	mux := http.NewServeMux()
//	srv := &graceful.Server{HTTP: &http.Server{Addr: ":8080", Handler: mux}}
//	mux.Handle("/ready", srv.ReadyHandler())
//	mux.Handle("/live", srv.LiveHandler())
//	if err := srv.ListenAndServe(context.Background()); err != nil {
//		log.Print(err) // ErrDrainTimeout, ErrInterrupted, or the listener's error
//	}
package graceful
