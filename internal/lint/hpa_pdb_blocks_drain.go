package lint

import "fmt"

var hpaPDBBlocksDrain = Rule{
	ID:       "hpa-pdb-blocks-drain",
	Severity: Error,
	Title:    "At the autoscaler's minReplicas, the PodDisruptionBudget allows no eviction",
	Why: "Whenever the autoscaler has scaled down to minReplicas, the eviction API refuses every eviction of these pods with 429, " +
		"so kubectl drain and node upgrades wait until load raises the replica count.",
	Fix:   "Raise minReplicas above the budget's minAvailable, or give the PodDisruptionBudget maxUnavailable: 1 instead.",
	check: checkHPAPDBBlocksDrain,
}

func checkHPAPDBBlocksDrain(ix *index) []finding {
	var out []finding
	for _, p := range ix.pdbs {
		// maxUnavailable 0 and minAvailable 100% block at any scale:
		// pdb-blocks-drain reports them.
		minAvailable := p.pdb.Spec.MinAvailable
		if p.pdb.Spec.MaxUnavailable != nil || minAvailable == nil || keepsAll(*minAvailable) || !p.autoscaled() {
			continue
		}
		atMin := func(w *workload) int32 {
			if w.hpa != nil {
				return w.hpa.minReplicas
			}
			return w.replicaCount()
		}
		expected, desc, ok := p.expectedPods(atMin)
		if !ok {
			continue
		}
		if !blocksEviction(p.pdb.Spec, expected) {
			continue
		}
		for _, w := range p.workloads {
			if w.hpa == nil {
				continue
			}
			out = append(out, finding{
				at:    object{w.hpa.obj},
				field: "spec.minReplicas",
				message: fmt.Sprintf("minReplicas %d with %s (minAvailable %s) allows no eviction at %s",
					w.hpa.minReplicas, p.obj, minAvailable.String(), desc),
			})
		}
	}
	return out
}
