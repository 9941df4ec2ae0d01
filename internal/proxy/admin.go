package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// A command is an admin endpoint's order to the run loop, which closes
// done once it has been carried out.
type command struct {
	kind     commandKind
	graceful bool
	done     chan struct{}
}

type commandKind int

const (
	cmdDrainListeners commandKind = iota
	cmdHealthFail
	cmdHealthOK
	cmdQuit
)

// okAnswer is the body of the admin's answer to a change that it made.
const okAnswer = "OK\n"

// adminHandler serves Envoy's admin endpoints that shutdowns use: the
// changes by POST only, as Envoy wants them.
func (p *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		state := p.state.Load().(string)
		if state != stateLive {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, state)
	})
	post := func(path string, c func(r *http.Request) command) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				http.Error(w, "This endpoint requires POST.", http.StatusMethodNotAllowed)
				return
			}
			cmd := c(r)
			cmd.done = make(chan struct{})
			if cmd.kind == cmdQuit {
				// The exit closes this connection: the answer goes
				// first, whole, its length told, so that the exit cannot
				// cut it before a last chunk.
				w.Header().Set("Content-Length", strconv.Itoa(len(okAnswer)))
				io.WriteString(w, okAnswer)
				http.NewResponseController(w).Flush()
			}
			select {
			case p.admin <- cmd:
			case <-r.Context().Done():
				return
			}
			if cmd.kind == cmdQuit {
				return
			}
			select {
			case <-cmd.done:
				io.WriteString(w, okAnswer)
			case <-r.Context().Done():
			}
		})
	}
	post("/drain_listeners", func(r *http.Request) command {
		_, graceful := r.URL.Query()["graceful"]
		return command{kind: cmdDrainListeners, graceful: graceful}
	})
	post("/healthcheck/fail", func(*http.Request) command { return command{kind: cmdHealthFail} })
	post("/healthcheck/ok", func(*http.Request) command { return command{kind: cmdHealthOK} })
	post("/quitquitquit", func(*http.Request) command { return command{kind: cmdQuit} })
	return mux
}

// Call sends an admin request, a POST of path (with its query, such as
// "/drain_listeners?graceful"), to the sidecar whose admin listener is at
// addr, and writes its answer to out. It is what a preStop hook runs, as
// Istio's injected hook runs `pilot-agent request POST …`. An answer other
// than 2xx is a *StatusError.
func Call(ctx context.Context, addr, path string, timeout time.Duration, out io.Writer) error {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &StatusError{Path: path, Status: resp.Status}
	}
	return nil
}

// A StatusError is an admin endpoint's answer other than 2xx.
type StatusError struct {
	// Path is the endpoint's, Status the answer's ("405 Method Not
	// Allowed").
	Path, Status string
}

func (e *StatusError) Error() string { return "admin " + e.Path + ": " + e.Status }
