package grpcretry

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/internal/labpb"
	"github.com/closingtime-dev/closingtime/retry"
)

// The gRPC tests below do not run in parallel: several of them close a
// listener and listen again on its port, or count on nothing listening on
// a port they freed, which a parallel test's listener could take.

// fastReconnect makes a channel connect again 10 to 60 ms after a failed
// connect, rather than grpc-go's 1 s, so that tests where nothing listens
// for a while stay quick.
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
	BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 50 * time.Millisecond,
}})

// lab is a test server's closingtime.lab.v1.Lab. Work counts its calls,
// sends on started (if not nil) as each call begins, and answers with work
// (nil: an empty reply), which gets the call's number, from 1.
type lab struct {
	labpb.UnimplementedLabServer
	calls   atomic.Int32
	started chan struct{}
	work    func(ctx context.Context, n int32) (*labpb.WorkReply, error)
}

func (l *lab) Work(ctx context.Context, _ *labpb.WorkRequest) (*labpb.WorkReply, error) {
	n := l.calls.Add(1)
	if l.started != nil {
		l.started <- struct{}{}
	}
	if l.work == nil {
		return &labpb.WorkReply{Pod: "lab"}, nil
	}
	return l.work(ctx, n)
}

// untilCanceled is a Work that runs until its server stops it.
func untilCanceled(ctx context.Context, _ int32) (*labpb.WorkReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// serveLab serves l on addr ("127.0.0.1:0" for any free port), until the
// test ends, and returns the server and its address.
func serveLab(t *testing.T, addr string, l *lab) (*grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := grpc.NewServer()
	labpb.RegisterLabServer(srv, l)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return srv, lis.Addr().String()
}

// freeAddr returns a loopback address where nothing listens: connects to
// it are refused.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// attemptLog records the attempts that the Interceptor under test makes:
// it is a unary interceptor chained after it, which grpc-go calls once per
// attempt. Each failed attempt's error is also sent on failed, if not nil.
type attemptLog struct {
	failed chan error

	mu     sync.Mutex
	starts []time.Time
	ends   []time.Time
	errs   []error
}

func (a *attemptLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	a.mu.Lock()
	a.starts = append(a.starts, start)
	a.ends = append(a.ends, time.Now())
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	if err != nil && a.failed != nil {
		a.failed <- err
	}
	return err
}

func (a *attemptLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.errs)
}

// dialLab returns a Lab client on a new channel to addr whose calls go
// through ic, then log.
func dialLab(t *testing.T, addr string, ic Interceptor, log *attemptLog, opts ...grpc.DialOption) labpb.LabClient {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(ic.Unary, log.intercept),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return labpb.NewLabClient(cc)
}

// work calls Work in a goroutine, and returns the channel of its result.
func work(ctx context.Context, client labpb.LabClient) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := client.Work(ctx, &labpb.WorkRequest{})
		done <- err
	}()
	return done
}

// isWork reports whether a method is closingtime.lab.v1.Lab/Work.
func isWork(method string) bool { return method == labpb.Lab_Work_FullMethodName }

// TestGRPCNotReachedSignal pins the grpc-go behaviour that notReached
// stands on: grpc.Peer leaves the peer unset for a call that got no
// connection, and fills it for one that reached the server, whether its
// connection broke under it or the server answered UNAVAILABLE.
func TestGRPCNotReachedSignal(t *testing.T) {
	tests := []struct {
		name string
		// setup returns the address to call, and a function to run once
		// the call started on the server (nil: none).
		setup       func(t *testing.T) (addr string, started func())
		wantReached bool
	}{
		{
			name:  "connect refused",
			setup: func(t *testing.T) (string, func()) { return freeAddr(t), nil },
		},
		{
			name: "server stopped under the call",
			setup: func(t *testing.T) (string, func()) {
				l := &lab{started: make(chan struct{}, 1), work: untilCanceled}
				srv, addr := serveLab(t, "127.0.0.1:0", l)
				return addr, func() { <-l.started; srv.Stop() }
			},
			wantReached: true,
		},
		{
			name: "server answered UNAVAILABLE",
			setup: func(t *testing.T) (string, func()) {
				_, addr := serveLab(t, "127.0.0.1:0", &lab{work: func(context.Context, int32) (*labpb.WorkReply, error) {
					return nil, status.Error(codes.Unavailable, "overloaded")
				}})
				return addr, nil
			},
			wantReached: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, started := tt.setup(t)
			if started != nil {
				go started()
			}
			cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var p peer.Peer
			_, err = labpb.NewLabClient(cc).Work(ctx, &labpb.WorkRequest{}, grpc.Peer(&p))
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("call: %v, want UNAVAILABLE", err)
			}
			if reached := !notReached(p); reached != tt.wantReached {
				t.Errorf("peer %v (error %v): reached %t, want %t", p.Addr, err, reached, tt.wantReached)
			}
		})
	}
}

