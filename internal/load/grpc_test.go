package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"golang.org/x/net/http2"

	"github.com/closingtime-dev/closingtime/internal/labpb"
)

// TestGRPCServeExit calls `closingtime serve --grpc --shutdown exit` from
// both clients and stops it with SIGTERM with calls in flight: see
// serveExitCuts.
func TestGRPCServeExit(t *testing.T) {
	serveExitCuts(t, "grpc://%s", "--grpc")
}

// serveExitCuts sends requests to `closingtime serve --shutdown exit`,
// with args, at the target that format makes of its address, from both
// clients, and stops it with SIGTERM with requests in flight: those
// before are answered by the pod and logged under their ids; those in
// flight are cut (closed or reset: the server had them, and its
// connections closed under them), and those after are refused. The
// keep-alive client carries its requests over its connections, the
// new-conn client each on its own.
func serveExitCuts(t *testing.T, format string, args ...string) {
	if testing.Short() {
		t.Skip("builds closingtime and runs it for seconds")
	}
	cmd, address, logs := startServe(t, append(args, "--work", "200ms", "--pod-name", "pod-x", "--shutdown", "exit", "--access-log")...)
	var errs []string
	reused := map[Kind]int{}
	report := callThroughSIGTERM(t, cmd, fmt.Sprintf(format, address), func(r Result) {
		if r.Class == Error || r.Class == HTTP5xx {
			errs = append(errs, fmt.Sprintf("%s: %v", r.Class, r.Err))
		}
		if r.Class == OK && r.ConnRequests > 0 {
			reused[r.Client]++
		}
	})
	served := make(map[string]bool)
	for _, e := range logs() {
		if e["event"] == "request" && (e["code"] == "OK" || e["status"] == 200.0) {
			served[e["id"].(string)] = true
		}
	}
	var ok int64
	for _, c := range report.Clients {
		if c.Totals[OK] == 0 || c.Totals[Closed]+c.Totals[Reset] == 0 || c.Totals[Refused] == 0 {
			t.Errorf("%s: totals %s, want requests answered before SIGTERM, cut at it, and refused after", c.Kind, formatCounts(&c.Totals))
		}
		if c.Pods["pod-x"] != c.Totals[OK] {
			t.Errorf("%s: pods %v, want every OK request answered by pod-x (%d)", c.Kind, c.Pods, c.Totals[OK])
		}
		if n := c.Totals[Error] + c.Totals[HTTP5xx]; n > 0 {
			t.Errorf("%s: %d requests of no socket class: totals %s: %q", c.Kind, n, formatCounts(&c.Totals), errs)
		}
		ok += c.Totals[OK]
	}
	if reused[NewConn] != 0 || reused[KeepAlive] == 0 {
		t.Errorf("answered on a reused connection: %d new-conn, %d keep-alive; want none and some", reused[NewConn], reused[KeepAlive])
	}
	// A request whose answer the exit cut after the server had logged it
	// is the pod's OK and the client's failure.
	if int64(len(served)) < ok {
		t.Errorf("the pod logged %d OK requests, fewer than the %d the clients saw", len(served), ok)
	}
}

// TestGRPCServeGraceful: a graceful server's GracefulStop lets every call
// it took finish: the clients see no call cut, only, once its listener
// has closed, refused connects.
func TestGRPCServeGraceful(t *testing.T) {
	if testing.Short() {
		t.Skip("builds closingtime and runs it for seconds")
	}
	cmd, address, _ := startServe(t, "--grpc", "--work", "300ms", "--shutdown", "graceful", "--drain-timeout", "10s")
	var failures []string
	report := callThroughSIGTERM(t, cmd, "grpc://"+address, func(r Result) {
		if r.Class.Failed() && r.Class != Refused {
			failures = append(failures, fmt.Sprintf("%s: %v", r.Class, r.Err))
		}
	})
	for _, c := range report.Clients {
		if c.Totals[OK] == 0 || c.Totals.Failed() != c.Totals[Refused] {
			t.Errorf("%s: totals %s, want calls answered, and no failure but refused connects after the drain; the others: %q", c.Kind, formatCounts(&c.Totals), failures)
		}
	}
}

// callThroughSIGTERM sends requests to target, the server of cmd, from
// both clients for 2 s, 50 a second each, and sends cmd SIGTERM after 1 s.
func callThroughSIGTERM(t *testing.T, cmd *exec.Cmd, target string, onResult func(Result)) *Report {
	t.Helper()
	g, err := New(Config{
		URL:      target,
		Clients:  []Client{{Kind: NewConn, Rate: 50}, {Kind: KeepAlive, Rate: 50, Connections: 2}},
		Duration: 2 * time.Second,
		OnResult: onResult,
	})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, func() { cmd.Process.Signal(syscall.SIGTERM) })
	report, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// TestGRPCErrorStatus: a call that the server answers with an error
