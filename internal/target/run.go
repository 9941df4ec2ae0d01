package target

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/closingtime-dev/closingtime/graceful"
)

// Run runs the process that cfg describes, a lab server or a wrapper of one,
// until that process would exit, and returns its exit code: ExitSIGTERM
// after SIGTERM in the handled modes, Config.CrashCode after a crash, a
// wrapper's code. The caller exits the process with it at once: Run has
// closed the connections of the server, but in ModeExit the handlers of
// the requests it dropped may still be running, and a wrapper leaves its
// child to die with the process (as Pdeathsig or the PID namespace wants).
//
// Run installs its own handling of SIGTERM (none at all in ModeIgnore and
// in WrapperSh) and of SIGINT in WrapperNPM; it must be the only user of
// those signals in the process. When ctx is done, Run closes the server's
// listener and connections, or kills the wrapper's child, and returns
// ctx.Err().
//
// An error means Run could not do what cfg asks: an invalid Config, a port
// already in use, a mode this operating system cannot provide.
func Run(ctx context.Context, cfg Config) (int, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	log := NewLogger(cfg.Log, cfg.LogFormat, cfg.PodName)
	if cfg.Wrapper != WrapperNone {
		return runWrapper(ctx, cfg, log)
	}
	s := &server{cfg: cfg, log: log}
	return s.run(ctx)
}

// run starts the server, waits out the start-up delay, listens and serves in
// the configured mode.
func (s *server) run(ctx context.Context) (int, error) {
	// SIGTERM is watched from the start, so that a pod deleted while it
	// starts leaves as its mode says rather than by the Go runtime's
	// default (which, as PID 1, exits 2). It is set before the "started"
	// event, which tells the world that the handling is in place.
	sigterm := make(chan os.Signal, 1)
	if s.cfg.Shutdown == ModeIgnore {
		if err := defaultSIGTERM(); err != nil {
			return 0, fmt.Errorf("shutdown mode %s: %w", ModeIgnore, err)
		}
	} else {
		signal.Notify(sigterm, syscall.SIGTERM)
		defer signal.Stop(sigterm)
	}
	s.log.Info("started", "config", s.cfg.settings())
	if s.cfg.ReadyFile != "" {
		// One a killed instance left says nothing of this one.
		if err := os.Remove(s.cfg.ReadyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("ready file: %w", err)
		}
	}

	var crash <-chan time.Time
	if s.cfg.CrashCode != 0 {
		if s.cfg.CrashAfter == 0 {
			return s.crash()
		}
		crash = time.After(s.cfg.CrashAfter)
	}

	if s.cfg.StartupDelay > 0 {
		if _, by := await(ctx, time.After(s.cfg.StartupDelay), sigterm, crash); by != notInterrupted {
			return s.interrupted(ctx, by)
		}
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return 0, err
	}
	// The ready file is there by the time the port's opening is told.
	if s.cfg.ReadyFile != "" {
		if err := os.WriteFile(s.cfg.ReadyFile, []byte(s.cfg.PodName+"\n"), 0o644); err != nil {
			ln.Close()
			return 0, fmt.Errorf("ready file: %w", err)
		}
		defer os.Remove(s.cfg.ReadyFile)
	}
	s.log.Info("listening", "address", ln.Addr().String())

	switch {
	case s.cfg.GRPC:
		return s.serveGRPC(ctx, ln, sigterm, crash)
	case s.cfg.Shutdown == ModeGraceful:
		return s.serveGraceful(ctx, ln, crash)
	case s.cfg.Shutdown == ModeHostage:
		return s.serveHostage(ctx, ln, sigterm, crash)
	default:
		// ModeIgnore never receives on sigterm: the kernel decides.
		return s.serveExit(ctx, ln, sigterm, crash)
	}
}

// serveExit serves until SIGTERM, then closes every connection at once, as
// the process's exit would.
func (s *server) serveExit(ctx context.Context, ln net.Listener, sigterm <-chan os.Signal, crash <-chan time.Time) (int, error) {
	hs := s.newHTTPServer(http.HandlerFunc(s.serveReady))
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer hs.Close()
	err, by := await(ctx, served, sigterm, crash)
	if by != notInterrupted {
		return s.interrupted(ctx, by)
	}
	return 0, fmt.Errorf("serve: %w", err)
}

