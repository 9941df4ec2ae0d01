package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBody is the largest request body the edge takes: NGINX's
// client_max_body_size. The edge reads a body whole before the first
// attempt, as NGINX buffers it, so that a retry can send it again; the
// sidecar streams it to its one attempt, as Envoy does.
const maxBody = 1 << 20

// The sidecar's upstream pool, as Envoy's cluster defaults keep it: no
// limit on the requests of a connection, nor on its life, and an hour's
// idle timeout (common_http_protocol_options.idle_timeout).
const (
	sidecarKeepalive        = 1024
	sidecarKeepaliveTimeout = time.Hour
	unlimitedRequests       = math.MaxInt
	unlimitedLifetime       = time.Duration(math.MaxInt64)
)

// An Endpoint is one upstream of a proxy: a pod's address and port, and
// the pod's name where the edge knows it (from its EndpointSlice's
// targetRef).
type Endpoint struct {
	Addr string `json:"addr"`
	Pod  string `json:"pod,omitempty"`
}

// A failure is what made one attempt fail, in NGINX's terms: an error
// (refused, reset, closed) or a timeout, of a connect or of the
// response.
type failure struct {
	reason  Reason
	timeout bool
	// sent: the request's first byte went to the upstream, which may
	// have acted on it.
	sent bool
}

// An Attempt is one attempt at a request's upstream, as the request event
// logs it.
type Attempt struct {
	Upstream string `json:"upstream"`
	Pod      string `json:"pod,omitempty"`
	Outcome  string `json:"outcome"`
	Cached   bool   `json:"cached,omitempty"`
	// Sent: a byte of the request was written to the upstream.
	Sent bool    `json:"sent,omitempty"`
	MS   float64 `json:"ms"`
}

// A forwarder is either role's request handler: each request goes to the
// endpoints of its balancer in turn, over the pool's connections. The
// edge tries the next endpoint when an attempt fails as NextUpstream
// allows, and answers its failures as NGINX does; the sidecar, whose
// balancer holds its one upstream, makes one attempt, within its route
// timeout, and answers as Envoy does.
type forwarder struct {
	p    *server
	bal  *balancer
	pool *pool
	edge bool
	// readTimeout bounds each read of an upstream's response; 0 means
	// none.
	readTimeout time.Duration
}

func newForwarder(p *server) *forwarder {
	c := p.cfg
	dialer := net.Dialer{Timeout: c.ConnectTimeout}
	if c.Role == RoleEdge {
		return &forwarder{p: p, bal: &balancer{}, edge: true, readTimeout: c.ReadTimeout,
			pool: &pool{max: c.Keepalive, requests: c.KeepaliveRequests, idleTimeout: c.KeepaliveTimeout,
				lifetime: c.KeepaliveTime, dialer: dialer}}
	}
	f := &forwarder{p: p, bal: &balancer{}, pool: &pool{max: sidecarKeepalive, requests: unlimitedRequests,
		idleTimeout: sidecarKeepaliveTimeout, lifetime: unlimitedLifetime, dialer: dialer}}
	f.bal.set([]Endpoint{{Addr: c.Upstream}})
	return f
}