// status (here, a server without the Lab service: Unimplemented) is
// http5xx, every one, from either client.
func TestGRPCErrorStatus(t *testing.T) {
	report := callBoth(t, grpc.NewServer(), "")
	for _, c := range report.Clients {
		if c.Totals[HTTP5xx] != c.Totals.Total() || c.Totals.Total() == 0 {
			t.Errorf("%s: totals %s, want every call http5xx", c.Kind, formatCounts(&c.Totals))
		}
	}
}

// callBoth serves gs on a port of its own and calls method (the lab's
// Work if empty) there for a second, from a new-conn and a keep-alive
// client, 100 calls a second each.
func callBoth(t *testing.T, gs *grpc.Server, method string) *Report {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	g, err := New(Config{
		URL:      "grpc://" + ln.Addr().String() + method,
		Clients:  []Client{{Kind: NewConn, Rate: 100}, {Kind: KeepAlive, Rate: 100, Connections: 2}},
		Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	report, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// TestGRPCUserMethod calls a method of a service that is not the lab's,
// as a user's server has: the standard health service's Check, with the
// empty request, which the server decodes as a whole message (every field
// absent). Every call is OK, and the pods come from the response header.
func TestGRPCUserMethod(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{} // by the request's service field
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		served[req.(*healthpb.HealthCheckRequest).GetService()]++
		mu.Unlock()
		grpc.SetHeader(ctx, metadata.Pairs(grpcPodKey, "shop-1"))
		return handler(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	const method = "/grpc.health.v1.Health/Check"
	report := callBoth(t, gs, method)
	var calls int64
	for _, c := range report.Clients {
		if c.Totals[OK] != c.Totals.Total() || c.Totals.Total() == 0 {
			t.Errorf("%s: totals %s, want every call OK", c.Kind, formatCounts(&c.Totals))
		}
		if c.Pods["shop-1"] != c.Totals[OK] {
			t.Errorf("%s: pods %v, want every call answered by shop-1", c.Kind, c.Pods)
		}
		calls += c.Totals.Total()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 1 || int64(served[""]) != calls {
		t.Errorf("the server took requests for services %v, want %d for the empty name", served, calls)
	}
}

// TestClassifyCallChannelEvidence: a call that never got on a connection
// takes its class from the channel's latest evidence: a failed connect
// newer than its last connection; a connection reset before the call, as
// refused; a whole connection (which refused the call as it drained), as
// closed, however old an earlier failed connect.
func TestClassifyCallChannelEvidence(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "unavailable")
	long := time.Now().Add(-5 * time.Minute)
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 244, 1, 4), Port: 50051}, Err: syscall.ECONNREFUSED}
	local, remote := net.Pipe()
	defer local.Close()
	defer remote.Close()
	for _, tt := range []struct {
		name    string
		failed  *dialFailure
		conn    *sharedConn
		connErr error
		want    Class
	}{
		{name: "a failed connect, no connection since", failed: &dialFailure{err: refused, began: time.Now().Add(-time.Second), at: time.Now()}, want: Refused},
		{name: "an old failed connect, a whole connection since", failed: &dialFailure{err: refused, at: long}, conn: &sharedConn{Conn: local, made: time.Now()}, want: Closed},
		{name: "a connection reset before the call", conn: &sharedConn{Conn: local, made: time.Now()}, connErr: syscall.ECONNRESET, want: Refused},
		{name: "nothing known", want: Error},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch := &grpcChannel{}
			if tt.failed != nil {
				ch.failed.Store(tt.failed)
			}
			if tt.conn != nil {
				if tt.connErr != nil {
					tt.conn.err.Store(&tt.connErr)
				}
				ch.conn.Store(tt.conn)
			}
			var a attempt
			classifyCall(&a, unavailable, ch)
			if a.class != tt.want {
				t.Errorf("class %s, want %s", a.class, tt.want)
			}
			// The call's connect is the failed one's, tried when it began.
			if f := tt.failed; f != nil && tt.conn == nil && !a.connect.Equal(f.began) {
				t.Errorf("connect at %v, want the failed connect's start, %v", a.connect, f.began)
			}
		})
	}
}

