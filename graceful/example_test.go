package graceful_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/closingtime-dev/closingtime/graceful"
)

// A service on Kubernetes: probes on their own paths, a pre-stop delay for a
// cluster without a preStop sleep in the manifest, and a budget that matches
// the pod's terminationGracePeriodSeconds. Serve returns after SIGTERM once
// every connection is done; the process then exits with the conventional
// 128+15.
func ExampleServer() {
	mux := http.NewServeMux()
	srv := &graceful.Server{
		HTTP:              &http.Server{Addr: ":8080", Handler: mux},
		PreStopDelay:      5 * time.Second,
		TerminationBudget: 30 * time.Second,
	}
	mux.Handle("/ready", srv.ReadyHandler())
	mux.Handle("/live", srv.LiveHandler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})

	err := srv.ListenAndServe(context.Background())
	if err != nil && !errors.Is(err, graceful.ErrDrainTimeout) {
		log.Fatal(err)
	}
	os.Exit(143)
}

// Termination can also begin from a context rather than a signal.
func ExampleServer_Serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &graceful.Server{
		HTTP: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "served\n")
		})},
		OnTerminate: func(sig os.Signal) { fmt.Println("termination began, signal:", sig) },
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))
	stop()
	fmt.Println("Serve returned:", <-done)
	// Output:
	// served
	// termination began, signal: <nil>
	// Serve returned: <nil>
}

// Readiness fails as soon as termination begins, while liveness holds and
// the pre-stop delay keeps the listener open.
func ExampleServer_ReadyHandler() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := &graceful.Server{HTTP: &http.Server{Handler: mux}, PreStopDelay: 2 * time.Second}
	mux.Handle("/ready", srv.ReadyHandler())
	mux.Handle("/live", srv.LiveHandler())
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	probe := func(path string) int {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println("/ready", probe("/ready"))
	stop()
	// Readiness fails once Serve has noticed the context, as a kubelet
	// probing every second would see.
	code := probe("/ready")
	for deadline := time.Now().Add(time.Second); code == http.StatusOK && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		code = probe("/ready")
	}
	fmt.Println("/ready", code)
	fmt.Println("/live", probe("/live"))
	<-done
	// Output:
	// /ready 200
	// /ready 503
	// /live 200
}

// LiveHandler answers 200 for as long as the process serves; it checks no
// dependency.
func ExampleServer_LiveHandler() {
	srv := &graceful.Server{HTTP: &http.Server{}}
	mux := http.NewServeMux()
	mux.Handle("/live", srv.LiveHandler())
	mux.Handle("/ready", srv.ReadyHandler())
	srv.HTTP.Handler = mux
}

// A WebSocket-style server asks its hijacked connections to close when the
// drain begins.
func ExampleServer_DrainHijacked() {
	srv := &graceful.Server{
		HTTP: &http.Server{},
		DrainHijacked: func(c net.Conn) {
			// A real server would send its protocol's close message.
			io.WriteString(c, "server closing\n")
		},
	}
	_ = srv
}
