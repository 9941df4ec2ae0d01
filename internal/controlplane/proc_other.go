//go:build !linux

package controlplane

import "os/exec"

// dieWithParent does nothing: only Linux can tie a process's life to its
// parent's. Stop must end the control plane.
func dieWithParent(cmd *exec.Cmd) {}
