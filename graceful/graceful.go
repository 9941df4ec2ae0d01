package graceful

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults used when the corresponding [Server] field is zero.
const (
	// DefaultTerminationBudget is Kubernetes' default
	// terminationGracePeriodSeconds: the time between the stop signal and
	// SIGKILL when the pod has no preStop hook.
	DefaultTerminationBudget = 30 * time.Second
	// DefaultSlack is the part of the budget kept for the process to exit
	// after the drain.
	DefaultSlack = 2 * time.Second
)

// quietGrace is how long, during the drain, a connection that carries no
// request (accepted and silent, or idle between keep-alive requests) is left
// open. Its next request may already be on the wire, and closing the
// connection under it would drop it; a request that arrives in time is
// answered with "Connection: close". A client that stays quiet this long is
// done with the connection.
//
// The second is counted in the drain loop's own running time: a gap between
// two of its looks longer than quietStep counts as quietStep only. A process
// that is not scheduled for a while (CPU throttling, a loaded node) has not
// been able to read what its clients sent meanwhile; the wall clock alone
// would have their requests' connections look quiet and close them.
const (
	quietGrace = time.Second
	quietLook  = quietGrace / 10 // how often the drain loop looks at least
	quietStep  = 2 * quietLook   // the most quiet time one look can add
)

var (
	// ErrDrainTimeout is returned by [Server.Serve] when the drain deadline
	// passed with connections still open; they were closed.
	ErrDrainTimeout = errors.New("graceful: drain deadline passed with connections open")
	// ErrInterrupted is returned by [Server.Serve] when a second signal
	// arrived during termination; every connection was closed at once.
	ErrInterrupted = errors.New("graceful: second signal, stopped at once")
	// ErrServerUsed is returned by [Server.Serve] when the Server has
	// already served; a Server runs once.
	ErrServerUsed = errors.New("graceful: Server already used")
)

// GRPCServer is what a [Server] needs of a gRPC server, as grpc-go's
// *grpc.Server has it. It is an interface so that a program that serves
// HTTP alone does not link grpc-go.
type GRPCServer interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// HealthServer is what a [Server] needs of a gRPC health service, as
// grpc-go's *health.Server has it: Shutdown sets every service it knows
// NOT_SERVING, and keeps them so.
type HealthServer interface {
	Shutdown()
}

// Server runs an [http.Server] or a gRPC server until a termination
// signal, then drains it as the package documentation describes. The zero
// value is not usable: one of HTTP and GRPC must be set. All other fields
// are optional.
//
// A Server serves once; it cannot be reused after [Server.Serve] returns.
type Server struct {
	// HTTP is the server to run. Serve wraps its Handler (nil means
	// http.DefaultServeMux) and chains its ConnState and ConnContext hooks;
	// they must not be changed while Serve runs. If TLSConfig is set, its
	// Certificates or GetCertificate serve TLS.
	HTTP *http.Server

	// GRPC is the gRPC server to run, instead of HTTP: a *grpc.Server.
	// Its drain is GracefulStop, bounded by the drain deadline, then Stop.
	GRPC GRPCServer

	// Health, with GRPC, is the server's grpc.health.v1 service, a
	// *health.Server: every service it knows turns NOT_SERVING when
	// termination begins, which fails a kubelet's grpc readiness probe as
	// ReadyHandler fails an HTTP one. Nil means GRPC serves no health
	// service of graceful's knowing.
	Health HealthServer

	// Signals start the termination sequence; a second one ends it at once.
	// Nil means SIGTERM and SIGINT.
	Signals []os.Signal

	// PreStopDelay is how long the server keeps accepting and serving after
	// termination begins, with readiness failing. Zero means none: use it
	// when the pod has no preStop sleep of its own. It counts against the
	// termination budget.
	PreStopDelay time.Duration

	// TerminationBudget is the time the platform allows between the signal
	// and SIGKILL: terminationGracePeriodSeconds minus the manifest's preStop
	// hook, if any. Zero means DefaultTerminationBudget.
	TerminationBudget time.Duration

	// Slack is the part of the budget kept for the process to exit after the
	// drain. Zero means DefaultSlack.
	Slack time.Duration

	// DrainTimeout, if positive, is the drain deadline measured from the end
	// of the pre-stop delay, instead of the one derived from the budget
	// (TerminationBudget − PreStopDelay − Slack).
	DrainTimeout time.Duration

	// DrainHijacked, if set, is called in its own goroutine for each
	// hijacked connection when the drain begins (or when a connection is
	// hijacked during the drain), so that the application can ask the peer
	// to close, as with a WebSocket close frame. Hijacked connections are
	// waited for until the drain deadline, then closed.
	DrainHijacked func(net.Conn)

	// OnTerminate, if set, is called once when termination begins, with the
	// signal that began it, or nil if the context passed to Serve was done.
	// It runs before the pre-stop delay and must not block.
	OnTerminate func(os.Signal)

	// OnDrain, if set, is called once when the drain begins, after the
	// pre-stop delay, as the listener closes: from then on, new
	// connections are refused. It must not block.
	OnDrain func()

	used    atomic.Bool
	phase   atomic.Int32 // a phase value
	changed chan struct{}

	mu    sync.Mutex
	conns map[*conn]struct{} // accepted and not yet closed
}