// hopHeaders are the hop-by-hop headers that a proxy does not pass on (RFC
// 9110, section 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopHeaders removes from h the hop-by-hop headers and those that
// its Connection header names.
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// ServeHTTP forwards r: the edge as NGINX's proxy_pass to an upstream
// group does, the sidecar as Envoy's router to its one cluster.
func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	cfg := f.p.cfg
	var (
		attempts []Attempt
		tried    = map[string]bool{}
		last     *failure
		lastEP   Endpoint
	)
	ex := &exchange{ResponseWriter: w}
	defer func() {
		if outcome := ex.outcome(); outcome != "ok" || cfg.AccessLog || len(attempts) > 1 || ex.status >= 400 {
			f.p.log.Info("request", "id", r.Header.Get("X-Request-Id"), "method", r.Method, "path", r.URL.Path,
				"upstream", UpstreamAddrs(attempts), "attempts", attempts, "outcome", outcome, "status", ex.status,
				"duration_ms", float64(time.Since(start).Microseconds())/1000)
		}
	}()
	ctx := r.Context()
	if !f.edge && cfg.Timeout > 0 {
		// Envoy's route timeout: from the request's arrival to the end
		// of its response.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.Timeout, errRouteTimeout)
		defer cancel()
	}
	// The downstream body: the edge's, read whole; the sidecar's, read
	// as it goes up, its errors kept apart from the upstream's.
	var body []byte
	down := &downstreamBody{ReadCloser: r.Body}
	if f.edge {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		switch {
		case err != nil:
			f.downstreamFailed(ex, r, err)
			return
		case len(body) > maxBody:
			f.answer(ex, http.StatusRequestEntityTooLarge, "", nil)
			return
		}
	}
	out := r.Clone(ctx)
	out.Body = down
	if r.ContentLength == 0 {
		out.Body = nil
	}
	out.RequestURI, out.Close = "", f.pool.max == 0
	removeHopHeaders(out.Header)
	out.Header.Del("Expect")
	if _, ok := out.Header["User-Agent"]; !ok {
		// Request.Write's own is not sent for an empty one: neither
		// proxy adds one where the client sent none.
		out.Header["User-Agent"] = []string{""}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		out.Header.Set("X-Forwarded-For", strings.Join(append(r.Header.Values("X-Forwarded-For"), host), ", "))
		if f.edge {
			out.Header.Set("X-Real-Ip", host)
		}
	}
	if !f.edge {
		out.Header.Set("X-Forwarded-Proto", "http")
	}

	tries := 1
	if f.edge {
		tries = cfg.NextUpstreamTries
	}
	for ; tries > 0; tries-- {
		ep, ok := f.bal.pick(tried)
		if !ok {
			break
		}
		tried[ep.Addr] = true
		at := time.Now()
		uc, cached, fl := f.pool.get(ctx, ep.Addr)
		var resp *http.Response
		if f.edge {
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			if len(body) == 0 {
				out.Body = nil
			}
		}
		if fl == nil {
			resp, fl = f.roundTrip(ctx, uc, out)
		}
		if down.err != nil {
			// The client's body failed as it went up, which failed the
			// attempt: the client's doing.
			f.downstreamFailed(ex, r, down.err)
			return
		}
		rec := Attempt{Upstream: ep.Addr, Pod: ep.Pod, Cached: cached, Sent: fl == nil || fl.sent, MS: float64(time.Since(at).Microseconds()) / 1000}
		if fl == nil {
			rec.Outcome = "ok"
			attempts = append(attempts, rec)
			f.relay(ctx, ex, r, uc, resp, attempts)
			return
		}
		if errors.Is(context.Cause(ctx), errRouteTimeout) {
			fl = &failure{reason: UpstreamTimeout, timeout: true, sent: fl.sent}
		} else if ctx.Err() != nil {
			ex.canceled, ex.cut = !f.p.exiting.Load(), f.p.exiting.Load()
			rec.Outcome = "canceled"
			attempts = append(attempts, rec)
			return
		}
		rec.Outcome = string(fl.reason)
		attempts = append(attempts, rec)
		last, lastEP = fl, ep
		if !f.edge {
			break
		}
		if cached && !fl.timeout {
			// NGINX gives a failed cached connection a try of its own
			// (ngx_http_upstream_next: "TODO: inform balancer
			// instead"), and the same endpoint again.
			tries++
			delete(tried, ep.Addr)
		}
		if !cfg.NextUpstream.allows(fl, r.Method) {
			break
		}
	}
	if last == nil {
		ex.reason = NoEndpoints
		f.answer(ex, http.StatusServiceUnavailable, "", attempts)
		return
	}
	ex.reason = last.reason
	status := http.StatusBadGateway
	if last.timeout {
		status = http.StatusGatewayTimeout
	}
	f.answer(ex, status, lastEP.Pod, attempts)
}