// TestGRPCNotReachedRetried: a call that never reached a server is sent
// again, whatever its method.
func TestGRPCNotReachedRetried(t *testing.T) {
	t.Run("server comes up", func(t *testing.T) {
		addr := freeAddr(t)
		log := &attemptLog{failed: make(chan error, 100)}
		ic := Interceptor{Policy: retry.Policy{Attempts: 20, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Second}}
		client := dialLab(t, addr, ic, log, fastReconnect)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		serveOnceRefused(t, addr, log, work(ctx, client))
		if got := log.count(); got < 2 {
			t.Errorf("%d attempts, want at least 2", got)
		}
	})

	t.Run("nothing listens", func(t *testing.T) {
		log := &attemptLog{}
		ic := Interceptor{Policy: retry.Policy{Attempts: 4, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
		client := dialLab(t, freeAddr(t), ic, log, fastReconnect)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := client.Work(ctx, &labpb.WorkRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want UNAVAILABLE", err)
		}
		if got := log.count(); got != 4 {
			t.Errorf("%d attempts, want Policy.Attempts, 4", got)
		}
		for i, err := range log.errs {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("attempt %d: %v, want UNAVAILABLE", i+1, err)
			}
		}
	})
}

// TestGRPCRetryAwaitsReconnect: after a refused connect, grpc-go fails
// calls at once until its reconnect backoff (1 s by default) ends. The
// retry waits for the channel to connect again rather than spend its
// attempt there: with a 1 ms backoff and two attempts, the call succeeds
// on a server that listens once the first attempt failed.
func TestGRPCRetryAwaitsReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for grpc-go's reconnect backoff, about 1 s")
	}
	addr := freeAddr(t)
	log := &attemptLog{failed: make(chan error, 10)}
	ic := Interceptor{Policy: retry.Policy{Attempts: 2, BaseDelay: time.Millisecond, MaxDelay: 30 * time.Second}}
	client := dialLab(t, addr, ic, log) // grpc-go's default reconnect backoff
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serveOnceRefused(t, addr, log, work(ctx, client))
}

// serveOnceRefused serves a Lab at addr once the first attempt of a call
// has failed UNAVAILABLE (log's failed), and checks that the call, whose
// result done gives, succeeds, run once by that server.
func serveOnceRefused(t *testing.T, addr string, log *attemptLog, done <-chan error) {
	t.Helper()
	if err := <-log.failed; status.Code(err) != codes.Unavailable {
		t.Fatalf("first attempt: %v, want UNAVAILABLE", err)
	}
	l := &lab{}
	serveLab(t, addr, l)
	if err := <-done; err != nil {
		t.Fatalf("call: %v, want success", err)
	}
	if got := l.calls.Load(); got != 1 {
		t.Errorf("server ran the call %d times, want 1", got)
	}
}

// stopUnder starts a call through client on l's server srv at addr, stops
// srv once the call runs there, and serves next on the same address, where
// a retry would land. It returns the call's result.
func stopUnder(t *testing.T, ctx context.Context, client labpb.LabClient, srv *grpc.Server, addr string, l, next *lab) error {
	t.Helper()
	done := work(ctx, client)
	select {
	case <-l.started:
	case err := <-done:
		t.Fatalf("call ended before it ran on the server: %v", err)
	}
	srv.Stop()
	serveLab(t, addr, next)
	return <-done
}

