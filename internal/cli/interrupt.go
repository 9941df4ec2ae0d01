package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ExitInterrupted is the exit status of a command stopped by SIGINT or
// SIGTERM: 128 + SIGINT, as a shell reports it.
const ExitInterrupted = 128 + int(syscall.SIGINT)

// errInterrupted is returned by a command that stopped because it was
// interrupted.
var errInterrupted = exitStatus(ExitInterrupted)

// interruptible returns a context that ends at the first SIGINT or SIGTERM,
// so that a command stops its clusters cleanly, killing every pod it
// started; a second signal exits the process at once, and the pods die
// with it (their parent-death signal is SIGKILL). stop releases the
// signals; interrupted reports whether one came.
func interruptible(ctx context.Context, errw io.Writer, command string) (_ context.Context, interrupted func() bool, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	got := make(chan struct{})
	go func() {
		select {
		case <-signals:
		case <-done:
			return
		}
		close(got)
		fmt.Fprintf(errw, "\n%s: interrupted: stopping every pod (interrupt again to kill them at once)\n", command)
		cancel()
		select {
		case <-signals:
			fmt.Fprintf(errw, "%s: interrupted again: exiting now\n", command)
			os.Exit(ExitInterrupted)
		case <-done:
		}
	}()
	interrupted = func() bool {
		select {
		case <-got:
			return true
		default:
			return false
		}
	}
	stop = func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
	return ctx, interrupted, stop
}
