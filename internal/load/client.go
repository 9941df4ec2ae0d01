package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/closingtime-dev/closingtime/internal/proxy"
)

// ErrNoFreeConnection is wrapped by the error of a request that a client
// with a pool of connections could not send, every connection busy, within
// the connect timeout: a connect-timeout of the client's own making.
var ErrNoFreeConnection = errors.New("wait for a free connection")

// A Dialer makes a TCP connection to address ("host:port"), as
// [net.Dialer.DialContext] does. It must give up when ctx is done and
// report failures as the net package does (a *net.OpError wrapping the
// syscall error), so that they can be classified. The connection's
// RemoteAddr is read once, when its first request has been answered or has
// failed: a dialer whose connections learn their endpoint after the connect
// (from the kernel's connection tracking) has had time to learn it.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// A client sends HTTP/1.1 requests on connections of its own and records
// every attempt in the attempt log of the request's context. It never sends
// a request twice: net/http's Transport resends some requests that failed
// on a reused connection, with no way to turn that off, which would hide
// the resets that a measuring client is there to count. It writes requests
// with net/http's request writer and reads responses with its response
// reader.
//
// A client with a pool keeps at most cap(pool) connections open and reuses
// them (keep-alive), as a caller's connection pool does, with its limits
// (see [Limits]); one without dials a connection for each request, asks the
// server to close it after the response, and closes it.
//
// A client is an http.RoundTripper so that retry.Transport can wrap it.
// RoundTrip reads and discards the response body: the response it returns
// has an empty body.
type client struct {
	dial            Dialer
	address         string // host:port
	connectTimeout  time.Duration
	responseTimeout time.Duration
	limits          Limits

	// pool holds one token per connection slot: an idle connection, or
	// nil for a slot with no connection yet. Nil for a client that dials
	// for each request.
	pool chan *conn
}

// conn is one connection of a client.
type conn struct {
	net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// addr is the remote address, read once (addrRead) for all the
	// requests the connection carries.
	addr     netip.AddrPort
	addrRead bool
	// made is when the connection was made; idle, when its last response
	// ended.
	made, idle time.Time
	// requests is the number of requests sent on the connection.
	requests int
}

// Buffers are reused across connections: a new-conn client makes one
// connection per request.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReader(nil) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriter(nil) }}
)

func newConn(nc net.Conn) *conn {
	now := time.Now()
	cn := &conn{Conn: nc, br: readers.Get().(*bufio.Reader), bw: writers.Get().(*bufio.Writer), made: now, idle: now}
	cn.br.Reset(nc)
	cn.bw.Reset(nc)
	return cn
}

// remote returns the connection's remote address, reading it the first
// time.
func (cn *conn) remote() netip.AddrPort {
	if !cn.addrRead {
		cn.addr, cn.addrRead = addrPort(cn.RemoteAddr()), true
	}
	return cn.addr
}

