package lint

var terminationGraceZero = Rule{
	ID:       "termination-grace-zero",
	Severity: Error,
	Title:    "terminationGracePeriodSeconds is 0",
	Why: "The pod gets no time to stop: the API removes it at once, the preStop hook is cut short, " +
		"and the kubelet sends SIGKILL about two seconds after the stop signal, resetting every request in flight.",
	Fix:   "Remove terminationGracePeriodSeconds (the default is 30 s) or set it to preStop + the longest request + a few seconds.",
	check: checkTerminationGraceZero,
}

func checkTerminationGraceZero(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if g := w.template.Spec.TerminationGracePeriodSeconds; g != nil && *g == 0 {
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.specPath() + ".terminationGracePeriodSeconds",
				message: "terminationGracePeriodSeconds is 0",
			})
		}
	}
	return out
}