// roundTrip sends out, its body included, on uc and reads its response's
// header, within the read timeout if there is one; the response's body is
// left to read. A failure closes uc.
func (f *forwarder) roundTrip(ctx context.Context, uc *upConn, out *http.Request) (*http.Response, *failure) {
	req := out.WithContext(ctx)
	var deadline time.Time
	if f.readTimeout > 0 {
		deadline = time.Now().Add(f.readTimeout)
	}
	uc.SetDeadline(deadline)
	defer uc.onCancel(ctx)()
	uc.sent = false
	err := req.Write(uc.bw)
	if err == nil {
		err = uc.bw.Flush()
	}
	if err != nil {
		uc.Close()
		return nil, upstreamFailure(err, uc.sent)
	}
	for {
		resp, err := http.ReadResponse(uc.br, req)
		if err != nil {
			uc.Close()
			return nil, upstreamFailure(err, true)
		}
		// An informational answer (100 Continue unasked, 103 Early
		// Hints) precedes the response: neither proxy passes them on.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		uc.requests++
		return resp, nil
	}
}

// downstreamBody is a request's body as the proxy reads it from its
// client, which keeps the error of a read that failed.
type downstreamBody struct {
	io.ReadCloser
	err error
}

func (b *downstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// downstreamFailed ends an exchange whose client's body failed with err:
// the client left (or the proxy's exit cut it), or its body did not parse,
// such as a bad chunk size, which gets a 400.
func (f *forwarder) downstreamFailed(ex *exchange, r *http.Request, err error) {
	if r.Context().Err() != nil || f.p.exiting.Load() {
		ex.canceled, ex.cut = !f.p.exiting.Load(), f.p.exiting.Load()
		return
	}
	f.answer(ex, http.StatusBadRequest, "", nil)
}

// upstreamFailure returns the failure of an exchange with an upstream
// that ended in err, sent saying whether any of the request had gone.
func upstreamFailure(err error, sent bool) *failure {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return &failure{reason: UpstreamTimeout, timeout: true, sent: sent}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &failure{reason: UpstreamRefused, sent: sent}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return &failure{reason: UpstreamUnreachable, sent: sent}
	}
	return &failure{reason: UpstreamReset, sent: sent}
}

// relay passes resp on to the client, its body as it comes, each read
// within the read timeout, and gives uc back to the pool if the upstream
// may take another request on it. An upstream that fails mid-body cuts
// the client's response, as NGINX closes the client's connection.
func (f *forwarder) relay(ctx context.Context, ex *exchange, r *http.Request, uc *upConn, resp *http.Response, attempts []Attempt) {
	h := ex.Header()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		h[k] = v
	}
	if f.edge {
		h.Set(UpstreamAddrHeader, UpstreamAddrs(attempts))
	}
	f.p.closing(h)
	ex.WriteHeader(resp.StatusCode)
	uc.timed = f.readTimeout
	stop := uc.onCancel(ctx)
	buf := copyBuffers.get()
	_, err := io.CopyBuffer(flushWriter{ex}, resp.Body, *buf)
	copyBuffers.put(buf)
	stop()
	resp.Body.Close()
	uc.timed = 0
	switch {
	case err == nil && !resp.Close:
		// The response came whole: the connection takes another, also
		// when the client has left since, as NGINX keeps it.
		f.pool.put(uc)
		return
	case err == nil:
		uc.Close()
		return
	}
	uc.Close()
	if r.Context().Err() != nil {
		ex.canceled, ex.cut = !f.p.exiting.Load(), f.p.exiting.Load()
		return
	}
	// ServeHTTP logs it as aborted. Past the sidecar's route timeout,
	// Envoy resets the stream too.
	ex.aborted, ex.cut = true, f.p.exiting.Load()
	panic(http.ErrAbortHandler)
}

// flushWriter flushes each write: a proxy streams a response as it comes,
// as NGINX with proxy_buffering off and Envoy do, so that a response cut
// upstream reaches the client cut.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	http.NewResponseController(f.w).Flush()
	return n, err
}

// UpstreamAddrHeader carries the upstreams a response's attempts went to,
// in order, as NGINX's $upstream_addr lists them ("a:80, b:80"): the
// edge's own answers and the responses it passes on alike. An NGINX
// gives the same with add_header X-Upstream-Addr $upstream_addr always.
const UpstreamAddrHeader = "X-Upstream-Addr"

// reasonHeader carries the reason of the edge's own answer, which NGINX's
// body does not tell.
const reasonHeader = "X-Proxy-Reason"

