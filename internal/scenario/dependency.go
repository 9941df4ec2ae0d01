package scenario

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// listenLoopback listens on port of 127.0.9.1: in 127.0.0.0/16, which no
// pod range uses, and not 127.0.0.1, the source address of loopback
// connections, whose ephemeral ports could take a dependency's port while
// it is down.
func listenLoopback(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.9.1", strconv.Itoa(port)))
}

// dependency is a scenario's Dependency: an HTTP server that answers every
// request with 200 while it is up, and that an outage takes down by
// refusing or by black-holing connections. It is safe for concurrent use.
type dependency struct {
	listen func(port int) (net.Listener, error)
	addr   string // host:port, fixed for the dependency's life

	mu        sync.Mutex
	srv       *http.Server  // nil while refusing
	blackhole chan struct{} // not nil while black-holing; closed when it ends
}

// startDependency starts a dependency on a free port that listen listens
// on.
func startDependency(listen func(port int) (net.Listener, error)) (*dependency, error) {
	ln, err := listen(0)
	if err != nil {
		return nil, fmt.Errorf("start dependency: %w", err)
	}
	d := &dependency{listen: listen, addr: ln.Addr().String()}
	d.serve(ln)
	return d, nil
}

// URL returns the dependency's URL.
func (d *dependency) URL() string { return "http://" + d.addr + "/" }

// serve serves on ln; d.mu must be held or d not yet shared.
func (d *dependency) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(d.handle)}
	d.srv = srv
	go srv.Serve(ln)
}

// handle answers 200, except during a black hole: then the request, read
// by the server on a connection the kernel accepted, is never answered;
// the connection is dropped without a response when the black hole ends,
// if the client has not left first.
func (d *dependency) handle(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	hole := d.blackhole
	d.mu.Unlock()
	if hole != nil {
		select {
		case <-hole:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler)
	}
	io.WriteString(w, "ok\n")
}

// down starts an outage in mode, OutageRefuse or OutageBlackhole.
func (d *dependency) down(mode string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch mode {
	case OutageRefuse:
		return d.stopLocked()
	case OutageBlackhole:
		if d.blackhole == nil {
			d.blackhole = make(chan struct{})
		}
		return nil
	}
	return fmt.Errorf("outage mode %q", mode)
}

// up ends an outage: the dependency answers again on its address.
func (d *dependency) up() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endBlackholeLocked()
	if d.srv == nil {
		ln, err := d.listen(d.port())
		if err != nil {
			return fmt.Errorf("dependency back up: %w", err)
		}
		d.serve(ln)
	}
	return nil
}

// port returns the dependency's port.
func (d *dependency) port() int {
	_, port, _ := net.SplitHostPort(d.addr)
	n, _ := strconv.Atoi(port)
	return n
}

// close stops the dependency.
func (d *dependency) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endBlackholeLocked()
	return d.stopLocked()
}

// endBlackholeLocked lets the held requests go, without an answer.
func (d *dependency) endBlackholeLocked() {
	if d.blackhole != nil {
		close(d.blackhole)
		d.blackhole = nil
	}
}

// stopLocked closes the server's listener, so that connections are
// refused, and every connection, as a stopped process's are.
func (d *dependency) stopLocked() error {
	if d.srv == nil {
		return nil
	}
	err := d.srv.Close()
	d.srv = nil
	return err
}