// addrPort returns the IP address and port of a connection's address, or
// the zero AddrPort if it has none. It allocates nothing for a TCP address
// (a new-conn client calls it for every request); the address is spelled
// out only when an event line is written. An IPv4 address stays IPv4, not
// mapped into IPv6, so that it reads as net.TCPAddr.String spells it.
func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch ra := a.(type) {
	case *net.TCPAddr:
		ap = ra.AddrPort()
	case nil:
		return ap
	default:
		ap, _ = netip.ParseAddrPort(ra.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// dialedAddr returns the address that a failed connect tried, as the
// *net.OpError that err is or wraps names it, if it names a TCP address, as
// net.Dialer's do; else the zero AddrPort: a wait for a free pooled
// connection, or a routing dialer's refusal for a Service with no
// endpoint, tried none.
func dialedAddr(err error) netip.AddrPort {
	var oe *net.OpError
	if errors.As(err, &oe) {
		if ta, ok := oe.Addr.(*net.TCPAddr); ok && ta != nil {
			return addrPort(ta)
		}
	}
	return netip.AddrPort{}
}

// close closes cn and gives its buffers back. It must be called once.
func (cn *conn) close() {
	cn.Conn.Close()
	cn.br.Reset(nil)
	cn.bw.Reset(nil)
	readers.Put(cn.br)
	writers.Put(cn.bw)
}

func newClient(dial Dialer, address string, connectTimeout, responseTimeout time.Duration, connections int, limits Limits) *client {
	c := &client{dial: dial, address: address, connectTimeout: connectTimeout, responseTimeout: responseTimeout, limits: limits}
	if connections > 0 {
		c.pool = make(chan *conn, connections)
		for range connections {
			c.pool <- nil
		}
	}
	return c
}

// RoundTrip sends req on a connection and reads the whole response.
func (c *client) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attemptLogFrom(req.Context()).start()
	deadline := a.start.Add(c.connectTimeout)
	cn, err := c.acquire(deadline)
	if err != nil {
		a.addr = dialedAddr(err)
		return nil, a.fail(classifyConnect(err), err)
	}
	a.connect, a.connRequests = time.Now(), cn.requests
	if cn.requests > 0 {
		a.connAge = a.connect.Sub(cn.made)
	}
	cn.requests++
	cn.SetDeadline(a.connect.Add(c.responseTimeout))
	resp, err := c.exchange(cn, req, a)
	a.addr = cn.remote()
	c.release(cn, err == nil && !resp.Close)
	return resp, err
}

// exchange writes req on cn and reads its response.
func (c *client) exchange(cn *conn, req *http.Request, a *attempt) (*http.Response, error) {
	out := req
	if c.pool == nil {
		// Ask the server to close first, so that TIME_WAIT stays with it
		// and the generator's ephemeral ports are not held for 60 s.
		out = new(http.Request)
		*out = *req
		out.Close = true
	}
	if err := out.Write(cn.bw); err != nil {
		return nil, a.fail(classifyExchange(err, false), fmt.Errorf("write request: %w", err))
	}
	if err := cn.bw.Flush(); err != nil {
		return nil, a.fail(classifyExchange(err, false), fmt.Errorf("write request: %w", err))
	}
	// httptrace's WroteRequest can fire before a byte reached the socket;
	// only a response byte proves that the server got the request.
	if _, err := cn.br.Peek(1); err != nil {
		return nil, a.fail(classifyExchange(err, false), fmt.Errorf("read response: %w", err))
	}
	a.firstByte = time.Now()
	resp, err := http.ReadResponse(cn.br, req)
	if err != nil {
		return nil, a.fail(classifyExchange(err, true), fmt.Errorf("read response: %w", err))
	}
	head, err := readBody(resp)
	if err != nil {
		return nil, a.fail(classifyExchange(err, true), fmt.Errorf("read response body: %w", err))
	}
	a.done(resp, head)
	resp.Body = http.NoBody
	return resp, nil
}

// acquire returns a connection: for a pooled client, an idle one that the
// server has not closed and the client's limits let it reuse, or a new one
// if a slot is free; for the other, a new one. It gives up at deadline.
func (c *client) acquire(deadline time.Time) (*conn, error) {
	if c.pool == nil {
		return c.connect(deadline)
	}
	var cn *conn
	select {
	case cn = <-c.pool:
	default:
		timer := time.NewTimer(time.Until(deadline))
		select {
		case cn = <-c.pool:
			timer.Stop()
		case <-timer.C:
			return nil, fmt.Errorf("%w: %w", ErrNoFreeConnection, os.ErrDeadlineExceeded)
		}
	}
	if cn != nil {
		// A connection the server closed while it was idle is dropped
		// without a request sent on it, as net/http and Node do; one the
		// client's limits retire, too.
		if c.limits.reusable(cn.made, cn.idle, time.Now()) && idleAlive(cn) {
			return cn, nil
		}
		cn.close()
	}
	cn, err := c.connect(deadline)
	if err != nil {
		c.pool <- nil
	}
	return cn, err
}

func (c *client) connect(deadline time.Time) (*conn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	nc, err := c.dial(ctx, "tcp", c.address)
	if err != nil {
		return nil, err
	}
	return newConn(nc), nil
}

// release returns cn to the pool if it can carry another request, and
// closes it otherwise.
func (c *client) release(cn *conn, reusable bool) {
	cn.idle = time.Now()
	if c.pool == nil || !reusable || !c.limits.reusable(cn.made, cn.idle, cn.idle) {
		cn.close()
		if c.pool != nil {
			c.pool <- nil
		}
		return
	}
	cn.SetDeadline(time.Time{})
	c.pool <- cn
}

// Limits are the limits of a keep-alive client's pool on reusing a
// connection, as a caller's pool sets them (reactor-netty's maxIdleTime and
// maxLifeTime, HikariCP's idleTimeout and maxLifetime). Zero means no
// limit: a connection is reused for as long as the server keeps it open.
type Limits struct {
	// MaxIdle retires a connection that stayed idle in the pool longer:
	// the next request dials a new one. A connection kept busy is never
	// idle that long, so this limit never retires it.
	MaxIdle time.Duration
	// MaxLifetime retires a connection once it is that old, after the
	// response it carries then, or before reuse if it aged idle: the next
	// request dials a new one, which the Service routes afresh.
	MaxLifetime time.Duration
}

// reusable reports whether the limits let a connection or channel made at
// made, idle since idle, carry another request at now.
func (l Limits) reusable(made, idle, now time.Time) bool {
	if l.MaxLifetime > 0 && now.Sub(made) >= l.MaxLifetime {
		return false
	}
	return l.MaxIdle <= 0 || now.Sub(idle) <= l.MaxIdle
}

// close closes the idle connections of the pool. It must be called only
// when no request is in flight.
func (c *client) close() {
	if c.pool == nil {
		return
	}
	for range cap(c.pool) {
		if cn := <-c.pool; cn != nil {
			cn.close()
		}
	}
}

// An attempt is what a client observed of one attempt to send a request.
type attempt struct {
	class  Class
	err    error
	status int
	pod    string
	// proxy is the reason a proxy gave for a 5xx it answered itself; ""
	// for any other answer. upstreams is the response's X-Upstream-Addr.
	proxy     proxy.Reason
	upstreams string
	// addr is the remote address of the attempt's connection, or the one
	// a failed connect tried (dialedAddr); the zero AddrPort if neither.
	addr netip.AddrPort
	// connRequests is the number of requests the connection had carried
	// before this attempt's, and connAge how long before the attempt took
	// it the connection was made: both zero for a new connection.
	connRequests int
	connAge      time.Duration

	// When the attempt started, its connection was ready, the first byte
	// of the response arrived, and the response was complete or the
	// attempt failed. Zero if not reached.
	start, connect, firstByte, end time.Time

	// A gRPC call's: answered, the server's status came, in its
	// trailers. A gRPC call's or an HTTP/2 request's: conn, the shared
	// connection it went on, if known.
	answered bool
	conn     *sharedConn
}

func (a *attempt) fail(class Class, err error) error {
	a.class, a.err, a.end = class, err, time.Now()
	return err
}

// done records the complete response resp, head the beginning of its
// body if it is a 5xx.
func (a *attempt) done(resp *http.Response, head []byte) {
	a.end = time.Now()
	a.status = resp.StatusCode
	a.pod = resp.Header.Get(PodHeader)
	a.upstreams = resp.Header.Get(proxy.UpstreamAddrHeader)
	a.class = OK
	if resp.StatusCode >= 500 {
		a.class = HTTP5xx
		a.proxy = proxy.Recognize(resp.StatusCode, resp.Header, head)
	}
}

// readBody reads resp's whole body and closes it. It returns the body's
// beginning if resp is a 5xx: a proxy's answer, which says why.
func readBody(resp *http.Response) (head []byte, err error) {
	if resp.StatusCode >= 500 {
		head, err = io.ReadAll(io.LimitReader(resp.Body, proxyBodyHead))
	}
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	return head, err
}

// proxyBodyHead is how much of a 5xx's body is read for a proxy's reason:
// more than Envoy's longest.
const proxyBodyHead = 512

// An attemptLog collects the attempts made for one request, the retries
// included, in order. A gRPC call's and an HTTP/2 request's are written
// from two goroutines (the caller's and its connection's reader), under
// mu: a gRPC call's until done.
type attemptLog struct {
	attempts []attempt
	mu       sync.Mutex
	done     bool
}

type attemptLogKey struct{}

func withAttemptLog(ctx context.Context, log *attemptLog) context.Context {
	return context.WithValue(ctx, attemptLogKey{}, log)
}

// attemptLogFrom returns the log of ctx, or a new one that nobody reads if
// ctx has none.
func attemptLogFrom(ctx context.Context) *attemptLog {
	if log, ok := ctx.Value(attemptLogKey{}).(*attemptLog); ok {
		return log
	}
	return new(attemptLog)
}

// start begins a new attempt. The pointer is valid until the next start.
func (l *attemptLog) start() *attempt {
	l.attempts = append(l.attempts, attempt{start: time.Now()})
	return &l.attempts[len(l.attempts)-1]
}
