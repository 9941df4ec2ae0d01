package lint

import "fmt"

var readinessProbeMissing = Rule{
	ID:       "readiness-probe-missing",
	Severity: Error,
	Title:    "A container that a Service sends traffic to has no readiness probe",
	Why: "Without a readiness probe a new pod counts as ready as soon as its container starts, before the server listens, " +
		"so the rollout removes old pods while connections to the new ones are refused.",
	Fix: "Add a readinessProbe that succeeds only once the server accepts requests, " +
		"such as an httpGet on the port the Service targets.",
	check: checkReadinessProbeMissing,
}

func checkReadinessProbeMissing(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if len(w.services) == 0 {
			continue
		}
		for _, i := range w.servingContainers() {
			c := w.template.Spec.Containers[i]
			if c.ReadinessProbe != nil {
				continue
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + ".readinessProbe",
				message: fmt.Sprintf("container %q has no readinessProbe, but %s sends it traffic", c.Name, w.serviceNames()),
			})
		}
	}
	return out
}