// TestGRPCBrokenAfterSend: a call whose server stopped while it ran may
// have been processed: it is sent again only if its method is idempotent,
// or its sender gave it an idempotency key.
func TestGRPCBrokenAfterSend(t *testing.T) {
	tests := []struct {
		name       string
		idempotent func(string) bool
		md         metadata.MD
		wantOK     bool
	}{
		{name: "not idempotent"},
		{name: "another method idempotent", idempotent: func(m string) bool { return m == "/closingtime.lab.v1.Lab/Other" }},
		{name: "idempotent", idempotent: isWork, wantOK: true},
		{name: "idempotency key", md: metadata.Pairs("idempotency-key", "order-42"), wantOK: true},
		{name: "x-idempotency-key", md: metadata.Pairs("x-idempotency-key", "order-42"), wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := &lab{started: make(chan struct{}, 1), work: untilCanceled}
			srv, addr := serveLab(t, "127.0.0.1:0", first)
			second := &lab{}
			log := &attemptLog{}
			ic := Interceptor{
				Policy:     retry.Policy{Attempts: 20, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Second},
				Idempotent: tt.idempotent,
			}
			client := dialLab(t, addr, ic, log, fastReconnect)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if tt.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tt.md)
			}

			err := stopUnder(t, ctx, client, srv, addr, first, second)

			if got := first.calls.Load(); got != 1 {
				t.Errorf("stopped server ran the call %d times, want 1", got)
			}
			if tt.wantOK {
				if err != nil {
					t.Fatalf("call: %v, want success on the second server", err)
				}
				if got := second.calls.Load(); got != 1 {
					t.Errorf("second server ran the call %d times, want 1", got)
				}
				if got := log.count(); got < 2 {
					t.Errorf("%d attempts, want at least 2", got)
				}
				return
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call: %v, want UNAVAILABLE", err)
			}
			if got := log.count(); got != 1 {
				t.Errorf("%d attempts, want 1: %v", got, log.errs)
			}
			if got := second.calls.Load(); got != 0 {
				t.Errorf("second server ran the call %d times, want 0", got)
			}
		})
	}
}

// TestGRPCServerUnavailable: an UNAVAILABLE status that the server's
// application returned is retried as a broken connection is, for
// idempotent methods only, and its grpc-retry-pushback-ms is honoured.
func TestGRPCServerUnavailable(t *testing.T) {
	tests := []struct {
		name       string
		idempotent func(string) bool
		pushback   string // the first answer's grpc-retry-pushback-ms; "" for none
		maxDelay   time.Duration
		wantCalls  int32
		wantOK     bool
		wantGap    time.Duration // the least wait between the two attempts
	}{
		{name: "not idempotent", wantCalls: 1},
		{name: "idempotent", idempotent: isWork, wantCalls: 2, wantOK: true},
		{name: "pushback", idempotent: isWork, pushback: "300", maxDelay: time.Second, wantCalls: 2, wantOK: true, wantGap: 300 * time.Millisecond},
		{name: "pushback over MaxDelay", idempotent: isWork, pushback: "3000", maxDelay: time.Second, wantCalls: 1},
		{name: "pushback negative", idempotent: isWork, pushback: "-1", wantCalls: 1},
		{name: "pushback malformed", idempotent: isWork, pushback: "soon", wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // no freed port: each has its own server
			l := &lab{work: func(ctx context.Context, n int32) (*labpb.WorkReply, error) {
				if n > 1 {
					return &labpb.WorkReply{Pod: "lab"}, nil
				}
				if tt.pushback != "" {
					grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", tt.pushback))
				}
				return nil, status.Error(codes.Unavailable, "overloaded")
			}}
			_, addr := serveLab(t, "127.0.0.1:0", l)
			log := &attemptLog{}
			ic := Interceptor{
				Policy:     retry.Policy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: max(tt.maxDelay, 10*time.Millisecond)},
				Idempotent: tt.idempotent,
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := dialLab(t, addr, ic, log).Work(ctx, &labpb.WorkRequest{})
			if tt.wantOK && err != nil {
				t.Errorf("call: %v, want success", err)
			}
			if !tt.wantOK && status.Code(err) != codes.Unavailable {
				t.Errorf("call: %v, want UNAVAILABLE", err)
			}
			if got := l.calls.Load(); got != tt.wantCalls {
				t.Errorf("server ran the call %d times, want %d", got, tt.wantCalls)
			}
			if tt.wantGap > 0 && log.count() == 2 {
				if gap := log.starts[1].Sub(log.ends[0]); gap < tt.wantGap {
					t.Errorf("retried %v after the answer, want at least %v", gap, tt.wantGap)
				}
			}
		})
	}
}

