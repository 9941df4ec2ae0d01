package lint

import (
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

var pdbBlocksDrain = Rule{
	ID:       "pdb-blocks-drain",
	Severity: Error,
	Title:    "A PodDisruptionBudget can never allow an eviction",
	Why: "The eviction API refuses every eviction of the pods it selects with 429, so kubectl drain and node upgrades " +
		"retry forever and the node cannot be emptied; rollouts and deletes ignore the budget, so it protects nothing there either.",
	Fix:   "Use maxUnavailable: 1 instead, which lets drains go one pod at a time, or run more replicas than minAvailable.",
	check: checkPDBBlocksDrain,
}

func checkPDBBlocksDrain(ix *index) []finding {
	var out []finding
	for _, p := range ix.pdbs {
		spec := p.pdb.Spec
		switch {
		case spec.MaxUnavailable != nil:
			if v := *spec.MaxUnavailable; v.String() == "0" || v.String() == "0%" {
				out = append(out, finding{at: object{p.obj}, field: "spec.maxUnavailable",
					message: fmt.Sprintf("maxUnavailable %s allows no eviction of the pods it selects", v.String())})
			}
		case spec.MinAvailable != nil:
			minAvailable := *spec.MinAvailable
			if keepsAll(minAvailable) {
				out = append(out, finding{at: object{p.obj}, field: "spec.minAvailable",
					message: fmt.Sprintf("minAvailable %s allows no eviction of the pods it selects", minAvailable.String())})
				continue
			}
			// With an autoscaler the replicas change; hpa-pdb-blocks-drain
			// judges the budget at its minReplicas.
			if p.autoscaled() {
				continue
			}
			expected, desc, ok := p.expectedPods(func(w *workload) int32 { return w.replicaCount() })
			if !ok {
				continue
			}
			if blocksEviction(spec, expected) {
				out = append(out, finding{at: object{p.obj}, field: "spec.minAvailable",
					message: fmt.Sprintf("minAvailable %s with %s allows no eviction", minAvailable.String(), desc)})
			}
		}
	}
	return out
}

// keepsAll reports whether minAvailable is a percentage of 100 or more,
// which keeps every pod from eviction however many there are.
func keepsAll(minAvailable intstr.IntOrString) bool {
	if minAvailable.Type != intstr.String {
		return false
	}
	pct, err := intstr.GetScaledValueFromIntOrPercent(&minAvailable, 100, true)
	return err == nil && pct >= 100
}

// autoscaled reports whether an autoscaler sets the replicas of any
// workload the PDB selects.
func (p *pdb) autoscaled() bool {
	for _, w := range p.workloads {
		if w.hpa != nil {
			return true
		}
	}
	return false
}

// expectedPods returns how many pods the PDB selects when each replicated
// workload runs replicas(w) pods (a Pod is one), and describes them for
// messages. ok is false when the PDB selects no workload, or one whose pod
// count the manifest does not tell (a DaemonSet, a Job).
func (p *pdb) expectedPods(replicas func(*workload) int32) (expected int32, desc string, ok bool) {
	var parts []string
	for _, w := range p.workloads {
		var n int32
		switch {
		case w.replicated:
			n = replicas(w)
		case w.templatePath == "":
			n = 1
		default:
			return 0, "", false
		}
		expected += n
		unit := "replicas"
		if n == 1 {
			unit = "replica"
		}
		parts = append(parts, fmt.Sprintf("%d %s of %s", n, unit, w.obj))
	}
	return expected, strings.Join(parts, " and "), len(p.workloads) > 0
}

// blocksEviction reports whether a budget with spec allows no eviction even
// when all expected pods of its workloads are healthy, by the disruption
// controller's arithmetic in package cluster.
func blocksEviction(spec policyv1.PodDisruptionBudgetSpec, expected int32) bool {
	exp, desired, err := cluster.DesiredHealthy(spec, expected, expected)
	return err == nil && cluster.DisruptionsAllowed(exp, exp, desired) == 0
}
