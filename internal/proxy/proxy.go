package proxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/closingtime-dev/closingtime/internal/target"
)

// podHeader names the pod on the sidecar's own answers, as the lab
// server names it on its.
const podHeader = "X-Pod-Name"

// holdPoll is how often a held sidecar looks for its hold file, and a
// draining one that waits for zero connections counts them.
const holdPoll = 50 * time.Millisecond

// edgeClientIdleTimeout is how long the edge keeps an idle client
// connection open: NGINX's keepalive_timeout, which ingress-NGINX keeps at
// 75 s.
const edgeClientIdleTimeout = 75 * time.Second

// copyBuffers are the buffers that response bodies are copied through,
// one per response at a time: a buffer per request would be most of what
// a proxied request allocates.
var copyBuffers buffers

// buffers is a pool of 32 KiB buffers, io.Copy's size, kept by pointer
// so that putting one back allocates nothing.
type buffers struct{ pool sync.Pool }

func (b *buffers) get() *[]byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return buf
	}
	buf := make([]byte, 32<<10)
	return &buf
}

func (b *buffers) put(buf *[]byte) { b.pool.Put(buf) }

// errRouteTimeout is the cause of a request's context whose route timeout
// passed.
var errRouteTimeout = errors.New("route timeout")

// Run runs the sidecar that cfg describes until it exits, and returns its
// exit code: 0 after SIGTERM (or SIGINT) and after /quitquitquit, as
// Envoy's. The caller exits the process with it. Run installs its own
// handling of SIGTERM and SIGINT; it must be the only user of those
// signals in the process. When ctx is done, Run closes its listeners and
// connections and returns ctx.Err().
//
// An error means Run could not do what cfg asks: an invalid Config, a
// port in use.
func Run(ctx context.Context, cfg Config) (int, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	p := newServer(cfg)
	p.log.Info("started", "config", cfg.settings())
	return p.run(ctx, sig)
}

// A server is one running proxy, of either role.
type server struct {
	cfg Config
	log *slog.Logger
	hs  *http.Server
	// state is what the admin's /ready reports: DRAINING while a health
	// check is failed and once SIGTERM began a drain; either puts
	// Connection: close on every response.
	state atomic.Value // of string: statePreInitializing, stateLive, stateDraining
	// draining puts Connection: close on every response for good: a
	// SIGTERM's drain or a graceful drain_listeners, which leaves /ready
	// as it was.
	draining atomic.Bool
	// exiting: the sidecar is closing every connection, and a request
	// that ends now was cut by it.
	exiting atomic.Bool
	// conns counts the open downstream connections.
	conns atomic.Int64
	// admin carries the admin endpoints' commands to the run loop.
	admin chan command
	// fwd is the handler of either role.
	fwd *forwarder
}

// The states the admin's /ready reports, Envoy's words.
const (
	statePreInitializing = "PRE_INITIALIZING"
	stateLive            = "LIVE"
	stateDraining        = "DRAINING"
)

func newServer(cfg Config) *server {
	p := &server{cfg: cfg, log: target.NewLogger(cfg.Log, cfg.LogFormat, cfg.PodName), admin: make(chan command)}
	p.state.Store(statePreInitializing)
	p.hs = &http.Server{
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				p.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				p.conns.Add(-1)
			}
		},
	}
	p.fwd = newForwarder(p)
	p.hs.Handler = p.fwd
	if cfg.Role == RoleEdge {
		// NGINX's keepalive_timeout for its clients.
		p.hs.IdleTimeout = edgeClientIdleTimeout
	}
	return p
}

// run opens the admin listener, waits for the hold file, opens the
// downstream listener and serves until the sidecar exits.
func (p *server) run(ctx context.Context, sig <-chan os.Signal) (int, error) {
	if p.cfg.Admin != "none" {
		aln, err := net.Listen("tcp", p.cfg.Admin)
		if err != nil {
			return 0, fmt.Errorf("admin: %w", err)
		}
		admin := &http.Server{Handler: p.adminHandler(), ReadHeaderTimeout: time.Minute}
		go admin.Serve(aln)
		defer admin.Close()
		p.log.Info("admin_listening", "address", aln.Addr().String())
	}
	healthBad := false
	if p.cfg.HoldFile != "" {
		code, err, held := p.hold(ctx, sig, &healthBad)
		if !held {
			return code, err
		}
	}
	upstream := p.cfg.Upstream
	defer p.fwd.pool.closeIdle()
	if p.cfg.Role == RoleEdge {
		switch {
		case p.cfg.Service != "":
			w, err := p.watchEndpoints(ctx, p.fwd.bal)
			if err != nil {
				return 0, err
			}
			defer w.stop()
			upstream = p.cfg.Service
		default:
			eps := make([]Endpoint, len(p.cfg.Upstreams))
			for i, u := range p.cfg.Upstreams {
				eps[i] = Endpoint{Addr: u}
			}
			p.fwd.bal.set(eps)
			upstream = strings.Join(p.cfg.Upstreams, ",")
		}
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return 0, err
	}
	lnc := &listener{Listener: ln}
	served := make(chan error, 1)
	go func() { served <- p.hs.Serve(lnc) }()
	defer p.hs.Close()
	// The state is set before "listening" is logged, so that whoever
	// waits for that event finds /ready telling the truth.
	if healthBad {
		p.state.Store(stateDraining)
	} else {
		p.state.Store(stateLive)
	}
	p.log.Info("listening", "address", ln.Addr().String(), "upstream", upstream)

	var (
		// closeListener ends a graceful drain_listeners' drain; exitAt,
		// a SIGTERM's.
		closeListener, exitAt <-chan time.Time
		// zero ticks while the exit waits for the last connection.
		zero    <-chan time.Time
		sigterm bool
	)
	// drain begins a drain for reason, which lasts d.
	drain := func(reason string, d time.Duration) {
		if !p.draining.Swap(true) {
			p.log.Info("draining", "reason", reason, "for", d.String(), "connections", p.conns.Load())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-served:
			if lnc.closed.Load() {
				served = nil
				continue
			}
			return 0, fmt.Errorf("serve: %w", err)
		case s := <-sig:
			if sigterm {
				p.log.Info("signal_ignored", "signal", signalName(s))
				continue
			}
			sigterm = true
			p.log.Info("sigterm", "signal", signalName(s))
			if p.cfg.OnSIGTERM == ModeExit {
				return p.exit("sigterm")
			}
			p.state.Store(stateDraining)
			drain("sigterm", p.cfg.TerminationDrain)
			exitAt = time.After(p.cfg.TerminationDrain)
		case <-exitAt:
			if !p.cfg.ExitOnZeroConnections || p.conns.Load() == 0 {
				return p.exit("drained")
			}
			t := time.NewTicker(holdPoll)
			defer t.Stop()
			zero = t.C
		case <-zero:
			if p.conns.Load() == 0 {
				return p.exit("no connections")
			}
		case <-closeListener:
			lnc.close(p.log, "drained")
		case c := <-p.admin:
			switch c.kind {
			case cmdDrainListeners:
				if !c.graceful {
					lnc.close(p.log, "drain_listeners")
					break
				}
				drain("drain_listeners", p.cfg.DrainTime)
				if closeListener == nil {
					closeListener = time.After(p.cfg.DrainTime)
				}
			case cmdHealthFail:
				if p.state.Swap(stateDraining) != stateDraining {
					p.log.Info("health_failed", "reason", "healthcheck_fail")
				}
			case cmdHealthOK:
				// A SIGTERM's drain is not undone.
				if !sigterm && p.state.CompareAndSwap(stateDraining, stateLive) {
					p.log.Info("live", "reason", "healthcheck_ok")
				}
			case cmdQuit:
				return p.exit("quitquitquit")
			}
			close(c.done)
		}
	}
}

