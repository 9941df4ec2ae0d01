package lint

import "fmt"

var singleReplica = Rule{
	ID:       "single-replica",
	Severity: Warning,
	Title:    "A workload behind a Service runs a single replica",
	Why: "While its only pod is evicted, rescheduled or restarted the Service has no ready endpoint and connections are refused, " +
		"and no PodDisruptionBudget can protect one pod without blocking every node drain.",
	Fix:   "Run at least 2 replicas (spec.replicas, or the autoscaler's minReplicas).",
	check: checkSingleReplica,
}

func checkSingleReplica(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if !w.replicated || len(w.services) == 0 {
			continue
		}
		if h := w.hpa; h != nil {
			if h.minReplicas < 2 {
				out = append(out, finding{
					at:      object{h.obj},
					field:   "spec.minReplicas",
					message: fmt.Sprintf("minReplicas %d lets the autoscaler run %s, which %s sends traffic to, on a single replica", h.minReplicas, w.obj, w.serviceNames()),
					fix:     "Set minReplicas to 2 or more.",
				})
			}
			continue
		}
		if w.replicaCount() < 2 {
			out = append(out, finding{
				at:      object{w.obj},
				field:   "spec.replicas",
				message: fmt.Sprintf("runs %d replica (%s), and %s sends it traffic", w.replicaCount(), w.replicasField(), w.serviceNames()),
				fix:     "Set spec.replicas to 2 or more.",
			})
		}
	}
	return out
}