// The phases of a Server, in order.
const (
	phaseNew int32 = iota
	phaseServing
	phaseStopping // termination began; still accepting (pre-stop delay)
	phaseDraining // listener closed
	phaseStopped
)

// ReadyHandler returns a handler for the readiness probe: 200 while the
// server is serving, 503 before [Server.Serve] starts and from the moment
// termination begins.
func (s *Server) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.phase.Load() != phaseServing {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

// LiveHandler returns a handler for the liveness probe: it answers 200 for
// as long as the process serves, termination included. It checks nothing
// else, so that a slow dependency never gets a healthy process restarted.
func (s *Server) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
}

// ListenAndServe listens on the TCP address HTTP.Addr (":http" if empty) and
// calls [Server.Serve].
func (s *Server) ListenAndServe(ctx context.Context) error {
	if s.HTTP == nil {
		return errors.New("graceful: Server.HTTP is nil (a gRPC server is served with Serve)")
	}
	ln, err := net.Listen("tcp", cmp.Or(s.HTTP.Addr, ":http"))
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve accepts connections on ln and serves them until a signal in Signals
// arrives or ctx is done, then runs the termination sequence and returns
// when every connection is closed: nil after a complete drain,
// [ErrDrainTimeout] or [ErrInterrupted] when connections had to be closed,
// or the listener's error if it failed before termination. Serve closes ln.
// Handlers that ignore their request's context may still be running when it
// returns; their connections are closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if (s.HTTP == nil) == (s.GRPC == nil) {
		ln.Close()
		return errors.New("graceful: set one of Server.HTTP and Server.GRPC")
	}
	if s.Health != nil && s.GRPC == nil {
		ln.Close()
		return errors.New("graceful: Server.Health is a gRPC server's health service: an HTTP server's readiness is ReadyHandler")
	}
	drain, err := s.drainTimeout()
	if err != nil {
		ln.Close()
		return err
	}
	if !s.used.CompareAndSwap(false, true) {
		ln.Close()
		return ErrServerUsed
	}
	signals := make(chan os.Signal, 2)
	if len(s.Signals) > 0 {
		signal.Notify(signals, s.Signals...)
	} else {
		signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	}
	defer signal.Stop(signals)
	if s.GRPC != nil {
		return s.serveGRPC(ctx, ln, signals, drain)
	}

	s.changed = make(chan struct{}, 1)
	s.conns = make(map[*conn]struct{})
	s.hook()
	tl := &listener{Listener: ln, srv: s}
	// served is closed when HTTP's accept loop has returned, with its
	// result in serveErr: every connection it accepted is tracked by then.
	served := make(chan struct{})
	var serveErr error
	// Serving before the first Accept: a request that arrives at once must
	// find the server ready.
	s.phase.Store(phaseServing)
	go func() {
		defer close(served)
		if s.HTTP.TLSConfig != nil {
			serveErr = s.HTTP.ServeTLS(tl, "", "")
		} else {
			serveErr = s.HTTP.Serve(tl)
		}
	}()

	var sig os.Signal
	select {
	case <-served:
		s.phase.Store(phaseStopped)
		s.closeAll()
		return serveErr
	case sig = <-signals:
	case <-ctx.Done():
	}
	err = s.terminate(sig, signals, tl, served, drain)
	s.phase.Store(phaseStopped)
	<-served // returns once the listener is closed
	return err
}

