package lint

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

var preStopDelayMissing = Rule{
	ID:       "prestop-delay-missing",
	Severity: Error,
	Title:    "A container that a Service sends traffic to stops without a preStop delay",
	Why: "Kubernetes takes a terminating pod out of the Service's endpoints at the same moment it starts stopping it, " +
		"and each node's proxy learns of that later; without a delay the server gets SIGTERM and stops listening " +
		"while new connections still arrive, and they are refused, reset, or, once the pod is gone, left to time out.",
	Fix: "Add lifecycle.preStop.sleep.seconds (Kubernetes 1.30 and later) of a few seconds, longer than the endpoint " +
		"propagation your cluster shows, and keep it within terminationGracePeriodSeconds.",
	check: checkPreStopDelayMissing,
}

func checkPreStopDelayMissing(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for _, i := range w.servingContainers() {
			c := w.template.Spec.Containers[i]
			if !lacksPreStopDelay(w, c) {
				continue
			}
			what := "has no preStop hook"
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
				what = "has a preStop hook that does not wait"
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + ".lifecycle.preStop",
				message: fmt.Sprintf("container %q %s, but %s sends it traffic until every node has seen it terminate", c.Name, what, w.serviceNames()),
			})
		}
	}
	return out
}

// lacksPreStopDelay reports whether prestop-delay-missing reports
// container c of w: a Service sends it traffic, and it has no preStop hook
// or one that does not wait, nor a server that waits on its own (a
// pre-stop delay its flags or env set, such as the graceful library's).
func lacksPreStopDelay(w *workload, c corev1.Container) bool {
	seconds, known := preStopSeconds(c)
	return len(w.services) > 0 && known && seconds == 0 && serverPreStop(c) == 0
}
