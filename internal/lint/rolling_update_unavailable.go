package lint

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

var rollingUpdateUnavailable = Rule{
	ID:       "rolling-update-unavailable",
	Severity: Warning,
	Title:    "A rollout of a Deployment or DaemonSet behind a Service takes serving pods away before their replacements are ready",
	Why: "With maxUnavailable above 0 (a Deployment's 25% default is 1 pod from 4 replicas on; a DaemonSet's default is 1) " +
		"or the Recreate strategy, the Service runs short of ready pods during every rollout, and the remaining pods take " +
		"the load or refuse it. (A StatefulSet always replaces a pod by deleting it first; run enough replicas.)",
	Fix: "Set maxUnavailable: 0 and maxSurge: 1 or more in the rolling update strategy, " +
		"so that an old pod goes only once a new one is available.",
	check: checkRollingUpdateUnavailable,
}

func checkRollingUpdateUnavailable(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if len(w.services) == 0 {
			continue
		}
		if ds := w.daemonSet; ds != nil {
			if f, ok := daemonSetUnavailable(w, ds); ok {
				out = append(out, f)
			}
			continue
		}
		d := w.deployment
		if d == nil {
			continue
		}
		if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			out = append(out, finding{
				at:      object{w.obj},
				field:   "spec.strategy.type",
				message: fmt.Sprintf("strategy Recreate stops every pod before any new one starts, while %s sends them traffic", w.serviceNames()),
			})
			continue
		}
		// With an autoscaler, judge the rollout at the most replicas it
		// can run: the percentage defaults take more pods away there.
		replicas, at := w.replicaCount(), "replicas"
		if w.hpa != nil {
			replicas, at = w.hpa.maxReplicas, "replicas (the autoscaler's maxReplicas)"
		}
		var maxSurge, maxUnavailable *intstr.IntOrString
		if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
			maxSurge, maxUnavailable = ru.MaxSurge, ru.MaxUnavailable
		}
		surge, unavailable, err := cluster.ResolveFenceposts(maxSurge, maxUnavailable, replicas)
		if err != nil {
			out = append(out, finding{at: object{w.obj}, field: "spec.strategy.rollingUpdate", message: err.Error(),
				fix: "Write maxSurge and maxUnavailable as whole numbers or percentages such as \"25%\"."})
			continue
		}
		unavailable = min(unavailable, replicas)
		if unavailable == 0 {
			continue
		}
		// When both round to 0, Kubernetes makes maxUnavailable 1; naming
		// maxSurge then says why.
		values := "maxUnavailable " + fencepost(maxUnavailable, cluster.DefaultMaxUnavailable)
		if surge == 0 {
			values = "maxSurge " + fencepost(maxSurge, cluster.DefaultMaxSurge) + " and " + values
		}
		out = append(out, finding{
			at:    object{w.obj},
			field: "spec.strategy.rollingUpdate.maxUnavailable",
			message: fmt.Sprintf("with %s, a rollout takes %d of %d %s out of service before their replacements are ready, while %s sends them traffic",
				values, unavailable, replicas, at, w.serviceNames()),
		})
	}
	return out
}

// daemonSetUnavailable reports a RollingUpdate DaemonSet whose
// maxUnavailable is above 0. It rounds up over the nodes, so any value
// above 0 stops at least one node's pod before its replacement is ready.
func daemonSetUnavailable(w *workload, ds *appsv1.DaemonSet) (finding, bool) {
	if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return finding{}, false
	}
	var maxUnavailable *intstr.IntOrString
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		maxUnavailable = ru.MaxUnavailable
	}
	value := fmt.Sprint(cluster.DefaultDaemonSetMaxUnavailable) + " (default)"
	if maxUnavailable != nil {
		if n, err := intstr.GetScaledValueFromIntOrPercent(maxUnavailable, 100, true); err == nil && n == 0 {
			return finding{}, false
		}
		value = maxUnavailable.String()
	}
	return finding{
		at:    object{w.obj},
		field: "spec.updateStrategy.rollingUpdate.maxUnavailable",
		message: fmt.Sprintf("with maxUnavailable %s, a rollout stops pods before their replacements are ready, while %s sends them traffic",
			value, w.serviceNames()),
		fix: "Set spec.updateStrategy.rollingUpdate.maxSurge: 1 and maxUnavailable: 0 (Kubernetes 1.25 and later), " +
			"so that each node's new pod is available before the old one goes.",
	}, true
}

// fencepost formats a maxSurge or maxUnavailable value, naming the default
// when it is unset.
func fencepost(v *intstr.IntOrString, def string) string {
	if v == nil {
		return def + " (default)"
	}
	return v.String()
}
