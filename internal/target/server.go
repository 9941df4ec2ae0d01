package target

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
)

// server is the lab server of one process: its handlers, the requests it
// has seen and its log.
type server struct {
	cfg      Config // with its defaults set
	log      *slog.Logger
	work     workLog
	stopping atomic.Bool // SIGTERM arrived; /ready answers 503
	client   http.Client // checks the dependency
}

// newHTTPServer returns the http.Server of s, with ready as its /ready
// handler: the graceful package's in ModeGraceful, s.serveReady otherwise.
func (s *server) newHTTPServer(ready http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/work", s.serveWork)
	mux.Handle("/ready", ready)
	mux.HandleFunc("/live", s.serveLive)
	mux.HandleFunc("/health-deep", s.serveHealthDeep)
	mux.HandleFunc("/{$}", s.serveConfig)
	// HTTP/2 without TLS (h2c) beside HTTP/1.1, so that HTTP/2 clients
	// can be measured too.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Protocols:   &protocols,
		Handler:     s.annotate(mux),
		IdleTimeout: s.cfg.IdleTimeout,
		// A connection that never sends a request ends like an idle one,
		// as in Node, where headersTimeout bounds it.
		ReadHeaderTimeout: s.cfg.IdleTimeout,
	}
}

// annotate puts the pod's name and the request's id on every response and,
// with Config.AccessLog, logs a "request" event when the handler returns.
func (s *server) annotate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		w.Header().Set("X-Pod-Name", s.cfg.PodName)
		if id != "" {
			w.Header().Set("X-Request-Id", id)
		}
		if !s.cfg.AccessLog {
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		s.log.Info("request", "id", id, "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration_ms", float64(time.Since(start).Microseconds())/1000, "remote", r.RemoteAddr)
	})
}

// statusWriter records the status of a response: zero while nothing is
// written, which the "request" event reports for a request whose client
// left before its answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveWork takes a work time drawn from Config.Work, and answers 200.
// It gives up without an answer if the request's context is done first.
func (s *server) serveWork(w http.ResponseWriter, r *http.Request) {
	s.work.arrive(time.Now())
	d := s.cfg.Work.draw()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	fmt.Fprintf(w, "worked %v\n", d)
}

// serveReady is the readiness probe outside ModeGraceful: 200 until SIGTERM,
// 503 from then on. Before the port opens there is nothing to answer.
func (s *server) serveReady(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// serveLive is the shallow liveness probe: 200 while the process answers.
func (s *server) serveLive(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok\n")
}

// serveHealthDeep checks the dependency with a GET bounded by
// Config.DependencyTimeout: 200 if it answered 2xx, 503 otherwise. Without
// a dependency it answers 200.
func (s *server) serveHealthDeep(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Dependency == "" {
		io.WriteString(w, "ok: no dependency\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DependencyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.Dependency, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	resp, err := s.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	// Read a little of the body so that the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		http.Error(w, "dependency answered "+resp.Status, http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok: dependency answered "+resp.Status+"\n")
}

// serveConfig answers with the configuration as JSON.
func (s *server) serveConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.cfg.settings())
}

// onSigterm makes readiness fail and logs the "sigterm" event.
func (s *server) onSigterm() {
	s.stopping.Store(true)
	perSecond, last := s.work.signalled(time.Now())
	s.log.Info("sigterm", "work_per_second", perSecond, lastRequest(last))
}

// onListenerClosed logs the "listener_closed" event: the graceful drain
// began, and new connections are refused from now on.
func (s *server) onListenerClosed() { s.log.Info("listener_closed") }

// onDrained logs the "drained" event; outcome says how the drain ended.
func (s *server) onDrained(outcome string) {
	after, last := s.work.drained()
	s.log.Info("drained", "requests_after_sigterm", after, lastRequest(last), "outcome", outcome)
}

// lastRequest is the last_request field of an event, empty if no request
// has arrived, which the log leaves out.
func lastRequest(t time.Time) slog.Attr {
	if t.IsZero() {
		return slog.Attr{}
	}
	return slog.String("last_request", formatTime(t))
}

// exit logs the "exiting" event and returns code for Run.
func (s *server) exit(code int) (int, error) {
	s.log.Info("exiting", "code", code)
	return code, nil
}

// crash logs the "crash" event and exits with Config.CrashCode.
func (s *server) crash() (int, error) {
	s.log.Info("crash", "code", s.cfg.CrashCode)
	return s.exit(s.cfg.CrashCode)
}
