package target

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// defaultSIGTERM sets SIGTERM's disposition to SIG_DFL, so that the kernel
// alone decides what the signal does: nothing to the init process of a PID
// namespace (kernel/signal.c, sig_task_ignored, for a SIGNAL_UNKILLABLE
// task), death with status 143 to any other process.
//
// signal.Reset is not enough: the Go runtime installs its own handler for
// SIGTERM at start-up, and when a program that has not called signal.Notify
// receives it, runtime.dieFromSignal re-raises it and, if the process is
// still alive (as PID 1 is), exits with status 2. So the disposition is set
// with a raw rt_sigaction system call, which the runtime does not see.
func defaultSIGTERM() error {
	// An all-zero kernel struct sigaction is SIG_DFL with no flags and an
	// empty mask on every architecture; eight words are larger than the
	// struct on all of them. The last argument is sizeof(sigset_t), 8
	// except on MIPS, where the kernel answers EINVAL.
	var act [8]uint64
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGTERM),
		uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno != 0 {
		return fmt.Errorf("set SIGTERM to SIG_DFL: rt_sigaction: %w", errno)
	}
	return nil
}

// childAttr returns the process attributes of a wrapper's child: it gets
// SIGKILL when the wrapper exits, so that outside a PID namespace the tree
// dies with its wrapper as it does in a container, where the kernel kills
// the namespace when its init exits.
func childAttr() (*syscall.SysProcAttr, error) {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, nil
}

// childExitCode returns the status a shell reports for a child that exited:
// its exit code, or 128 + the signal that killed it.
func childExitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
