package lint

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var pdbSelectsNothing = Rule{
	ID:       "pdb-selects-nothing",
	Severity: Warning,
	Title:    "A PodDisruptionBudget's selector matches no workload's pods",
	Why: "A budget that selects no pod protects nothing: a node drain evicts the pods it was meant to guard all at once. " +
		"The rule runs only when the budget's directory holds workloads of its namespace.",
	Fix:   "Make spec.selector match the labels of the workload's pod template.",
	check: checkPDBSelectsNothing,
}

func checkPDBSelectsNothing(ix *index) []finding {
	haveWorkloads := make(map[string]bool)
	for _, w := range ix.workloads {
		haveWorkloads[namespace(w.obj)] = true
	}
	var out []finding
	for _, p := range ix.pdbs {
		ns := namespace(p.obj)
		if len(p.workloads) > 0 || !haveWorkloads[ns] {
			continue
		}
		msg := "has no selector, which in policy/v1 selects no pod"
		if p.pdb.Spec.Selector != nil {
			msg = fmt.Sprintf("selector %s matches the pod template of no workload of namespace %s in this directory", metav1.FormatLabelSelector(p.pdb.Spec.Selector), ns)
		}
		out = append(out, finding{at: object{p.obj}, field: "spec.selector", message: msg})
	}
	return out
}