// hold waits for the hold file, noting in *healthBad the health checks
// that fail and pass meanwhile. It reports held false, with the exit code
// and error to return, if a signal, /quitquitquit or ctx ended the wait
// first.
func (p *server) hold(ctx context.Context, sig <-chan os.Signal, healthBad *bool) (code int, err error, held bool) {
	p.log.Info("holding", "file", p.cfg.HoldFile)
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for {
		_, err := os.Stat(p.cfg.HoldFile)
		switch {
		case err == nil:
			p.log.Info("held", "file", p.cfg.HoldFile)
			return 0, nil, true
		case !errors.Is(err, fs.ErrNotExist):
			return 0, fmt.Errorf("hold file: %w", err), false
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err(), false
		case s := <-sig:
			p.log.Info("sigterm", "signal", signalName(s))
			p.log.Info("exiting", "reason", "sigterm", "connections", 0)
			return 0, nil, false
		case c := <-p.admin:
			switch c.kind {
			case cmdQuit:
				p.log.Info("exiting", "reason", "quitquitquit", "connections", 0)
				return 0, nil, false
			case cmdHealthFail, cmdHealthOK:
				*healthBad = c.kind == cmdHealthFail
			}
			// Nothing listens yet: nothing to drain.
			close(c.done)
		case <-t.C:
		}
	}
}

// exit closes every connection, cutting what is in flight, and returns
// the exit code.
func (p *server) exit(reason string) (int, error) {
	p.log.Info("exiting", "reason", reason, "connections", p.conns.Load())
	p.exiting.Store(true)
	p.hs.Close()
	return 0, nil
}

// listener is the downstream listener, which a drain closes once while
// its connections go on.
type listener struct {
	net.Listener
	once   sync.Once
	closed atomic.Bool
}

func (l *listener) close(log *slog.Logger, reason string) {
	l.once.Do(func() {
		l.closed.Store(true)
		l.Listener.Close()
		log.Info("listener_closed", "reason", reason)
	})
}

// closing asks the client, in a response's header h, to close its
// connection if the sidecar is draining or its health check failed (as
// Envoy's drain manager does for a listener of the default drain type):
// decided as the response goes, so that a request in flight when the
// drain began is told too.
func (p *server) closing(h http.Header) {
	if p.draining.Load() || p.state.Load() == stateDraining {
		h.Set("Connection", "close")
	}
}

// An exchange is the response writer of one request, which records its
// outcome for the log.
type exchange struct {
	http.ResponseWriter
	status int
	// reason is the proxy's reason for answering itself; empty if it
	// did not.
	reason Reason
	// canceled: the downstream client left before the answer; cut: the
	// sidecar's exit closed its connection first.
	canceled, cut bool
	// aborted: the upstream's response was cut after its headers.
	aborted bool
}

func (e *exchange) WriteHeader(status int) {
	if e.status == 0 {
		e.status = status
	}
	e.ResponseWriter.WriteHeader(status)
}

func (e *exchange) Write(b []byte) (int, error) {
	if e.status == 0 {
		e.status = http.StatusOK
	}
	return e.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController, which flushWriter flushes
// through, the connection's writer.
func (e *exchange) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// outcome is the request's outcome as the log tells it.
func (e *exchange) outcome() string {
	switch {
	case e.reason != "":
		return string(e.reason)
	case e.cut:
		return "cut"
	case e.canceled:
		return "canceled"
	case e.aborted:
		return "aborted"
	}
	return "ok"
}

func signalName(s os.Signal) string {
	if s == syscall.SIGINT {
		return "SIGINT"
	}
	return "SIGTERM"
}
