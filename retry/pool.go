package retry

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// A pool keeps HTTP/1.1 client connections for reuse, each for at most its
// lifetime. It is built on [http.ClientConn], which, unlike
// [http.Transport.RoundTrip], never resends a request by itself, so that
// every retry is the Transport's own decision.
type pool struct {
	dialer   *http.Transport // makes connections; its own pool is never used
	lifetime time.Duration   // negative: no limit

	mu   sync.Mutex
	idle map[string][]*pooledConn // by scheme and address, most recent last
}

type pooledConn struct {
	cc  *http.ClientConn
	key string

	// Guarded by pool.mu.
	idle    bool // in pool.idle
	expired bool // past its lifetime: close when idle
}

func newPool(connectTimeout, lifetime time.Duration) *pool {
	d := &net.Dialer{}
	if connectTimeout > 0 {
		d.Timeout = connectTimeout
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &pool{
		dialer: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			Protocols:           protocols,
		},
		lifetime: lifetime,
		idle:     make(map[string][]*pooledConn),
	}
}

// RoundTrip sends req on an idle pooled connection, or on a new one.
func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.roundTrip(req, false)
}

// roundTrip sends req on a pooled connection, or, if fresh is set or none
// is idle, on a new one, which joins the pool once its response is read.
func (p *pool) roundTrip(req *http.Request, fresh bool) (*http.Response, error) {
	key := req.URL.Scheme + "://" + hostPort(req.URL)
	var pc *pooledConn
	if !fresh {
		pc = p.take(key)
	}
	if pc == nil {
		var err error
		if pc, err = p.dial(req, key); err != nil {
			closeBody(req.Body)
			return nil, err
		}
	}
	return pc.cc.RoundTrip(req)
}

// take returns an idle connection for key, reserved for one request, or
// nil.
func (p *pool) take(key string) *pooledConn {
	for {
		p.mu.Lock()
		conns := p.idle[key]
		if len(conns) == 0 {
			p.mu.Unlock()
			return nil
		}
		pc := conns[len(conns)-1]
		p.idle[key] = conns[:len(conns)-1]
		pc.idle = false
		p.mu.Unlock()
		// Reserve may run the state hook, which takes p.mu.
		if pc.cc.Reserve() == nil {
			return pc
		}
		pc.cc.Close()
	}
}

// dial makes a new connection for req, reserved for it.
func (p *pool) dial(req *http.Request, key string) (*pooledConn, error) {
	cc, err := p.dialer.NewClientConn(req.Context(), req.URL.Scheme, hostPort(req.URL))
	if err != nil {
		return nil, err
	}
	if err := cc.Reserve(); err != nil {
		cc.Close()
		return nil, err
	}
	pc := &pooledConn{cc: cc, key: key}
	cc.SetStateHook(func(*http.ClientConn) { p.changed(pc) })
	if p.lifetime > 0 {
		lifetime := p.lifetime - rand.N(p.lifetime/10+1)
		time.AfterFunc(lifetime, func() { p.expire(pc) })
	}
	return pc, nil
}

// changed is the state hook of pc: it runs when a request on pc is done or
// pc closed.
func (p *pool) changed(pc *pooledConn) {
	closed := pc.cc.Err() != nil
	available := pc.cc.Available() > 0
	p.mu.Lock()
	switch {
	case closed:
		p.removeLocked(pc)
	case available && pc.expired:
		p.removeLocked(pc)
		closed = true
	case available && !pc.idle:
		pc.idle = true
		p.idle[pc.key] = append(p.idle[pc.key], pc)
	}
	p.mu.Unlock()
	if closed {
		pc.cc.Close()
	}
}

// expire ends pc's lifetime: it closes pc now if idle, and otherwise marks
// it so that changed closes it when its request is done.
func (p *pool) expire(pc *pooledConn) {
	p.mu.Lock()
	pc.expired = true
	idle := pc.idle
	if idle {
		p.removeLocked(pc)
	}
	p.mu.Unlock()
	if idle {
		pc.cc.Close()
	}
}

func (p *pool) removeLocked(pc *pooledConn) {
	if !pc.idle {
		return
	}
	pc.idle = false
	conns := p.idle[pc.key]
	if i := slices.Index(conns, pc); i >= 0 {
		p.idle[pc.key] = slices.Delete(conns, i, i+1)
	}
}

func (p *pool) closeIdle() {
	p.mu.Lock()
	var conns []*pooledConn
	for key, list := range p.idle {
		for _, pc := range list {
			pc.idle = false
		}
		conns = append(conns, list...)
		delete(p.idle, key)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.cc.Close()
	}
}

// hostPort returns u's host and port, with the scheme's default port.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}
