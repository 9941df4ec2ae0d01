//go:build !linux

package target

import (
	"errors"
	"os"
	"runtime"
	"syscall"
)

// errPlatform is the error of the modes that need Linux: leaving SIGTERM
// to the kernel past the Go runtime's handler, and killing a wrapper's child
// with its parent.
var errPlatform = errors.New("not supported on " + runtime.GOOS)

func defaultSIGTERM() error { return errPlatform }

func childAttr() (*syscall.SysProcAttr, error) { return nil, errPlatform }

func childExitCode(ps *os.ProcessState) int { return ps.ExitCode() }