// UpstreamAddrs lists the upstreams of attempts, in order, as
// UpstreamAddrHeader carries them.
func UpstreamAddrs(attempts []Attempt) string {
	addrs := make([]string, len(attempts))
	for i, a := range attempts {
		addrs[i] = a.Upstream
	}
	return strings.Join(addrs, ", ")
}

// answer writes the proxy's own answer: the sidecar's, Envoy's local
// reply for the exchange's reason; the edge's, NGINX's page for status,
// naming pod, the pod of the last attempt, if known.
func (f *forwarder) answer(w http.ResponseWriter, status int, pod string, attempts []Attempt) {
	h := w.Header()
	if !f.edge {
		// Envoy's local reply, for the reason; the pod is the sidecar's
		// own.
		body := http.StatusText(status)
		if ex, ok := w.(*exchange); ok && ex.reason != "" {
			status, body = reply(ex.reason)
		}
		h.Set("Content-Type", "text/plain")
		h.Set(podHeader, f.p.cfg.PodName)
		f.p.closing(h)
		w.WriteHeader(status)
		io.WriteString(w, body)
		return
	}
	h.Set("Content-Type", "text/html")
	if pod != "" {
		h.Set(podHeader, pod)
	}
	if len(attempts) > 0 {
		h.Set(UpstreamAddrHeader, UpstreamAddrs(attempts))
	}
	if ex, ok := w.(*exchange); ok && ex.reason != "" {
		h.Set(reasonHeader, string(ex.reason))
	}
	f.p.closing(h)
	w.WriteHeader(status)
	io.WriteString(w, nginxPage(status))
}

// balancer picks the endpoints of a request's attempts round-robin, as
// ingress-NGINX's default balancer does, from a random start.
type balancer struct {
	mu   sync.Mutex
	eps  []Endpoint
	next int
}

// set replaces the endpoints.
func (b *balancer) set(eps []Endpoint) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eps == nil && len(eps) > 0 {
		b.next = rand.IntN(len(eps))
	}
	b.eps = eps
}

// pick returns the next endpoint that is not in tried; false if there is
// none.
func (b *balancer) pick(tried map[string]bool) (Endpoint, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.eps {
		j := (b.next + i) % len(b.eps)
		if ep := b.eps[j]; !tried[ep.Addr] {
			b.next = j + 1
			return ep, true
		}
	}
	return Endpoint{}, false
}

// pool keeps idle upstream connections for reuse, as NGINX's keepalive
// directive does: at most max across every upstream, the least recently
// used closed first; each closed once idle for idleTimeout
// (keepalive_timeout), once it has carried requests requests
// (keepalive_requests), once it is older than lifetime (keepalive_time),
// or as soon as its upstream closes it. A max of 0 keeps none: a
// connection per request.
type pool struct {
	max, requests         int
	idleTimeout, lifetime time.Duration
	dialer                net.Dialer

	mu   sync.Mutex
	idle []*upConn // the most recently used last
	// closed: closeIdle has run, and put keeps nothing more.
	closed bool
}

// get returns an idle connection to addr, cached true, or a new one; a
// failed connect is a failure.
func (p *pool) get(ctx context.Context, addr string) (uc *upConn, cached bool, f *failure) {
	now := time.Now()
	for {
		p.mu.Lock()
		var found *upConn
		for i := len(p.idle) - 1; i >= 0; i-- {
			if p.idle[i].addr == addr {
				found = p.idle[i]
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		if found == nil {
			break
		}
		if found.take(p.idleTimeout) && now.Sub(found.created) < p.lifetime {
			return found, true, nil
		}
		found.Close()
	}
	c, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			return nil, false, &failure{reason: UpstreamConnectTimeout, timeout: true}
		}
		return nil, false, upstreamFailure(err, false)
	}
	uc = &upConn{Conn: c, addr: addr, created: time.Now()}
	uc.br = bufio.NewReader(uc)
	uc.bw = bufio.NewWriter(uc)
	return uc, false, nil
}

