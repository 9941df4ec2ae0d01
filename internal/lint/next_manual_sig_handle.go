package lint

import "fmt"

var nextManualSigHandle = Rule{
	ID:       "next-manual-sig-handle",
	Severity: Warning,
	Title:    "NEXT_MANUAL_SIG_HANDLE turns off Next.js's own SIGTERM handling",
	Why: "With the variable set to any value Next.js installs no SIGTERM handler. Unless the application installs one, " +
		"a Next.js server that is the container's first process ignores SIGTERM and is killed with SIGKILL when the grace period ends, " +
		"and one that is not dies at once; either way requests in flight are reset.",
	Fix: "Remove NEXT_MANUAL_SIG_HANDLE: Next.js's default handler already finishes requests in flight on SIGTERM. " +
		"Set it only together with a handler of your own that does.",
	check: checkNextManualSigHandle,
}

func checkNextManualSigHandle(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for i, c := range w.template.Spec.Containers {
			for j, e := range c.Env {
				// Next.js tests the variable for any value, so even
				// "false" or "0" turns its handlers off.
				if e.Name != "NEXT_MANUAL_SIG_HANDLE" || (e.Value == "" && e.ValueFrom == nil) {
					continue
				}
				out = append(out, finding{
					at:      object{w.obj},
					field:   fmt.Sprintf("%s.env[%d]", w.containerPath(i), j),
					message: fmt.Sprintf("container %q sets NEXT_MANUAL_SIG_HANDLE", c.Name),
				})
			}
		}
	}
	return out
}
