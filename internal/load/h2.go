package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"time"
)

// An h2Client sends requests over HTTP/2 without TLS, with prior
// knowledge (h2c), through net/http's Transport, as a Go service calls
// another over HTTP/2: each transport keeps a connection and carries
// every request on it at once. A client with slots holds as many
// transports, taken in turn (see [channelPool]); one without makes a
// transport for each request, whose connection closes after the
// response.
//
// The Transport resends by itself a request that the server did not
// process: a stream refused by a GOAWAY or REFUSED_STREAM, or never sent
// as its connection drained (and one reset with PROTOCOL_ERROR, which a
// server may have processed). Each try is an attempt of its own in the
// request's attempt log, so that a request it saved counts as absorbed,
// never hidden.
//
// An h2Client is an http.RoundTripper so that retry.Transport can wrap
// it. RoundTrip reads and discards the response body: the response it
// returns has an empty body.
type h2Client struct {
	dial                            Dialer
	connectTimeout, responseTimeout time.Duration
	// single makes each transport's connection close after its request:
	// a client without slots.
	single     bool
	transports *channelPool[*http.Transport]
}

func newH2Client(dial Dialer, connectTimeout, responseTimeout time.Duration, connections int, limits Limits) *h2Client {
	c := &h2Client{dial: dial, connectTimeout: connectTimeout, responseTimeout: responseTimeout, single: connections == 0}
	c.transports = newChannelPool(connections, limits, connectTimeout+responseTimeout, c.newTransport,
		(*http.Transport).CloseIdleConnections)
	return c
}

// newTransport returns a transport that speaks HTTP/2 alone, without TLS,
// over connections of c's dialer, each made within the connect timeout.
func (c *h2Client) newTransport() (*http.Transport, error) {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols: protocols,
		// A request past the server's stream limit (Go's: 250) waits for
		// a stream of the transport's connection rather than opening
		// another.
		HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		// The connection closes once its last stream is done, even one
		// that its request gave up: nothing is left to close it after.
		DisableKeepAlives: c.single,
		// The requests' headers are the generator's own, as the HTTP/1.1
		// client's are: no Accept-Encoding added.
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
			defer cancel()
			nc, err := c.dial(ctx, network, address)
			if err != nil {
				return nil, err
			}
			return newSharedConn(nc, nil), nil
		},
	}, nil
}

// The causes of an HTTP/2 request's end at one of its timeouts.
var (
	errConnectWait  = fmt.Errorf("no connection within the connect timeout: %w", os.ErrDeadlineExceeded)
	errResponseWait = fmt.Errorf("no complete response within the response timeout: %w", os.ErrDeadlineExceeded)
)

// connectBackstop is how long past the connect timeout a request waits
// for a connection: the dial's own timeout, a little later begun, ends
// first, and its error names the address it tried. The backstop ends the
// wait for a connection that another request is dialing.
const connectBackstop = 250 * time.Millisecond

// RoundTrip sends req and reads the whole response. As the HTTP/1.1
// client's, the connect timeout bounds the wait for a connection, and the
// response timeout the response, from when the request had one (a resend
// counts from its own); a request that waits for a free stream of a busy
// connection waits within its response timeout.
func (c *h2Client) RoundTrip(req *http.Request) (*http.Response, error) {
	log := attemptLogFrom(req.Context())
	tr, own, err := c.transports.get(false)
	if err != nil {
		return nil, log.start().fail(Error, err)
	}
	if own {
		defer tr.CloseIdleConnections()
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)

	// The trace's hooks run on the caller's goroutine and on the
	// connection's reader, under log.mu; ended drops those that come
	// after RoundTrip. timeout is the running attempt's.
	log.mu.Lock()
	first := len(log.attempts)
	log.start()
	timeout := time.AfterFunc(c.connectTimeout+connectBackstop, func() { cancel(errConnectWait) })
	log.mu.Unlock()
	ended := false
	// resent ends the last attempt, which had a connection, when the
	// Transport looks for one again for the same request: that attempt
	// never reached the server, and the next begins.
	resent := func() {
		if !log.last().connect.IsZero() {
			log.retried()
			log.start()
			timeout.Stop()
			timeout = time.AfterFunc(c.connectTimeout+connectBackstop, func() { cancel(errConnectWait) })
		}
	}
	trace := &httptrace.ClientTrace{
		GetConn: func(string) {
			log.mu.Lock()
			defer log.mu.Unlock()
			if !ended {
				resent()
			}
		},
		GotConn: func(info httptrace.GotConnInfo) {
			log.mu.Lock()
			defer log.mu.Unlock()
			if ended {
				return
			}
			resent()
			if sc, ok := info.Conn.(*sharedConn); ok {
				log.last().took(sc)
			} else {
				log.last().connect = time.Now()
			}
			timeout.Stop()
			timeout = time.AfterFunc(c.responseTimeout, func() { cancel(errResponseWait) })
		},
		GotFirstResponseByte: func() {
			log.mu.Lock()
			defer log.mu.Unlock()
			if !ended {
				log.last().firstByte = time.Now()
			}
		},
	}
	resp, err := tr.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	var head []byte
	if err == nil {
		if head, err = readBody(resp); err != nil {
			err = fmt.Errorf("read response body: %w", err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	ended = true
	timeout.Stop()
	if cause := context.Cause(ctx); errors.Is(err, context.Canceled) && (cause == errConnectWait || cause == errResponseWait) {
		err = fmt.Errorf("%w (%w)", cause, err)
	}
	for i := first; i < len(log.attempts); i++ {
		// Read at the end, as the Dialer's contract has it.
		if b := &log.attempts[i]; b.conn != nil {
			b.addr = addrPort(b.conn.RemoteAddr())
		}
	}
	a := log.last()
	if err != nil {
		return nil, a.fail(classifyStream(a, err), h2Error(a.conn, err))
	}
	a.done(resp, head)
	resp.Body = http.NoBody
	return resp, nil
}

// close closes the idle connections of c's transports.
func (c *h2Client) close() { c.transports.closeAll() }

// last returns the log's last attempt.
func (l *attemptLog) last() *attempt { return &l.attempts[len(l.attempts)-1] }

// classifyStream sorts the failure err of an HTTP/2 request's attempt a:
// from the connect, if the attempt never had a connection; else from
// its connection's socket.
func classifyStream(a *attempt, err error) Class {
	switch {
	case errors.Is(err, errConnectWait):
		return ConnectTimeout
	case a.connect.IsZero():
		a.addr = dialedAddr(err)
		if timedOut(err) {
			return ConnectTimeout
		}
		return classifyConnect(err)
	case a.conn != nil && a.conn.notHTTP2() != nil:
		return Error
	case timedOut(err):
		return ResponseTimeout
	}
	return a.broken()
}

// h2Error returns err, the failure of a request on conn, with what the
// connection saw of it where that is news: a server that does not speak
// HTTP/2.
func h2Error(conn *sharedConn, err error) error {
	if conn == nil {
		return err
	}
	if e := conn.notHTTP2(); e != nil && !errors.Is(err, ErrNotH2C) {
		return fmt.Errorf("%w: %w", e, err)
	}
	return err
}
