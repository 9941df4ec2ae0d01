package load

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// The metadata keys of a gRPC call: the request's id, which the lab
// server echoes and logs, and the pod that answered, in the response's
// header. They are the HTTP headers' names, as gRPC spells metadata keys.
const (
	grpcRequestIDKey = "x-request-id"
	grpcPodKey       = "x-pod-name"
)

// grpcSender makes unary calls of one method, with an empty request: a
// NewConn client on a channel of its own per call, closed after it; a
// KeepAlive client over a pool of long-lived channels, one connection
// each, taken in turn.
// grpc-go's transparent retries (a call that never reached the server,
// refused by a GOAWAY, say) are attempts of their own, so that a call they
// saved counts as absorbed.
type grpcSender struct {
	dial    Dialer
	address string
	// method is the full name of the method called, "/SERVICE/METHOD".
	method string
	// resolve, if not nil, makes each channel look address's host up
	// itself and balance over the addresses; nil dials address as it is.
	resolve                         *Resolve
	connectTimeout, responseTimeout time.Duration
	channels                        *channelPool[*grpcChannel]
}

func newGRPCSender(dial Dialer, address, method string, resolve *Resolve, connectTimeout, responseTimeout time.Duration, connections int, limits Limits) *grpcSender {
	s := &grpcSender{dial: dial, address: address, method: method, resolve: resolve, connectTimeout: connectTimeout, responseTimeout: responseTimeout}
	s.channels = newChannelPool(connections, limits, connectTimeout+responseTimeout, s.newChannel,
		func(ch *grpcChannel) { ch.cc.Close() })
	return s
}

// roundRobin is the service config of a channel that resolves its host
// itself: grpc-go's round_robin, a connection to every address, as a
// client of a headless Service is set up to balance.
const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// A grpcChannel is one client channel and what the call records need of
// its connections.
type grpcChannel struct {
	cc *grpc.ClientConn
	// failed is the channel's last failed connect; conn, its last
	// connection.
	failed atomic.Pointer[dialFailure]
	conn   atomic.Pointer[sharedConn]
	// conns are its connections, by local address.
	conns sync.Map
}

// connAt returns the channel's connection from local address local, or
// nil. The latest connection is nearly always the one: a channel has
// one, but while it reconnects, calls may still end on the one before.
func (ch *grpcChannel) connAt(local net.Addr) *sharedConn {
	// The same *net.TCPAddr that the connection gave grpc-go: compared
	// as pointers, never as interfaces, whose dynamic type may not be
	// comparable.
	if c := ch.conn.Load(); c != nil {
		if a, ok := local.(*net.TCPAddr); ok && c.local == net.Addr(a) {
			return c
		}
	}
	if c, ok := ch.conns.Load(local.String()); ok {
		return c.(*sharedConn)
	}
	return nil
}

// dialFailure is a failed connect: its error, when it began (its first
// SYN, where the routing chose the pod) and when it ended.
type dialFailure struct {
	err       error
	began, at time.Time
}

// newChannel makes a channel to s's address, connected through s's dialer.
func (s *grpcSender) newChannel() (*grpcChannel, error) {
	ch := new(grpcChannel)
	target, opts := "passthrough:///"+s.address, []grpc.DialOption(nil)
	if s.resolve != nil {
		target = lookupScheme + ":///" + s.address
		opts = []grpc.DialOption{grpc.WithResolvers(lookupBuilder{*s.resolve}), grpc.WithDefaultServiceConfig(roundRobin)}
	}
	cc, err := grpc.NewClient(target, append(opts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(callStats{}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(emptyCodec{})),
		// The connect and the HTTP/2 handshake within the client's
		// connect timeout, as the HTTP client's connect, not grpc-go's 20 s.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: s.connectTimeout}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
			defer cancel()
			began := time.Now()
			c, err := s.dial(ctx, "tcp", addr)
			if err != nil {
				ch.failed.Store(&dialFailure{err: err, began: began, at: time.Now()})
				return nil, err
			}
			key := c.LocalAddr().String()
			gc := newSharedConn(c, func() { ch.conns.Delete(key) })
			ch.conns.Store(key, gc)
			ch.conn.Store(gc)
			return gc, nil
		}))...)
	if err != nil {
		return nil, err
	}
	ch.cc = cc
	return ch, nil
}

func (s *grpcSender) send(id string, log *attemptLog, fresh bool) error {
	ch, own, err := s.channels.get(fresh)
	if err != nil {
		return log.start().fail(Error, err)
	}
	if own {
		defer ch.cc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.connectTimeout+s.responseTimeout)
	defer cancel()
	ctx = context.WithValue(withAttemptLog(ctx, log), channelKey{}, ch)
	ctx = metadata.AppendToOutgoingContext(ctx, grpcRequestIDKey, id)
	// The codec sends the empty message and drops the reply.
	err = ch.cc.Invoke(ctx, s.method, nil, nil)
	log.mu.Lock()
	defer log.mu.Unlock()
	// From here on, a header event that the transport's reader delivers
	// late is dropped: the caller reads the attempts.
	log.done = true
	if len(log.attempts) == 0 {
		// The call ended before any attempt began.
		return log.start().fail(Error, err)
	}
	// grpc-go may end the last attempt's stats without the status that
	// the call returns (an attempt whose stream was done as it sent): the
	// call's own error decides.
	a := &log.attempts[len(log.attempts)-1]
	if a.end.IsZero() || (err != nil && a.class == OK) {
		classifyCall(a, err, ch)
	}
	if errors.Is(a.err, ErrNotH2C) {
		// What the call's status does not say: the server's first bytes.
		return a.err
	}
	return err
}

