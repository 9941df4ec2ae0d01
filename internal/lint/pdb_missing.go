package lint

import "fmt"

var pdbMissing = Rule{
	ID:       "pdb-missing",
	Severity: Info,
	Title:    "A workload of several replicas has no PodDisruptionBudget",
	Why: "A node drain or cluster upgrade may evict all of its pods at the same time, " +
		"leaving its Service without a ready endpoint until they are rescheduled and ready again.",
	Fix: "Add a PodDisruptionBudget with maxUnavailable: 1 whose selector matches the pod template's labels; " +
		"it paces drains without blocking them.",
	check: checkPDBMissing,
}

func checkPDBMissing(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if !w.replicated || len(w.pdbs) > 0 {
			continue
		}
		replicas, what := w.replicaCount(), "replicas"
		if w.hpa != nil {
			replicas, what = w.hpa.maxReplicas, "replicas (the autoscaler's maxReplicas)"
		}
		if replicas < 2 {
			continue
		}
		out = append(out, finding{
			at:      object{w.obj},
			field:   w.templatePath + ".metadata.labels",
			message: fmt.Sprintf("runs up to %d %s and no PodDisruptionBudget selects its pods", replicas, what),
		})
	}
	return out
}