// drainTimeout returns the drain deadline measured from the end of the
// pre-stop delay.
func (s *Server) drainTimeout() (time.Duration, error) {
	if s.PreStopDelay < 0 || s.TerminationBudget < 0 || s.Slack < 0 || s.DrainTimeout < 0 {
		return 0, errors.New("graceful: negative duration in Server")
	}
	if s.DrainTimeout > 0 {
		return s.DrainTimeout, nil
	}
	budget := cmp.Or(s.TerminationBudget, DefaultTerminationBudget)
	slack := cmp.Or(s.Slack, DefaultSlack)
	if d := budget - s.PreStopDelay - slack; d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("graceful: pre-stop delay %v and slack %v leave no drain time in a termination budget of %v",
		s.PreStopDelay, slack, budget)
}

// terminate runs the termination sequence after its first trigger; served
// is closed when HTTP's accept loop has returned.
func (s *Server) terminate(sig os.Signal, signals <-chan os.Signal, tl *listener, served <-chan struct{}, drain time.Duration) error {
	s.phase.Store(phaseStopping)
	if s.OnTerminate != nil {
		s.OnTerminate(sig)
	}
	// Pre-stop: serve on with readiness failing; the handler wrapper adds
	// "Connection: close" so keep-alive clients leave by themselves.
	if s.PreStopDelay > 0 {
		t := time.NewTimer(s.PreStopDelay)
		select {
		case <-t.C:
		case <-signals:
			t.Stop()
			s.closeAll()
			return ErrInterrupted
		}
	}
	deadline := time.NewTimer(drain)
	defer deadline.Stop()

	// Drain HTTP/1: stop accepting. Every response since termination began
	// carries "Connection: close" (see responseWriter), so net/http closes
	// each busy connection after its response; idle ones close by the quiet
	// rule of onlyHTTP2Left. Not SetKeepAlivesEnabled(false): it closes every
	// idle connection at once, under a request that may be on its way, and
	// closes a connection after a response that has already gone out without
	// "Connection: close", so the client's next request on it is lost.
	s.phase.Store(phaseDraining)
	tl.Close()
	if s.OnDrain != nil {
		s.OnDrain()
	}
	// A connection that the kernel accepted just before the close may not
	// be tracked yet: listener.Accept has it but has not returned it. Once
	// the accept loop has returned, every accepted connection is tracked and
	// the count of open ones can be trusted.
	if err := s.await(served, signals, deadline.C); err != nil {
		return err
	}
	s.drainHijacked()
	tick := time.NewTicker(quietLook)
	defer tick.Stop()
	quiet := quietClock{last: time.Now()}
	for !s.onlyHTTP2Left(quiet.look(time.Now())) {
		select {
		case <-signals:
			s.closeAll()
			return ErrInterrupted
		case <-deadline.C:
			s.closeAll()
			return ErrDrainTimeout
		case <-s.changed:
		case <-tick.C:
		}
	}
	if s.open() == 0 {
		return nil
	}

	// Drain HTTP/2: no HTTP/1 connection is left for Shutdown to drop a
	// request from, so its GOAWAY to the HTTP/2 connections is safe now.
	// HTTP's accept loop has returned and given up the listener, so Shutdown
	// does not close it a second time, which would fail with "use of closed
	// network connection".
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shut := make(chan struct{})
	var shutErr error
	go func() {
		defer close(shut)
		shutErr = s.HTTP.Shutdown(ctx)
	}()
	if err := s.await(shut, signals, deadline.C); err != nil {
		return err
	}
	return shutErr
}

