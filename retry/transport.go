package retry

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Defaults of the connections that a [Transport] with a nil Base makes.
const (
	// DefaultConnectTimeout bounds a TCP connect. Linux resends a SYN at
	// 1 s and 3 s, so 2 s covers one lost SYN and fails fast on an address
	// whose pod is gone.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultMaxConnLifetime is how long a connection is reused before it
	// is closed and made again.
	DefaultMaxConnLifetime = 60 * time.Second
)

// ErrNoFreshConn is returned by [Transport.RoundTrip] when the Transport has
// no way to send a retry on a new connection: Base is neither nil nor an
// *http.Transport, and Fresh is nil.
var ErrNoFreshConn = errors.New("retry: no way to make a fresh connection: set Transport.Fresh")

// A Transport is an [http.RoundTripper] that sends a request again after a
// failure only when the rules in the package documentation allow it.
//
// The zero Transport is ready to use: it makes its own HTTP/1.1 connections
// and pools them. A Transport is safe for concurrent use by multiple
// goroutines. Its fields must not be changed after its first use.
//
// Like any RoundTripper, a Transport does not follow redirects and treats
// any response, whatever its status, as a result, except those that
// [Policy.Unprocessed] accepts. It closes the request body, and the body of
// every response that it does not return.
type Transport struct {
	// Base sends the first attempt of each request. If nil, the Transport
	// sends it on a connection from its own pool, which ConnectTimeout and
	// MaxConnLifetime configure and which never retries by itself.
	//
	// An *http.Transport used as Base keeps its own behaviour: it retries
	// some requests on reused connections by itself (see its
	// documentation), and its connections have no maximum lifetime.
	Base http.RoundTripper

	// Fresh sends retries. Each call must send its request on a new
	// connection, not one shared with other requests. If nil, retries go
	// out on a connection made for them: by the Transport's own pool if
	// Base is nil, by Base's [http.Transport.NewClientConn] if Base is an
	// *http.Transport; for any other Base, RoundTrip returns
	// ErrNoFreshConn.
	Fresh http.RoundTripper

	// Policy sets the number of attempts, the backoff, and which
	// responses are retried.
	Policy Policy

	// ConnectTimeout bounds each connect of the Transport's own pool.
	// Zero means DefaultConnectTimeout; negative means no limit other than
	// the request context. It does not apply to Base or Fresh.
	ConnectTimeout time.Duration

	// MaxConnLifetime is how long the Transport's own pool reuses a
	// connection, counted from its connect and shortened by up to a tenth
	// at random so that connections made together do not all end
	// together. An idle connection is closed when its lifetime ends; a
	// busy one when its request is done. Zero means
	// DefaultMaxConnLifetime; negative means no limit. It does not apply
	// to Base or Fresh.
	MaxConnLifetime time.Duration

	initOnce sync.Once
	base     http.RoundTripper
	fresh    http.RoundTripper
	pool     *pool
	initErr  error
}

func (t *Transport) init() {
	switch base := t.Base.(type) {
	case nil:
		connect := t.ConnectTimeout
		if connect == 0 {
			connect = DefaultConnectTimeout
		}
		lifetime := t.MaxConnLifetime
		if lifetime == 0 {
			lifetime = DefaultMaxConnLifetime
		}
		t.pool = newPool(connect, lifetime)
		t.base = t.pool
		t.fresh = freshFunc(func(req *http.Request) (*http.Response, error) { return t.pool.roundTrip(req, true) })
	case *http.Transport:
		t.base = base
		t.fresh = freshFunc(func(req *http.Request) (*http.Response, error) { return singleUse(base, req) })
	default:
		t.base = base
	}
	if t.Fresh != nil {
		t.fresh = t.Fresh
	}
	if t.fresh == nil {
		t.initErr = ErrNoFreshConn
	}
}

// RoundTrip sends req, and sends it again while the failure allows it (see
// the package documentation). It returns the last attempt's response or
// error. If req's context is done while waiting to retry, RoundTrip returns
// the last attempt's result at once.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.initOnce.Do(t.init)
	if t.initErr != nil {
		closeBody(req.Body)
		return nil, t.initErr
	}
	ctx := req.Context()
	canReplay := replayable(req)
	isIdempotent := idempotent(req)
	attempt := req
	for n := 1; ; n++ {
		rt := t.base
		if n > 1 {
			rt = t.fresh
		}
		resp, err := rt.RoundTrip(attempt)
		if n >= t.Policy.attempts() || !canReplay || ctx.Err() != nil {
			return resp, err
		}
		var asked time.Duration
		switch {
		case err != nil && (notSent(err) || isIdempotent):
		case err == nil && t.Policy.Unprocessed != nil && t.Policy.Unprocessed(resp):
			asked = retryAfter(resp, time.Now())
		default:
			return resp, err
		}
		wait, ok := t.Policy.Next(ctx, n, asked)
		if !ok {
			return resp, err
		}
		next, rerr := rewind(req)
		if rerr != nil {
			return resp, err
		}
		if !sleep(ctx, wait) {
			closeBody(next.Body)
			return resp, err
		}
		if resp != nil {
			discard(resp.Body)
		}
		attempt = next
	}
}

// CloseIdleConnections closes the idle connections of the Transport's own
// pool, and calls Base's and Fresh's CloseIdleConnections method if they
// have one. It does not interrupt connections in use.
func (t *Transport) CloseIdleConnections() {
	t.initOnce.Do(t.init)
	if t.pool != nil {
		t.pool.closeIdle()
	}
	type closeIdler interface{ CloseIdleConnections() }
	for _, rt := range []http.RoundTripper{t.Base, t.Fresh} {
		if c, ok := rt.(closeIdler); ok {
			c.CloseIdleConnections()
		}
	}
}

// rewind returns a copy of req with a new body, for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// maxDiscard is how much of an unused response body is read so that its
// connection can be reused; a longer body's connection is closed instead.
const maxDiscard = 64 << 10

func discard(body io.ReadCloser) {
	io.CopyN(io.Discard, body, maxDiscard)
	body.Close()
}

func closeBody(body io.ReadCloser) {
	if body != nil {
		body.Close()
	}
}

// freshFunc adapts a function to http.RoundTripper.
type freshFunc func(*http.Request) (*http.Response, error)

func (f freshFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// singleUse sends req on a new connection made by t, which it closes when
// the response body is closed.
func singleUse(t *http.Transport, req *http.Request) (*http.Response, error) {
	cc, err := t.NewClientConn(req.Context(), req.URL.Scheme, hostPort(req.URL))
	if err != nil {
		closeBody(req.Body)
		return nil, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		cc.Close()
		return nil, err
	}
	resp.Body = &connBody{ReadCloser: resp.Body, conn: cc}
	return resp, nil
}

// connBody closes a connection with the response body read from it.
type connBody struct {
	io.ReadCloser
	conn io.Closer
}

func (b *connBody) Close() error {
	err := b.ReadCloser.Close()
	b.conn.Close()
	return err
}
