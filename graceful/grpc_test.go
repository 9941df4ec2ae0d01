package graceful_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/graceful"
	"github.com/closingtime-dev/closingtime/internal/labpb"
)

// grpc-go's servers are what a Server takes.
var (
	_ graceful.GRPCServer   = (*grpc.Server)(nil)
	_ graceful.HealthServer = (*health.Server)(nil)
)

// lab is a Lab service whose Work takes work, and counts the calls that
// entered it and those it answered.
type lab struct {
	labpb.UnimplementedLabServer
	work              time.Duration
	entered, answered atomic.Int64
	// in receives a value as each call enters, if it has room.
	in chan struct{}
}

func (l *lab) Work(ctx context.Context, _ *labpb.WorkRequest) (*labpb.WorkReply, error) {
	l.entered.Add(1)
	select {
	case l.in <- struct{}{}:
	default:
	}
	select {
	case <-time.After(l.work):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.answered.Add(1)
	return &labpb.WorkReply{}, nil
}

// newGRPC returns a graceful.Server of a gRPC server with l and a health
// service.
func newGRPC(l *lab) *graceful.Server {
	gs := grpc.NewServer()
	labpb.RegisterLabServer(gs, l)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	return &graceful.Server{GRPC: gs, Health: hs}
}

// startGRPC serves s on a loopback port until its health service answers
// SERVING, and returns a client connection to it.
func startGRPC(t *testing.T, s *graceful.Server) (*serving, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sv := &serving{addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		sv.err = s.Serve(ctx, ln)
		close(sv.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-sv.done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	})
	cc := dialGRPC(t, sv.addr)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if healthOf(cc) == healthpb.HealthCheckResponse_SERVING {
			return sv, cc
		}
		if time.Now().After(deadline) {
			t.Fatal("server never became ready")
		}
	}
}

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// healthOf returns the server's overall health, or UNKNOWN if the check
// failed.
func healthOf(cc *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.Status
}

// call makes one Work call on cc, sent into a channel in the background.
func call(cc *grpc.ClientConn) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := labpb.NewLabClient(cc).Work(ctx, &labpb.WorkRequest{})
		done <- err
	}()
	return done
}

// TestGRPCInFlightCallCompletes: a call in flight at SIGTERM is answered,
// readiness fails at once while the pre-stop delay serves on, and Serve
// returns nil once the call is done.
func TestGRPCInFlightCallCompletes(t *testing.T) {
	l := &lab{work: time.Second, in: make(chan struct{}, 1)}
	s := newGRPC(l)
	began := newTermination()
	s.OnTerminate, s.PreStopDelay, s.DrainTimeout = began.hook, 300*time.Millisecond, 10*time.Second
	sv, cc := startGRPC(t, s)

	inFlight := call(cc)
	<-l.in
	terminate(t)
	began.wait(t)
	if got := healthOf(cc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health in the pre-stop delay: %v, want NOT_SERVING", got)
	}
	if err := <-inFlight; err != nil {
		t.Errorf("the call in flight at SIGTERM: %v, want its answer", err)
	}
	if _, err := sv.wait(t, 5*time.Second); err != nil {
		t.Errorf("Serve: %v, want nil after a complete drain", err)
	}
}

// TestGRPCDrainDeadline: a call longer than the drain is cut by Stop at
// the deadline, and Serve says so.
func TestGRPCDrainDeadline(t *testing.T) {
	l := &lab{work: time.Minute, in: make(chan struct{}, 1)}
	s := newGRPC(l)
	s.DrainTimeout = 300 * time.Millisecond
	sv, cc := startGRPC(t, s)

	inFlight := call(cc)
	<-l.in
	terminate(t)
	took, err := sv.wait(t, 5*time.Second)
	if !errors.Is(err, graceful.ErrDrainTimeout) {
		t.Errorf("Serve: %v, want ErrDrainTimeout", err)
	}
	if took > 3*time.Second {
		t.Errorf("Serve returned %v after the signal, past its 300 ms drain", took)
	}
	if err := <-inFlight; status.Code(err) != codes.Unavailable {
		t.Errorf("the call cut at the deadline: %v, want UNAVAILABLE", err)
	}
}

// TestGRPCBusyClientCannotHoldDrain: clients that call without pause, on
// one channel and on new ones, the whole time, neither hold the drain past
// its budget nor lose a call that the server took: every call that entered
// the service was answered, and what failed was refused before it.
func TestGRPCBusyClientCannotHoldDrain(t *testing.T) {
	l := &lab{work: 20 * time.Millisecond}
	s := newGRPC(l)
	s.PreStopDelay, s.DrainTimeout = 300*time.Millisecond, 2*time.Second
	sv, cc := startGRPC(t, s)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, unavailable, other atomic.Int64
	for i := range 8 {
		conn := cc
		if i%2 == 1 {
			conn = dialGRPC(t, sv.addr)
		}
		wg.Go(func() {
			for n := 0; n < 10_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				err := <-call(conn)
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.Unavailable:
					unavailable.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					other.Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	terminate(t)
	took, err := sv.wait(t, 10*time.Second)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Errorf("Serve: %v, want a complete drain", err)
	}
	if took > s.PreStopDelay+s.DrainTimeout+time.Second {
		t.Errorf("Serve returned %v after the signal, past its budget", took)
	}
	if entered, answered := l.entered.Load(), l.answered.Load(); entered != answered || answered != ok.Load() {
		t.Errorf("%d calls entered the service, %d were answered, %d came back OK: want all three equal", entered, answered, ok.Load())
	}
	if other.Load() > 0 {
		t.Errorf("%d calls failed with a code other than UNAVAILABLE", other.Load())
	}
	t.Logf("%d OK, %d UNAVAILABLE once the listener had closed", ok.Load(), unavailable.Load())
}