// await waits until done is closed and returns nil, unless a signal or the
// drain deadline comes first: then it closes every connection and returns
// [ErrInterrupted] or [ErrDrainTimeout].
func (s *Server) await(done <-chan struct{}, signals <-chan os.Signal, deadline <-chan time.Time) error {
	select {
	case <-done:
		return nil
	case <-signals:
		s.closeAll()
		return ErrInterrupted
	case <-deadline:
		s.closeAll()
		return ErrDrainTimeout
	}
}

// quietClock measures the drain loop's running time between its looks.
type quietClock struct{ last time.Time }

// look returns the quiet time to credit since the previous look: the time
// that passed, but no more than quietStep.
func (q *quietClock) look(now time.Time) time.Duration {
	d := min(now.Sub(q.last), quietStep)
	q.last = now
	return max(d, 0)
}

// onlyHTTP2Left credits step to the quiet time of every HTTP/1 connection
// that carries no request, closes those that have been quiet for quietGrace,
// and reports whether only HTTP/2 connections are still open.
//
// A connection is not quiet while its next request is on its way to the
// handler: waiting unread in the kernel, which starts its quiet time over,
// or read in part by net/http and not yet parsed (its state becomes active
// only then): an idle connection that has read anything since it went idle
// is left to finish its request, which the drain deadline bounds. A new
// connection's reads only start its quiet time over: they may be a TLS
// handshake, after which a client can stay silent.
func (s *Server) onlyHTTP2Left(step time.Duration) bool {
	var closable []*conn
	done := true
	s.mu.Lock()
	for c := range s.conns {
		if c.http2.Load() {
			continue
		}
		done = false
		if !c.quietLocked() {
			continue
		}
		if c.quiet += step; c.quiet >= quietGrace {
			closable = append(closable, c)
		}
	}
	s.mu.Unlock()
	for _, c := range closable {
		// Peek first, then look again at what net/http did meanwhile, so
		// that a request it read in between is not closed under it.
		pending := unread(c.Conn)
		s.mu.Lock()
		if pending {
			c.quiet = 0
		}
		closeIt := !pending && c.quietLocked() && c.quiet >= quietGrace
		s.mu.Unlock()
		if closeIt {
			c.Close()
		}
	}
	return done
}

// quietLocked reports whether c carries no request, as far as its state
// and reads tell; for a new connection that has read, it starts the quiet
// time over. s.mu must be held.
func (c *conn) quietLocked() bool {
	if c.state != http.StateIdle && c.state != http.StateNew {
		return false
	}
	if n := c.reads.Load(); n != c.readsAtState {
		if c.state == http.StateIdle {
			return false
		}
		c.readsAtState, c.quiet = n, 0
	}
	return true
}

// drainHijacked hands every hijacked connection to DrainHijacked.
func (s *Server) drainHijacked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state == http.StateHijacked {
			s.drainHijackedLocked(c)
		}
	}
}

func (s *Server) drainHijackedLocked(c *conn) {
	if s.DrainHijacked != nil && !c.drained {
		c.drained = true
		go s.DrainHijacked(c)
	}
}

