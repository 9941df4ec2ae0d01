package lint

import (
	"fmt"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

var sidecarPreStopSleep = Rule{
	ID:       "sidecar-prestop-sleep",
	Severity: Warning,
	Title:    "A native sidecar's preStop sleeps longer than the app takes to stop, as if it waited for the app",
	Why: "The kubelet runs every preStop hook of a pod at once, a sidecar's too: only the sidecar's stop signal waits, " +
		"until the app containers have exited. A longer sleep in the sidecar's hook does not make it outlive the app " +
		"(the kubelet already sees to that); it keeps the pod terminating after its app has gone, and what it sleeps past " +
		"the app's exit is taken from the time the sidecar has left to exit, down to 2 s.",
	Fix:   "Remove the sidecar's preStop sleep, or make it no longer than the app's preStop and drain.",
	check: checkSidecarPreStopSleep,
}

func checkSidecarPreStopSleep(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		spec := w.template.Spec
		// How long the app containers take to stop: their preStop hooks
		// and, as far as their flags say, their servers' drains.
		var app time.Duration
		for _, c := range spec.Containers {
			s, known := preStopSeconds(c)
			if !known {
				app = -1 // an httpGet or a command: as long as it takes
				break
			}
			app = max(app, time.Duration(s)*time.Second+serverStop(c))
		}
		if app < 0 {
			continue
		}
		for i, c := range spec.InitContainers {
			if !cluster.IsSidecar(&c) {
				continue
			}
			s, known := preStopSeconds(c)
			if !known || time.Duration(s)*time.Second <= app {
				continue
			}
			out = append(out, finding{
				at:    object{w.obj},
				field: fmt.Sprintf("%s.initContainers[%d].lifecycle.preStop", w.specPath(), i),
				message: fmt.Sprintf("sidecar %q sleeps %d s in its preStop hook, longer than the app containers take to stop "+
					"(%g s of preStop and drain): its hook starts with theirs, not after them", c.Name, s, app.Seconds()),
			})
		}
	}
	return out
}
