package target_test

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/internal/labpb"
	"github.com/closingtime-dev/closingtime/internal/target"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// The tests in this file run `closingtime serve --grpc` as a real process
// and call it with grpc-go.

// dialGRPC returns a new channel to addr, which counts its connections
// in dials, if not nil.
func dialGRPC(t *testing.T, addr string, dials *atomic.Int64) *grpc.ClientConn {
	t.Helper()
	var d net.Dialer
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// work calls Work on cc in the background, with id as its x-request-id,
// and sends its error and the pod its header named.
func work(cc *grpc.ClientConn, id string) <-chan callResult {
	done := make(chan callResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testbinary.WaitLimit)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, target.RequestIDKey, id)
		var header metadata.MD
		_, err := labpb.NewLabClient(cc).Work(ctx, &labpb.WorkRequest{}, grpc.Header(&header))
		r := callResult{err: err}
		if v := header.Get(target.PodNameKey); len(v) > 0 {
			r.pod = v[0]
		}
		if v := header.Get(target.RequestIDKey); len(v) > 0 {
			r.id = v[0]
		}
		done <- r
	}()
	return done
}

type callResult struct {
	err     error
	pod, id string
}

func healthOf(t *testing.T, cc *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbinary.WaitLimit)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return resp.Status
}

// TestGRPCGracefulStop: in graceful mode a call in flight at SIGTERM, on
// its own new channel, is answered, the health service says NOT_SERVING
// through the pre-stop delay, and the server exits once the call is done.
func TestGRPCGracefulStop(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--grpc", "--listen", "127.0.0.1:0", "--shutdown", "graceful", "--work", "3s",
		"--pre-stop-delay", "1s", "--drain-timeout", "10s", "--pod-name", "pod-a", "--access-log")
	addr := p.Addr(t)
	cc := dialGRPC(t, addr, nil)
	if got := healthOf(t, cc); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before SIGTERM: %v, want SERVING", got)
	}
	inFlight := work(dialGRPC(t, addr, nil), "in-flight")
	time.Sleep(settle)
	p.Signal(t, syscall.SIGTERM)
	p.Log.Wait(t, "sigterm")
	if got := healthOf(t, cc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health in the pre-stop delay: %v, want NOT_SERVING", got)
	}
	r := <-inFlight
	if r.err != nil || r.pod != "pod-a" || r.id != "in-flight" {
		t.Errorf("the call in flight at SIGTERM: %v from %q (id %q), want its answer from pod-a, its id echoed", r.err, r.pod, r.id)
	}
	checkExit(t, p, "exiting", target.ExitSIGTERM)
	if d := p.Log.Wait(t, "drained"); d["outcome"] != "complete" {
		t.Errorf("drained = %v, want complete", d)
	}
	var call testbinary.Event
	for _, e := range p.Log.Named("request") {
		if e["method"] == "/closingtime.lab.v1.Lab/Work" {
			call = e
		}
	}
	if call["id"] != "in-flight" || call["code"] != "OK" {
		t.Errorf("request event of the Work call %v, want its id, OK", call)
	}
}

// TestGRPCExitStops: in exit mode SIGTERM stops the server at once, and the
// call in flight fails UNAVAILABLE.
func TestGRPCExitStops(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--grpc", "--listen", "127.0.0.1:0", "--shutdown", "exit", "--work", "3s")
	inFlight := work(dialGRPC(t, p.Addr(t), nil), "cut")
	time.Sleep(settle)
	p.Signal(t, syscall.SIGTERM)
	if r := <-inFlight; status.Code(r.err) != codes.Unavailable {
		t.Errorf("the call in flight at SIGTERM: %v, want UNAVAILABLE", r.err)
	}
	checkExit(t, p, "exiting", target.ExitSIGTERM)
	checkNames(t, p, "started", "listening", "sigterm", "exiting")
}

// TestGRPCMaxConnectionAge: a long-lived channel connects again once the
// server's maximum connection age passes, and loses no call to it.
func TestGRPCMaxConnectionAge(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--grpc", "--listen", "127.0.0.1:0", "--work", "10ms", "--max-connection-age", "500ms")
	var dials atomic.Int64
	cc := dialGRPC(t, p.Addr(t), &dials)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if r := <-work(cc, "aged"); r.err != nil {
			t.Fatalf("call: %v, want every one answered across the connection's end", r.err)
		}
	}
	if n := dials.Load(); n < 2 {
		t.Errorf("%d connections in 2 s with a 500 ms maximum age, want several", n)
	}
}

// TestGRPCRefusesHostage: hostage is HTTP/1's way, not a gRPC mode.
func TestGRPCRefusesHostage(t *testing.T) {
	t.Parallel()
	p := serve(t, nil, nil, "--grpc", "--listen", "127.0.0.1:0", "--shutdown", "hostage")
	if ws := p.Wait(t); ws.ExitStatus() != 2 {
		t.Errorf("exit status %d, want 2 for an invalid configuration", ws.ExitStatus())
	}
}