// open returns the number of connections not yet closed.
func (s *Server) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// closeAll closes every connection, hijacked ones included.
func (s *Server) closeAll() {
	s.HTTP.Close()
	s.mu.Lock()
	all := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// notify wakes the drain loop.
func (s *Server) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

type connKey struct{}

// hook wraps HTTP's handler and chains its connection hooks.
func (s *Server) hook() {
	h := s.HTTP.Handler
	if h == nil {
		h = http.DefaultServeMux
	}
	s.HTTP.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			if c, ok := r.Context().Value(connKey{}).(*conn); ok {
				c.http2.Store(true)
			}
		}
		rw := &responseWriter{ResponseWriter: w, srv: s}
		h.ServeHTTP(rw, r)
		rw.commit() // a handler that wrote nothing: net/http answers 200
	})
	connState := s.HTTP.ConnState
	s.HTTP.ConnState = func(nc net.Conn, state http.ConnState) {
		if c := unwrap(nc); c != nil {
			s.mu.Lock()
			c.state, c.quiet, c.readsAtState = state, 0, c.reads.Load()
			if state == http.StateHijacked && s.phase.Load() >= phaseDraining {
				s.drainHijackedLocked(c)
			}
			s.mu.Unlock()
			s.notify()
		}
		if connState != nil {
			connState(nc, state)
		}
	}
	connContext := s.HTTP.ConnContext
	s.HTTP.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, nc)
		}
		if c := unwrap(nc); c != nil {
			ctx = context.WithValue(ctx, connKey{}, c)
		}
		return ctx
	}
}

// unwrap finds the tracked connection under nc, which net/http may have
// wrapped in TLS.
func unwrap(nc net.Conn) *conn {
	for {
		switch c := nc.(type) {
		case *conn:
			return c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// listener tracks the connections it accepts.
type listener struct {
	net.Listener
	srv *Server
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, srv: l.srv, state: http.StateNew}
	l.srv.mu.Lock()
	l.srv.conns[c] = struct{}{}
	l.srv.mu.Unlock()
	return c, nil
}

// conn is an accepted connection, tracked until it is closed by whoever
// holds it: net/http, a hijacker or the Server.
type conn struct {
	net.Conn
	srv   *Server
	http2 atomic.Bool   // carried an HTTP/2 request
	reads atomic.Uint64 // reads that returned data
	once  sync.Once

	// Guarded by srv.mu.
	state        http.ConnState
	readsAtState uint64        // reads when state was entered
	quiet        time.Duration // in state without a request, in drain loop time
	drained      bool          // handed to DrainHijacked
}

// Read counts the reads that return data, which tell the drain that a
// request is arriving before net/http has parsed it.
func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		c.srv.notify()
	})
	return err
}

// CloseWrite keeps net/http's half-close before it closes a connection
// whose request body it did not read.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom keeps the underlying connection's sendfile and splice paths,
// which net/http finds by asserting io.ReaderFrom.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// responseWriter adds "Connection: close" to a response whose header is
// written after termination began: for HTTP/1, net/http then closes the
// connection after the response; for HTTP/2 it sends a graceful GOAWAY. The
// decision is taken when the header is written, so a response that goes out
// with keep-alive leaves its connection open for the next request, which is
// then answered with "Connection: close".
//
// It implements the optional interfaces that handlers assert directly
// (http.Flusher, http.Hijacker, io.ReaderFrom, io.StringWriter) and Unwrap
// for http.ResponseController.
type responseWriter struct {
	http.ResponseWriter
	srv       *Server
	committed bool
}

// commit adds the header if termination has begun; it acts once, before the
// header is written.
func (w *responseWriter) commit() {
	if w.committed {
		return
	}
	w.committed = true
	if w.srv.phase.Load() >= phaseStopping {
		w.Header().Set("Connection", "close")
	}
}

func (w *responseWriter) WriteHeader(code int) {
	if code >= 200 { // informational headers do not commit the response
		w.commit()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.commit()
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) WriteString(s string) (int, error) {
	w.commit()
	return io.WriteString(w.ResponseWriter, s)
}

func (w *responseWriter) ReadFrom(r io.Reader) (int64, error) {
	w.commit()
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w.ResponseWriter}, r)
}

func (w *responseWriter) Flush() {
	w.commit()
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
