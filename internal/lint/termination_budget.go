package lint

import (
	"fmt"
	"slices"
)

// ExitSlackSeconds is the time the termination budget leaves a server to
// finish its last response and exit after its longest request, in seconds.
const ExitSlackSeconds = 2

var terminationBudget = Rule{
	ID:       "termination-budget",
	Severity: Error,
	Title:    "preStop, the longest request and the exit do not fit in the grace period",
	Why: "terminationGracePeriodSeconds counts from the start of the preStop hook; whatever is still running when it ends " +
		"is killed with SIGKILL, and requests in flight are reset.",
	Fix: "Raise terminationGracePeriodSeconds to at least preStop + the longest request + a few seconds, " +
		"or shorten the preStop delay.",
	check: checkTerminationBudget,
}

func checkTerminationBudget(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		request, declared, err := w.annotationSeconds(MaxRequestSecondsAnnotation)
		if err != nil {
			out = append(out, finding{at: object{w.obj}, field: w.annotationPath(MaxRequestSecondsAnnotation), message: err.Error(),
				fix: "Write the longest request's duration in whole seconds, such as \"10\"."})
			continue
		}
		spec := w.template.Spec
		grace, graceSource := w.grace()
		if grace == 0 {
			continue // termination-grace-zero
		}
		// The pod's grace period covers every container's preStop hook,
		// a native sidecar's too, which run at the same time
		// (pkg/kubelet/kuberuntime kuberuntime_container.go,
		// killContainersWithSyncResult).
		var preStop int64
		container := ""
		for _, c := range slices.Concat(spec.Containers, sidecars(spec)) {
			if s, _ := preStopSeconds(c); s > preStop {
				preStop, container = s, c.Name
			}
		}
		need := preStop + request + ExitSlackSeconds
		if need <= grace {
			continue
		}
		msg := fmt.Sprintf("preStop %d s", preStop)
		if container != "" {
			msg = fmt.Sprintf("preStop %d s (container %q)", preStop, container)
		}
		if declared {
			msg += fmt.Sprintf(" + longest request %d s (%s)", request, MaxRequestSecondsAnnotation)
		}
		msg += fmt.Sprintf(" + %d s to exit = %d s, more than terminationGracePeriodSeconds %d%s", ExitSlackSeconds, need, grace, graceSource)
		out = append(out, finding{
			at:      object{w.obj},
			field:   w.specPath() + ".terminationGracePeriodSeconds",
			message: msg,
			fix:     fmt.Sprintf("Set terminationGracePeriodSeconds to at least %d, or shorten the preStop delay.", need),
		})
	}
	return out
}