// TestGRPCDeadline: no retry starts after the call's deadline, and a call
// whose context is done while it waits to retry returns at once.
func TestGRPCDeadline(t *testing.T) {
	t.Run("retries end at the deadline", func(t *testing.T) {
		log := &attemptLog{}
		ic := Interceptor{Policy: retry.Policy{Attempts: 1000, BaseDelay: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond}}
		client := dialLab(t, freeAddr(t), ic, log, fastReconnect)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		deadline, _ := ctx.Deadline()
		_, err := client.Work(ctx, &labpb.WorkRequest{})
		returned := time.Now()
		if err == nil {
			t.Fatal("call succeeded where nothing listens")
		}
		if n := log.count(); n < 1 || n >= 1000 {
			t.Errorf("%d attempts, want at least 1 and fewer than 1000", n)
		}
		// A retry is decided before its backoff, which a timer ends; a
		// loaded machine wakes timers late, so an attempt may begin a
		// little after the deadline it was meant to beat, never a backoff
		// after it.
		for i, start := range log.starts {
			if late := start.Sub(deadline); late > 20*time.Millisecond {
				t.Errorf("attempt %d started %v after the deadline", i+1, late)
			}
		}
		if late := returned.Sub(deadline); late > 10*time.Second {
			t.Errorf("call returned %v after its deadline", late)
		}
	})

	t.Run("backoff longer than the deadline", func(t *testing.T) {
		log := &attemptLog{}
		ic := Interceptor{Policy: retry.Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}}
		client := dialLab(t, freeAddr(t), ic, log, fastReconnect)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := client.Work(ctx, &labpb.WorkRequest{})
		if ctx.Err() != nil {
			t.Fatalf("call returned after its deadline (%v); it should not have waited for a retry that could not start before it", err)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("call: %v, want the attempt's UNAVAILABLE", err)
		}
		if got := log.count(); got != 1 {
			t.Errorf("%d attempts, want 1", got)
		}
	})

	t.Run("canceled while waiting", func(t *testing.T) {
		log := &attemptLog{failed: make(chan error, 10)}
		ic := Interceptor{Policy: retry.Policy{BaseDelay: time.Hour, MaxDelay: time.Hour}}
		client := dialLab(t, freeAddr(t), ic, log, fastReconnect)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := work(ctx, client)
		<-log.failed
		cancel()
		select {
		case err := <-done:
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call: %v, want the attempt's UNAVAILABLE", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("call still waiting 30 s after its context was canceled")
		}
		if got := log.count(); got != 1 {
			t.Errorf("%d attempts, want 1", got)
		}
	})
}

// TestGRPCServiceConfigPolicyResends pins what the package documentation
// says of grpc-go's own retryPolicy: with UNAVAILABLE among its
// retryableStatusCodes, it sends again a call that the server was
// processing when its connection broke, as it knows no idempotency.
func TestGRPCServiceConfigPolicyResends(t *testing.T) {
	first := &lab{started: make(chan struct{}, 1), work: untilCanceled}
	srv, addr := serveLab(t, "127.0.0.1:0", first)
	second := &lab{}
	const serviceConfig = `{"methodConfig": [{"name": [{"service": "closingtime.lab.v1.Lab"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.05s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig), fastReconnect)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	err = stopUnder(t, ctx, labpb.NewLabClient(cc), srv, addr, first, second)

	if first.calls.Load() != 1 || second.calls.Load() != 1 {
		t.Errorf("grpc-go's retryPolicy: the servers ran the call %d and %d times (error %v), want 1 and 1",
			first.calls.Load(), second.calls.Load(), err)
	}
}

func TestGRPCIdempotent(t *testing.T) {
	tests := []struct {
		name       string
		idempotent func(string) bool
		md         metadata.MD
		want       bool
	}{
		{name: "zero", want: false},
		{name: "method", idempotent: isWork, want: true},
		{name: "other method", idempotent: func(string) bool { return false }, want: false},
		{name: "idempotency-key", md: metadata.Pairs("Idempotency-Key", "k"), want: true},
		{name: "x-idempotency-key", md: metadata.Pairs("x-idempotency-key", "k"), want: true},
		{name: "empty key", md: metadata.Pairs("idempotency-key", ""), want: false},
		{name: "other metadata", md: metadata.Pairs("x-request-id", "k"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tt.md)
			}
			if got := (Interceptor{Idempotent: tt.idempotent}).idempotent(ctx, labpb.Lab_Work_FullMethodName); got != tt.want {
				t.Errorf("idempotent = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestPushback(t *testing.T) {
	tests := []struct {
		name    string
		trailer metadata.MD
		want    time.Duration
		wantOK  bool
	}{
		{name: "none", wantOK: true},
		{name: "zero", trailer: metadata.Pairs("grpc-retry-pushback-ms", "0"), wantOK: true},
		{name: "wait", trailer: metadata.Pairs("grpc-retry-pushback-ms", "250"), want: 250 * time.Millisecond, wantOK: true},
		{name: "negative", trailer: metadata.Pairs("grpc-retry-pushback-ms", "-1")},
		{name: "malformed", trailer: metadata.Pairs("grpc-retry-pushback-ms", "1s")},
		{name: "two values", trailer: metadata.Pairs("grpc-retry-pushback-ms", "1", "grpc-retry-pushback-ms", "2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pushback(tt.trailer)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("pushback = %v, %t; want %v, %t", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