// TestGRPCTransparentRetryAbsorbed: the first connection of a keep-alive
// channel says GOAWAY, last stream 0, to the call's stream, which it never
// processed; grpc-go retries the call transparently on a new connection,
// to the real server, which answers. The call is OK, its first attempt
// closed: absorbed, counted, not hidden.
func TestGRPCTransparentRetryAbsorbed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refuser := &refuseFirst{Listener: ln, refused: make(chan uint32, 1)}
	gs := grpc.NewServer()
	labpb.RegisterLabServer(gs, benchLab{})
	go gs.Serve(refuser)
	t.Cleanup(gs.Stop)

	s := newGRPCSender((&net.Dialer{}).DialContext, ln.Addr().String(), labpb.Lab_Work_FullMethodName, nil, 5*time.Second, 5*time.Second, 1, Limits{})
	defer s.close()
	var log attemptLog
	start := time.Now()
	err = s.send("retried-id", &log, false)
	if err != nil {
		t.Fatalf("call: %v, want OK after a transparent retry", err)
	}
	select {
	case id := <-refuser.refused:
		if id == 0 {
			t.Fatal("the first connection saw no stream")
		}
	default:
		t.Fatal("the first connection refused nothing")
	}
	r := newResult(KeepAlive, "retried-id", start, start, log.attempts, err)
	if r.Attempts != 2 || !r.Absorbed() || r.FirstClass != Closed || r.Pod != "bench" {
		t.Errorf("result: %d attempts, class %s, first %s, pod %q; want 2 attempts, the first closed, the last OK from bench",
			r.Attempts, r.Class, r.FirstClass, r.Pod)
	}
	if r.FirstFailure == nil || !errors.Is(r.FirstFailure.Err, ErrTransparentRetry) {
		t.Errorf("first failure %+v, want the transparent retry's", r.FirstFailure)
	}
}

// refuseFirst is a listener whose first connection never reaches the gRPC
// server: it speaks HTTP/2 through x/net's framer, answers the first
// stream's headers with GOAWAY, last stream 0 (the stream was not
// processed), and closes. The stream's id goes to refused. Later
// connections are the server's.
type refuseFirst struct {
	net.Listener
	once    sync.Once
	refused chan uint32
}

func (l *refuseFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		first := false
		l.once.Do(func() { first = true })
		if !first {
			return c, nil
		}
		go l.refuse(c)
	}
}

func (l *refuseFirst) refuse(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		l.refused <- 0
		return
	}
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			l.refused <- 0
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			l.refused <- f.StreamID
			// The client closes the connection once its streams are
			// gone; reading on lets it.
			io.Copy(io.Discard, c)
			return
		}
	}
}

// TestWaitServingUnimplemented: a server without the URL's method answers
// Unimplemented, which no wait mends: WaitServing gives up at once and
// says so. An HTTP/2 proxy's 404, which grpc-go makes Unimplemented too,
// may be a route not set up yet: WaitServing waits on.
func TestWaitServingUnimplemented(t *testing.T) {
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveH2(t, proxy, false, http.NotFound)
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	if err := WaitServing(short, Config{URL: "grpc://" + proxy.Addr().String()}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitServing on a 404: %v, want it to wait to its end", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = WaitServing(ctx, Config{URL: "grpc://" + ln.Addr().String() + "/shop.v1.Shop/Get"}, nil)
	if status.Code(err) != codes.Unimplemented || ctx.Err() != nil || !strings.Contains(err.Error(), "/shop.v1.Shop/Get: the server answers shop.v1.Shop/Get, called with the empty request, Unimplemented, which no wait mends") {
		t.Errorf("WaitServing = %v (ctx %v), want at once the server's Unimplemented", err, ctx.Err())
	}
}

// TestGRPCNotHTTP2: a gRPC call to a server that answers in HTTP/1.1 is an
// error that quotes the server's first bytes, from either client, and
// WaitServing gives up on it at once.
func TestGRPCNotHTTP2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveH2(t, ln, true, podHandler)
	for _, connections := range []int{0, 1} {
		s := newGRPCSender((&net.Dialer{}).DialContext, ln.Addr().String(), labpb.Lab_Work_FullMethodName, nil, time.Second, time.Second, connections, Limits{})
		var log attemptLog
		err := s.send("id", &log, connections == 0)
		s.close()
		if a := log.attempts[len(log.attempts)-1]; a.class != Error || !errors.Is(err, ErrNotH2C) || !strings.Contains(err.Error(), `its first bytes were "HTTP/1.1 `) {
			t.Errorf("%d connections: class %s, error %v; want an error that quotes the server's HTTP/1.1", connections, a.class, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := WaitServing(ctx, Config{URL: "grpc://" + ln.Addr().String()}, nil); !errors.Is(err, ErrNotH2C) || ctx.Err() != nil {
		t.Errorf("WaitServing: %v; want ErrNotH2C at once", err)
	}
}
