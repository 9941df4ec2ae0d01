package lint

import (
	"fmt"
	"strings"
)

var preStopExecSleep = Rule{
	ID:       "prestop-exec-sleep",
	Severity: Warning,
	Title:    "The preStop hook runs sleep inside the container",
	Why: "The hook needs a sleep program in the image; distroless and scratch images have none, so the hook fails at once, " +
		"leaving only a FailedPreStopHook event, and the container is stopped with no delay.",
	Fix: "Use lifecycle.preStop.sleep.seconds, which the kubelet runs itself " +
		"(beta and on by default from Kubernetes 1.30, GA in 1.34).",
	check: checkPreStopExecSleep,
}

func checkPreStopExecSleep(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for i, c := range w.template.Spec.Containers {
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
				continue
			}
			argv := c.Lifecycle.PreStop.Exec.Command
			seconds, ok := sleepSeconds(argv)
			if !ok {
				continue
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + ".lifecycle.preStop.exec",
				message: fmt.Sprintf("container %q: preStop runs %q in the container", c.Name, strings.Join(argv, " ")),
				fix:     fmt.Sprintf("Replace the exec with lifecycle.preStop.sleep.seconds: %d, which the kubelet runs itself (Kubernetes 1.30 and later).", seconds),
			})
		}
	}
	return out
}
