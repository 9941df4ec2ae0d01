package lint

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var livenessSameAsReadiness = Rule{
	ID:       "liveness-same-as-readiness",
	Severity: Warning,
	Title:    "The liveness probe runs the same check as the readiness probe",
	Why: "When that check fails because the pod is overloaded or a dependency is down, liveness restarts the container " +
		"instead of only taking it out of rotation; the restarts add CrashLoopBackOff waits of 10 s doubling to 300 s " +
		"and stretch a short outage into minutes. Different thresholds only change when, not whether.",
	Fix: "Point livenessProbe at a check of the process alone (an endpoint that answers while the server runs, " +
		"without touching dependencies), or remove it; keep dependency and load checks in readinessProbe.",
	check: checkLivenessSameAsReadiness,
}

func checkLivenessSameAsReadiness(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for i, c := range w.template.Spec.Containers {
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				continue
			}
			live, ready := probeCheck(c, c.LivenessProbe.ProbeHandler), probeCheck(c, c.ReadinessProbe.ProbeHandler)
			if live == "" || live != ready {
				continue
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + ".livenessProbe",
				message: fmt.Sprintf("container %q: livenessProbe runs the same check as readinessProbe (%s)", c.Name, live),
			})
		}
	}
	return out
}

// probeCheck describes what a probe handler checks, so that two handlers
// that check the same thing have the same description: ports named or
// numbered alike, defaults filled in, headers and thresholds ignored. It is
// "" for a handler with no action.
func probeCheck(c corev1.Container, h corev1.ProbeHandler) string {
	switch {
	case h.Exec != nil:
		return "exec " + strings.Join(h.Exec.Command, " ")
	case h.HTTPGet != nil:
		g := h.HTTPGet
		s := "httpGet "
		if scheme := strings.ToLower(string(g.Scheme)); scheme != "" && scheme != "http" {
			s += scheme + " "
		}
		p := g.Path
		if p == "" {
			p = "/"
		}
		return s + g.Host + ":" + portNumber(c, g.Port) + p
	case h.TCPSocket != nil:
		return "tcpSocket " + h.TCPSocket.Host + ":" + portNumber(c, h.TCPSocket.Port)
	case h.GRPC != nil:
		svc := ""
		if h.GRPC.Service != nil {
			svc = *h.GRPC.Service
		}
		return strings.TrimSpace(fmt.Sprintf("grpc :%d %s", h.GRPC.Port, svc))
	}
	return ""
}

// portNumber resolves a named port to the container's number for it.
func portNumber(c corev1.Container, p intstr.IntOrString) string {
	if p.Type == intstr.String {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return fmt.Sprint(cp.ContainerPort)
			}
		}
	}
	return p.String()
}
