package lint

import "fmt"

var preStopDelayMissing = Rule{
	ID:       "prestop-delay-missing",
	Severity: Error,
	Title:    "A container that a Service sends traffic to stops without a preStop delay",
	Why: "Kubernetes takes a terminating pod out of the Service's endpoints at the same moment it starts stopping it, " +
		"and each node's proxy learns of that later; without a delay the server gets SIGTERM and stops listening " +
		"while new connections still arrive, and they are refused or reset.",
	Fix: "Add lifecycle.preStop.sleep.seconds (Kubernetes 1.30 and later) of a few seconds, longer than the endpoint " +
		"propagation your cluster shows, and keep it within terminationGracePeriodSeconds.",
	check: checkPreStopDelayMissing,
}

func checkPreStopDelayMissing(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if len(w.services) == 0 {
			continue
		}
		for _, i := range w.servingContainers() {
			c := w.template.Spec.Containers[i]
			seconds, known := preStopSeconds(c)
			if !known || seconds > 0 {
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
