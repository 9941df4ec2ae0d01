package lint

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

var livenessWithoutStartupProbe = Rule{
	ID:       "liveness-without-startup-probe",
	Severity: Warning,
	Title:    "The liveness probe can restart a container before the start-up it declares is over",
	Why: "A container that is still starting fails its liveness probe, is restarted before it ever serves, " +
		"and enters CrashLoopBackOff instead of becoming ready.",
	Fix: "Add a startupProbe whose failureThreshold × periodSeconds covers the start-up; " +
		"liveness checks begin only once it has succeeded.",
	check: checkLivenessWithoutStartupProbe,
}

func checkLivenessWithoutStartupProbe(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		declared, hasAnnotation, err := w.annotationSeconds(StartupSecondsAnnotation)
		if err != nil {
			out = append(out, finding{at: object{w.obj}, field: w.annotationPath(StartupSecondsAnnotation), message: err.Error(),
				fix: "Write the start-up time in whole seconds, such as \"60\"."})
			continue
		}
		for i, c := range w.template.Spec.Containers {
			live := c.LivenessProbe
			if live == nil || c.StartupProbe != nil {
				continue
			}
			startup, source := declared, StartupSecondsAnnotation
			if !hasAnnotation {
				// A readiness probe that waits longer than liveness
				// declares that the container needs that long.
				if c.ReadinessProbe == nil || c.ReadinessProbe.InitialDelaySeconds <= live.InitialDelaySeconds {
					continue
				}
				startup, source = int64(c.ReadinessProbe.InitialDelaySeconds), "readinessProbe.initialDelaySeconds"
			}
			restart := restartAfter(live)
			if restart >= startup {
				continue
			}
			period, threshold := probeTiming(live)
			out = append(out, finding{
				at:    object{w.obj},
				field: w.containerPath(i) + ".livenessProbe",
				message: fmt.Sprintf("container %q: livenessProbe can restart it %d s after it starts (initialDelaySeconds %d + (failureThreshold %d − 1) × periodSeconds %d), "+
					"before the %d s start-up that %s declares, and there is no startupProbe",
					c.Name, restart, live.InitialDelaySeconds, threshold, period, startup, source),
				fix: fmt.Sprintf("Add a startupProbe with failureThreshold × periodSeconds ≥ %d (such as periodSeconds %d and failureThreshold %d).",
					startup, period, (startup+int64(period)-1)/int64(period)),
			})
		}
	}
	return out
}

// probeTiming returns the probe's periodSeconds and failureThreshold with
// their defaults.
func probeTiming(p *corev1.Probe) (period, threshold int32) {
	period, threshold = p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = cluster.DefaultProbePeriodSeconds
	}
	if threshold == 0 {
		threshold = cluster.DefaultProbeFailureThreshold
	}
	return period, threshold
}

// restartAfter returns the earliest time after a container starts at which
// its liveness probe can have failed failureThreshold times in a row: the
// first probe runs after initialDelaySeconds, the next every periodSeconds
// (k8s.io/kubernetes pkg/kubelet/prober/worker.go, run and doProbe).
func restartAfter(p *corev1.Probe) int64 {
	period, threshold := probeTiming(p)
	return int64(p.InitialDelaySeconds) + int64(threshold-1)*int64(period)
}
