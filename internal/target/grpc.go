package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/closingtime-dev/closingtime/graceful"
	"github.com/closingtime-dev/closingtime/internal/labpb"
)

// The metadata keys of the gRPC server's responses, those of the HTTP
// server's headers: the pod that answered, and the call's own id, echoed.
const (
	PodNameKey   = "x-pod-name"
	RequestIDKey = "x-request-id"
)

// lab is the gRPC server's Lab service.
type lab struct {
	labpb.UnimplementedLabServer
	s *server
}

// Work takes a work time drawn from Config.Work, then answers; it gives up
// with the call's own error if the call ends first.
func (l lab) Work(ctx context.Context, _ *labpb.WorkRequest) (*labpb.WorkReply, error) {
	l.s.work.arrive(time.Now())
	d := l.s.cfg.Work.draw()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &labpb.WorkReply{Pod: l.s.cfg.PodName, WorkedMs: float64(d.Microseconds()) / 1000}, nil
}

// newGRPCServer returns the gRPC server of s, with the Lab service and
// the health service, whose overall status is SERVING.
func (s *server) newGRPCServer() (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(s.annotateCall)}
	if s.cfg.MaxConnectionAge > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.cfg.MaxConnectionAge}))
	}
	gs := grpc.NewServer(opts...)
	labpb.RegisterLabServer(gs, lab{s: s})
	hs := health.NewServer()
	// The Lab service by name too, for a probe that names it.
	hs.SetServingStatus(labpb.Lab_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	return gs, hs
}

// annotateCall puts the pod's name and the call's id on every response's
// header metadata, as annotate does on the HTTP server's, and, with
// Config.AccessLog, logs a "request" event when the call returns.
func (s *server) annotateCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	md := metadata.Pairs(PodNameKey, s.cfg.PodName)
	var id string
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if ids := in.Get(RequestIDKey); len(ids) > 0 {
			id = ids[0]
			md.Set(RequestIDKey, id)
		}
	}
	grpc.SetHeader(ctx, md)
	resp, err := handler(ctx, req)
	if s.cfg.AccessLog {
		s.log.Info("request", "id", id, "method", info.FullMethod, "code", status.Code(err).String(),
			"duration_ms", float64(time.Since(start).Microseconds())/1000)
	}
	return resp, err
}

// serveGRPC serves the gRPC server on ln in the configured mode:
// ModeGraceful through graceful.Server (health NOT_SERVING, the pre-stop
// delay, GracefulStop within the drain deadline, then Stop); ModeExit
// stops at SIGTERM at once, every connection closed without a GOAWAY
// (Server.Stop: what a process's exit does to them); ModeIgnore leaves
// SIGTERM to the kernel.
func (s *server) serveGRPC(ctx context.Context, ln net.Listener, sigterm <-chan os.Signal, crash <-chan time.Time) (int, error) {
	gs, hs := s.newGRPCServer()
	if s.cfg.Shutdown == ModeGraceful {
		g := &graceful.Server{
			GRPC:         gs,
			Health:       hs,
			Signals:      []os.Signal{syscall.SIGTERM},
			PreStopDelay: s.cfg.PreStopDelay,
			DrainTimeout: s.cfg.DrainTimeout,
			OnTerminate:  func(os.Signal) { s.onSigterm() },
			OnDrain:      s.onListenerClosed,
		}
		served := make(chan error, 1)
		go func() { served <- g.Serve(context.Background(), ln) }()
		err, by := await(ctx, served, nil, crash)
		if by != notInterrupted {
			gs.Stop()
			<-served
			return s.interrupted(ctx, by)
		}
		return s.drained(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	defer gs.Stop()
	err, by := await(ctx, served, sigterm, crash)
	if by != notInterrupted {
		if by == bySigterm {
			gs.Stop()
		}
		return s.interrupted(ctx, by)
	}
	return 0, fmt.Errorf("serve: %w", err)
}

// drained logs how a graceful drain that ended in err went, and exits
// after it.
func (s *server) drained(err error) (int, error) {
	switch {
	case err == nil:
		s.onDrained("complete")
	case errors.Is(err, graceful.ErrDrainTimeout):
		s.onDrained("deadline")
	case errors.Is(err, graceful.ErrInterrupted):
		s.onDrained("interrupted")
	default:
		return 0, fmt.Errorf("serve: %w", err)
	}
	return s.exit(ExitSIGTERM)
}
