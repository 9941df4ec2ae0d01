package graceful

import (
	"context"
	"net"
	"os"
	"time"
)

// serveGRPC serves GRPC on ln until a signal on signals or the end of ctx,
// then runs its termination sequence: readiness fails (Health's services
// NOT_SERVING, ReadyHandler 503), the pre-stop delay serves on, the
// listener closes (OnDrain), and GracefulStop sends every connection
// GOAWAY and waits for the calls in flight, for at most drain; past it,
// or at a second signal, Stop closes everything.
func (s *Server) serveGRPC(ctx context.Context, ln net.Listener, signals <-chan os.Signal, drain time.Duration) error {
	served := make(chan struct{})
	var serveErr error
	s.phase.Store(phaseServing)
	go func() {
		defer close(served)
		serveErr = s.GRPC.Serve(ln)
	}()
	var sig os.Signal
	select {
	case <-served:
		s.phase.Store(phaseStopped)
		s.GRPC.Stop()
		return serveErr
	case sig = <-signals:
	case <-ctx.Done():
	}
	err := s.terminateGRPC(sig, signals, ln, drain)
	s.phase.Store(phaseStopped)
	<-served
	return err
}

// terminateGRPC runs serveGRPC's termination sequence after its first
// trigger, sig.
func (s *Server) terminateGRPC(sig os.Signal, signals <-chan os.Signal, ln net.Listener, drain time.Duration) error {
	// Readiness fails first, as the HTTP path's phase does: whoever
	// OnTerminate tells finds it failing.
	s.phase.Store(phaseStopping)
	if s.Health != nil {
		s.Health.Shutdown()
	}
	if s.OnTerminate != nil {
		s.OnTerminate(sig)
	}
	if s.PreStopDelay > 0 {
		t := time.NewTimer(s.PreStopDelay)
		select {
		case <-t.C:
		case <-signals:
			t.Stop()
			s.GRPC.Stop()
			return ErrInterrupted
		}
	}
	s.phase.Store(phaseDraining)
	// The listener closes here, so that OnDrain follows it; GracefulStop
	// closes it again, harmlessly, and Serve's accept error is ignored.
	ln.Close()
	if s.OnDrain != nil {
		s.OnDrain()
	}
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.GRPC.GracefulStop()
	}()
	var err error
	select {
	case <-stopped:
		return nil
	case <-signals:
		err = ErrInterrupted
	case <-deadline.C:
		err = ErrDrainTimeout
	}
	// Stop ends the calls still running and makes GracefulStop return.
	s.GRPC.Stop()
	<-stopped
	return err
}
