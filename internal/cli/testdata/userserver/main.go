// Command userserver is a small HTTP service of the kind closingtime's
// users run, written without closingtime: it logs plain text lines, not
// closingtime's log events, and its shutdown is one of two that Go
// services commonly have. The tests of `closingtime rollout --local` run
// it as a user's image, so that the diagnosis is checked on a server that
// tells it nothing of its own.
//
// It is configured by its environment:
//
//	LISTEN_ADDR  the address to listen on: $(POD_IP):8080 on the embedded
//	             cluster, where every pod has a loopback address of its own
//	WORK_MS      how long each request takes, in milliseconds (default 0),
//	             so that requests are in flight when a pod stops
//	ON_SIGTERM   "exit": no signal handling at all, so SIGTERM ends the
//	             process at once, as the Go runtime's default does (the
//	             default); "drain": on SIGTERM, net/http's Server.Shutdown
//	             stops accepting, lets the requests in flight finish and
//	             closes the idle connections, then the process exits 0
//
// Every path answers 200 after WORK_MS, but /healthz, the readiness
// probe's, which answers at once.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	addr := os.Getenv("LISTEN_ADDR")
	if addr == "" {
		return errors.New("LISTEN_ADDR is not set")
	}
	work := time.Duration(0)
	if s := os.Getenv("WORK_MS"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms < 0 {
			return fmt.Errorf("WORK_MS %q: want a number of milliseconds", s)
		}
		work = time.Duration(ms) * time.Millisecond
	}
	mode := cmp.Or(os.Getenv("ON_SIGTERM"), "exit")
	if mode != "exit" && mode != "drain" {
		return fmt.Errorf("ON_SIGTERM %q: want exit or drain", mode)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(work)
		fmt.Fprintln(w, "done")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	stop := make(chan os.Signal, 1)
	if mode == "drain" {
		// Before listening: a signal that comes once the pod is ready
		// must find the handler.
		signal.Notify(stop, syscall.SIGTERM)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("listening on %s (work %s, on SIGTERM %s)", ln.Addr(), work, mode)
	if mode == "exit" {
		// No handler: SIGTERM ends the process wherever it is.
		return srv.Serve(ln)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-stop:
	}
	log.Print("SIGTERM received: draining")
	start := time.Now()
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Printf("drained in %s; exiting", time.Since(start).Round(time.Millisecond))
	return nil
}