// serveGraceful serves through graceful.Server, which handles SIGTERM from
// here on, and exits after its drain.
//
// graceful.Server registers for SIGTERM inside Serve and takes no channel
// of the caller's, so a SIGTERM in the instant between the "listening"
// event and that registration reaches only run's channel, which nobody
// reads any more: the signal is lost, not fatal, and Kubernetes' SIGKILL
// ends the pod at the end of its grace period.
func (s *server) serveGraceful(ctx context.Context, ln net.Listener, crash <-chan time.Time) (int, error) {
	gs := &graceful.Server{
		Signals:      []os.Signal{syscall.SIGTERM},
		PreStopDelay: s.cfg.PreStopDelay,
		DrainTimeout: s.cfg.DrainTimeout,
		OnTerminate:  func(os.Signal) { s.onSigterm() },
		OnDrain:      s.onListenerClosed,
	}
	gs.HTTP = s.newHTTPServer(gs.ReadyHandler())
	served := make(chan error, 1)
	// The context is not ctx: graceful would drain when it is done, and Run
	// stops at once then.
	go func() { served <- gs.Serve(context.Background(), ln) }()
	err, by := await(ctx, served, nil, crash)
	if by != notInterrupted {
		gs.HTTP.Close()
		<-served
		return s.interrupted(ctx, by)
	}
	return s.drained(err)
}

// serveHostage serves until SIGTERM, then does what Node's server.close()
// does (lib/_http_server.js, Node 20): it closes the listener and, once,
// the connections idle at that moment (closeIdleConnections), and waits for
// the others to close by themselves. Node never tells a busy connection
// that the server is closing, so keep-alive stays on: a connection busy at
// SIGTERM serves every further request of its client until it stays idle
// for IdleTimeout (keepAliveTimeout). Hence neither Shutdown nor
// SetKeepAlivesEnabled here: both make Go close busy connections after
// their current response.
func (s *server) serveHostage(ctx context.Context, ln net.Listener, sigterm <-chan os.Signal, crash <-chan time.Time) (int, error) {
	conns := newConnSet()
	hs := s.newHTTPServer(http.HandlerFunc(s.serveReady))
	hs.ConnState = conns.track
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer hs.Close()
	switch err, by := await(ctx, served, sigterm, crash); by {
	case notInterrupted:
		return 0, fmt.Errorf("serve: %w", err)
	case bySigterm:
	default:
		return s.interrupted(ctx, by)
	}

	s.onSigterm()
	ln.Close()
	// Serve has reported every connection it accepted to ConnState when
	// it returns.
	<-served
	conns.closeIdle()
	for conns.open() > 0 {
		if _, by := await(ctx, conns.changed, nil, crash); by != notInterrupted {
			return s.interrupted(ctx, by)
		}
	}
	s.onDrained("complete")
	return s.exit(ExitSIGTERM)
}

// interruption is what cut a wait of the server short.
type interruption int

const (
	notInterrupted interruption = iota // what was waited for came first
	bySigterm                          // SIGTERM arrived
	byCrash                            // the crash time came
	byCtx                              // Run's context is done
)

// await waits for next, SIGTERM, the crash time or the end of ctx, and
// says which came first, with next's value if it did. A nil sigterm or
// crash never comes: a wait that has SIGTERM handled elsewhere, or no
// crash to come, passes nil.
func await[T any](ctx context.Context, next <-chan T, sigterm <-chan os.Signal, crash <-chan time.Time) (T, interruption) {
	var v T
	select {
	case v = <-next:
		return v, notInterrupted
	case <-sigterm:
		return v, bySigterm
	case <-crash:
		return v, byCrash
	case <-ctx.Done():
		return v, byCtx
	}
}

// interrupted ends the server as the interruption by says: after SIGTERM
// with ExitSIGTERM, at the crash time with Config.CrashCode, at the end of
// ctx with its error.
func (s *server) interrupted(ctx context.Context, by interruption) (int, error) {
	switch by {
	case bySigterm:
		s.onSigterm()
		return s.exit(ExitSIGTERM)
	case byCrash:
		return s.crash()
	}
	return 0, ctx.Err()
}