func (s *grpcSender) close() { s.channels.closeAll() }

// emptyCodec is the channels' codec: every request it encodes is the
// empty message, and it drops every response undecoded, as the load knows
// no service's messages. The empty message is a valid one of every
// protobuf type, each field absent. It names itself "proto", the content
// subtype of every protobuf service.
type emptyCodec struct{}

func (emptyCodec) Marshal(any) (mem.BufferSlice, error) { return nil, nil }
func (emptyCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (emptyCodec) Name() string                         { return "proto" }

// channelKey keys a call's channel in its context, for callStats.
type channelKey struct{}

// callStats is the channels' stats.Handler: it records each attempt of a
// call, grpc-go's transparent retries included, in the call's attemptLog,
// and sorts its outcome into a Class.
type callStats struct{}

func (callStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (callStats) HandleConn(context.Context, stats.ConnStats)                       {}
func (callStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }

func (callStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	switch st.(type) {
	case *stats.Begin, *stats.OutHeader, *stats.InHeader, *stats.InTrailer, *stats.End:
	default:
		// Payloads and picks: a call has several, and they tell nothing
		// of its outcome.
		return
	}
	log := attemptLogFrom(ctx)
	ch, _ := ctx.Value(channelKey{}).(*grpcChannel)
	// The transport's reader delivers the header and trailer events, the
	// caller's goroutine the others.
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.done || ch == nil {
		return
	}
	if _, ok := st.(*stats.Begin); ok {
		// Whether or not grpc-go's End came for the attempt before.
		log.retried()
		log.start()
		return
	}
	n := len(log.attempts)
	if n == 0 {
		return
	}
	a := &log.attempts[n-1]
	switch st := st.(type) {
	case *stats.OutHeader:
		a.connect, a.addr = time.Now(), addrPort(st.RemoteAddr)
		if c := ch.connAt(st.LocalAddr); c != nil {
			a.took(c)
		}
	case *stats.InHeader:
		a.firstByte = time.Now()
		if v := st.Header.Get(grpcPodKey); len(v) > 0 {
			a.pod = v[0]
		}
	case *stats.InTrailer:
		a.answered = true
	case *stats.End:
		classifyCall(a, st.Error, ch)
	}
}

// classifyCall ends attempt a, on channel ch, which ended in err (nil for
// OK), with its class: from the socket where the call met one, as HTTP's
// are, and from the status only where the server answered.
func classifyCall(a *attempt, err error, ch *grpcChannel) {
	code := status.Code(err)
	switch {
	case err == nil:
		a.class = OK
	case a.answered && code != codes.DeadlineExceeded && code != codes.Canceled:
		// The server's own status, in its trailers.
		a.class = HTTP5xx
	case code == codes.DeadlineExceeded && a.connect.IsZero():
		a.class = ConnectTimeout
	case code == codes.DeadlineExceeded:
		a.class = ResponseTimeout
	case a.connect.IsZero():
		// Never on a connection: the channel's connect failed, or its
		// connection ended before the call could go out on it.
		a.class = Error
		f, c := ch.failed.Load(), ch.conn.Load()
		switch {
		case c != nil && (f == nil || c.made.After(f.at)) && c.notHTTP2() != nil:
			// Its server answered the connection's HTTP/2 preface with
			// something else: an error, which no wait mends.
			a.addr = addrPort(c.RemoteAddr())
			err = h2Error(c, err)
		case c != nil && (f == nil || c.made.After(f.at)) && c.sockErr() == nil:
			// The channel's latest connection, whole: it refused the
			// call for a GOAWAY it had got (draining).
			a.class, a.addr = Closed, addrPort(c.RemoteAddr())
		case c != nil && (f == nil || c.made.After(f.at)):
			// A connection reset before the call could go out on it: the
			// server never took it, as when its listener closes with the
			// connection in its queue (the kernel had completed the
			// connect): refused, as a connect reset is.
			err := c.sockErr()
			a.class, a.addr = classifyExchange(err, false), addrPort(c.RemoteAddr())
			if errors.Is(err, syscall.ECONNRESET) {
				a.class = Refused
			}
		case f != nil:
			// The channel fails its calls with its last failed connect's
			// error until it connects again: that connect is the call's,
			// tried when it began, which may be before the call was sent.
			a.class, a.addr, a.connect = classifyConnect(f.err), dialedAddr(f.err), f.began
		}
	default:
		a.class = a.broken()
	}
	a.err, a.end = err, time.Now()
}
