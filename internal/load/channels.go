package load

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A channelPool holds a KeepAlive client's channels: clients of their own
// that each keep one long-lived connection and carry many requests on it
// at once (gRPC channels, HTTP/2 transports), taken in turn, as a service
// holds its channels to another. A slot's channel is made on first use,
// and again when the client's limits retire it. A pool with no slots, a
// NewConn client's, makes a channel for each request.
type channelPool[C any] struct {
	open   func() (C, error)
	close  func(C)
	limits Limits
	// linger is how long a retired channel stays open, for its requests
	// in flight.
	linger time.Duration

	mu    sync.Mutex
	slots []channelSlot[C]
	next  atomic.Uint64
}

// A channelSlot is a place in a pool and its channel, if made: when it was
// made, and when a request last took it.
type channelSlot[C any] struct {
	c          C
	ok         bool
	made, used time.Time
}

func newChannelPool[C any](slots int, limits Limits, linger time.Duration, open func() (C, error), close func(C)) *channelPool[C] {
	return &channelPool[C]{open: open, close: close, limits: limits, linger: linger, slots: make([]channelSlot[C], slots)}
}

// get returns the channel for a request: for a fresh one (a re-probe) or
// a pool without slots, a new channel, own, which the caller closes after
// the request; else the next slot's, made if it is not yet or the limits
// retire it.
func (p *channelPool[C]) get(fresh bool) (c C, own bool, err error) {
	if fresh || len(p.slots) == 0 {
		c, err = p.open()
		return c, true, err
	}
	i := int(p.next.Add(1) % uint64(len(p.slots)))
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	s := &p.slots[i]
	if s.ok && p.limits.reusable(s.made, s.used, now) {
		s.used = now
		return s.c, false, nil
	}
	if s.ok {
		// Retired: its requests in flight finish on it.
		old := s.c
		time.AfterFunc(p.linger, func() { p.close(old) })
	}
	c, err = p.open()
	*s = channelSlot[C]{c: c, ok: err == nil, made: now, used: now}
	return c, false, err
}

// closeAll closes the pool's channels.
func (p *channelPool[C]) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.slots {
		if s.ok {
			p.close(s.c)
		}
		p.slots[i] = channelSlot[C]{}
	}
}

// A sharedConn is a connection of a channel, which carries many requests
// at once: when it was made, the requests it has carried, the first error
// of its reads or writes (the socket's account of a request that the
// connection's end broke), and whether its server spoke HTTP/2.
type sharedConn struct {
	net.Conn
	// local is its LocalAddr, the value that grpc-go's stats carry.
	local net.Addr
	made  time.Time
	calls atomic.Int64
	err   atomic.Pointer[error]
	// heard is set once a read has returned bytes, and notH2C if the
	// first bytes were not HTTP/2's.
	heard  atomic.Bool
	notH2C atomic.Pointer[error]
	// forget, if not nil, takes the connection out of its channel's
	// records when it closes.
	forget func()
}

func newSharedConn(c net.Conn, forget func()) *sharedConn {
	return &sharedConn{Conn: c, local: c.LocalAddr(), made: time.Now(), forget: forget}
}

func (c *sharedConn) Close() error {
	if c.forget != nil {
		c.forget()
	}
	return c.Conn.Close()
}

// ErrNotH2C is wrapped by the error of an HTTP/2 request or a gRPC call to
// a server that does not speak HTTP/2 without TLS (h2c): the first bytes
// it sent on the connection were not an HTTP/2 frame header of a SETTINGS
// frame, such as an HTTP/1.x answer to the HTTP/2 preface. Waiting does
// not change that, so [WaitServing] gives up at once.
var ErrNotH2C = errors.New("the server does not speak HTTP/2 without TLS (h2c)")

// settingsFrame is the type of HTTP/2's SETTINGS frame (RFC 9113 §6.5),
// the first frame a server sends: the fourth byte of its header.
const settingsFrame = 0x4

func (c *sharedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	// The first bytes are looked at once; a first read of fewer than a
	// frame header's type tells nothing, and is let be.
	if n > 0 && !c.heard.Swap(true) && n >= 4 && b[3] != settingsFrame {
		first := fmt.Errorf("%w: its first bytes were %q", ErrNotH2C, b[:min(n, 16)])
		c.notH2C.Store(&first)
	}
	if err != nil {
		c.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (c *sharedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

// sockErr returns the first error of the connection's reads and writes,
// or nil.
func (c *sharedConn) sockErr() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// notHTTP2 returns the error that says the server did not speak HTTP/2,
// or nil.
func (c *sharedConn) notHTTP2() error {
	if p := c.notH2C.Load(); p != nil {
		return *p
	}
	return nil
}

// took records that attempt a went out on c, now.
func (a *attempt) took(c *sharedConn) {
	a.connect, a.conn = time.Now(), c
	a.connRequests = int(c.calls.Add(1) - 1)
	if a.connRequests > 0 {
		a.connAge = a.connect.Sub(c.made)
	}
}

// broken sorts the failure of an attempt that went out on a connection and
// ended without an answer: an error if its server did not speak HTTP/2;
// refused if it was reset before the server sent anything; else from its
// socket's error, where it had one, and else from whether a byte of the
// response had come. A connection that ended with no socket error was
// ended by a GOAWAY, or closed by the client itself.
func (a *attempt) broken() Class {
	if a.conn != nil {
		err := a.conn.sockErr()
		switch {
		case a.conn.notHTTP2() != nil:
			return Error
		case errors.Is(err, syscall.ECONNRESET) && !a.conn.heard.Load():
			// Reset before the server sent a byte: it never took the
			// connection, as when its listener closes with the
			// connection in its queue (the kernel had completed the
			// connect): refused, as a connect reset is.
			return Refused
		case err != nil:
			return classifyExchange(err, !a.firstByte.IsZero())
		}
	}
	if a.firstByte.IsZero() {
		return Closed
	}
	return Reset
}

// ErrTransparentRetry begins the error of an attempt that its client
// (grpc-go, net/http's HTTP/2 Transport) retried transparently, wrapping
// the error it ended with, if it told one: the attempt never reached the
// server.
var ErrTransparentRetry = errors.New("retried transparently: the attempt had not reached the server")

// retried marks the last attempt, which its client followed with another
// by itself, as a transparent retry: it never reached the server (a
// stream refused, or unsent as its connection drained), whatever the
// socket saw as the connection closed after. A client retries only such
// an attempt on its own (the lab's gRPC channels have no retry policy),
// but for Go's HTTP/2 Transport, which also resends a stream its server
// reset with PROTOCOL_ERROR. It is called with l.mu held, if the log is
// shared.
func (l *attemptLog) retried() {
	n := len(l.attempts)
	if n == 0 {
		return
	}
	prev := &l.attempts[n-1]
	prev.class = Closed
	if prev.err == nil {
		prev.err = ErrTransparentRetry
	} else {
		prev.err = fmt.Errorf("%w: %w", ErrTransparentRetry, prev.err)
	}
	if prev.end.IsZero() {
		prev.end = time.Now()
	}
}
