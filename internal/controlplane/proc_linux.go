package controlplane

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes cmd's process get SIGKILL when the process that
// started it exits, so that a test binary that panics or is killed leaves
// no control plane behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