// put keeps uc for reuse, or closes it if the pool keeps no more of it.
func (p *pool) put(uc *upConn) {
	if p.max == 0 || uc.requests >= p.requests || time.Since(uc.created) >= p.lifetime {
		uc.Close()
		return
	}
	uc.SetDeadline(time.Time{})
	uc.canceled.Store(false)
	// Ready to be taken before it can be: take reads what watch sets.
	uc.watch(p.idleTimeout)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		uc.Close()
		return
	}
	p.idle = append(p.idle, uc)
	var evicted *upConn
	if len(p.idle) > p.max {
		evicted = p.idle[0]
		p.idle = p.idle[1:]
	}
	p.mu.Unlock()
	if evicted != nil {
		evicted.Close()
	}
	go uc.peek(p)
}

// remove takes uc out of the idle connections; false if it was not there.
func (p *pool) remove(uc *upConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.idle {
		if c == uc {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return true
		}
	}
	return false
}

// closeIdle closes every idle connection, and those given back later.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, uc := range idle {
		uc.Close()
	}
}

// upConn is one upstream connection. Reads and writes go through it so
// that the read timeout bounds each read of a body (timed).
type upConn struct {
	net.Conn
	addr     string
	created  time.Time
	requests int
	br       *bufio.Reader
	bw       *bufio.Writer
	// sent: a byte of the current request was written.
	sent bool
	// timed, if positive, is set as the read deadline before each read.
	timed time.Duration
	// canceled: the request's context ended (its client left, or the
	// sidecar's route timeout passed), and onCancel's callback ended the
	// exchange; no read extends the deadline then.
	canceled atomic.Bool
	// watched is closed once the watch of an idle connection has ended,
	// which began at idleSince and whose read ended with peekErr; nil
	// when none runs.
	watched   chan struct{}
	idleSince time.Time
	peekErr   error
}

func (c *upConn) Read(b []byte) (int, error) {
	if c.timed > 0 && !c.canceled.Load() {
		c.SetReadDeadline(time.Now().Add(c.timed))
	}
	return c.Conn.Read(b)
}

// onCancel ends the exchange on c, its reads and writes, when ctx, its
// request's, is done, and returns the function that stops watching ctx:
// once that has returned, no callback runs on c any more, so that a
// connection given back to the pool keeps its deadlines.
func (c *upConn) onCancel(ctx context.Context) (stop func()) {
	fired := make(chan struct{})
	stopAfter := context.AfterFunc(ctx, func() {
		c.canceled.Store(true)
		c.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stopAfter() {
			<-fired
		}
	}
}

func (c *upConn) Write(b []byte) (int, error) {
	c.sent = true
	return c.Conn.Write(b)
}

// watch readies uc to wait, idle, for its upstream to close it (or to
// send anything, which no idle HTTP/1.1 connection may receive), or for
// idleTimeout: peek waits, and take ends the wait.
func (c *upConn) watch(idleTimeout time.Duration) {
	c.watched, c.idleSince = make(chan struct{}), time.Now()
	c.SetReadDeadline(c.idleSince.Add(idleTimeout))
}

// peek waits as watch readied it; if uc is still idle then, it takes uc
// out of p and closes it, as NGINX's keepalive module does when an idle
// connection becomes readable or its timer fires.
func (c *upConn) peek(p *pool) {
	_, c.peekErr = c.br.Peek(1)
	if p.remove(c) {
		c.Close()
	}
	close(c.watched)
}

// take ends the watch of an idle connection that get took from the pool,
// and reports whether the connection may carry a request: its upstream
// has neither closed it nor sent anything, and its idle timeout has not
// passed.
func (c *upConn) take(idleTimeout time.Duration) bool {
	if c.watched == nil {
		return true
	}
	c.SetReadDeadline(time.Unix(1, 0))
	<-c.watched
	c.watched = nil
	var ne net.Error
	if c.br.Buffered() > 0 || !errors.As(c.peekErr, &ne) || !ne.Timeout() || time.Since(c.idleSince) >= idleTimeout {
		return false
	}
	c.SetReadDeadline(time.Time{})
	return true
}

// nginxPage returns NGINX's own page for status.
func nginxPage(status int) string {
	text := http.StatusText(status)
	switch status {
	case http.StatusServiceUnavailable:
		text = "Service Temporarily Unavailable"
	case http.StatusGatewayTimeout:
		text = "Gateway Time-out"
	}
	title := fmt.Sprintf("%d %s", status, text)
	return "<html>\r\n<head><title>" + title + "</title></head>\r\n<body>\r\n<center><h1>" + title +
		"</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
}
