package lint

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var livenessSameAsReadiness = Rule{
	ID:       "liveness-same-as-readiness",
	Severity: Warning,
	Title:    "The liveness probe runs the same check as the readiness probe, and that check can depend on more than the process",
	Why: "Readiness checks often include dependencies and load; when the shared check fails because a dependency is down " +
		"or the pod is overloaded, liveness restarts every container instead of only taking the pods out of rotation, " +
		"and the restarts add CrashLoopBackOff waits of 10 s doubling to 300 s that stretch a short outage into minutes. " +
		"Different thresholds only change when, not whether. A check that looks deep (another host, a dependency's " +
		"name in the path, a dependency's client) is a warning; an HTTP endpoint or command that closingtime cannot see " +
		"into is reported at info; a tcpSocket or gRPC check of the pod's own port, and a command that plainly checks " +
		"the container alone (a file, grpc_health_probe on localhost), are not reported.",
	Fix: "Point livenessProbe at a check of the process alone (an endpoint that answers while the server runs, " +
		"without touching dependencies), or remove it; keep dependency and load checks in readinessProbe.",
	check: checkLivenessSameAsReadiness,
}

func checkLivenessSameAsReadiness(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for i, c := range w.template.Spec.Containers {
			if !sameAsReadiness(c) {
				continue
			}
			h := c.LivenessProbe.ProbeHandler
			shared := fmt.Sprintf("container %q: livenessProbe runs the same check as readinessProbe (%s)", c.Name, probeCheck(c, h))
			field := w.containerPath(i) + ".livenessProbe"
			if why, at := dependencyCheck(h); why != "" {
				out = append(out, finding{at: object{w.obj}, field: field + at, message: shared + ", and that check " + why})
				continue
			}
			if localCheck(h) {
				continue
			}
			what := "that endpoint"
			if h.Exec != nil {
				what = "that command"
			}
			out = append(out, finding{
				at:    object{w.obj},
				field: field,
				message: shared + "; closingtime cannot see whether " + what + " checks only the process: " +
					"if it checks a dependency, an outage of it restarts every pod",
				fix: "If " + what + " checks nothing but the process, nothing needs to change (annotate the workload with " +
					IgnoreAnnotation + ": liveness-same-as-readiness); if it checks a dependency, point livenessProbe at a check " +
					"of the process alone and keep the dependency in readinessProbe.",
				unsure: true,
			})
		}
	}
	return out
}

// sameAsReadiness reports whether c's liveness and readiness probes run
// the same check.
func sameAsReadiness(c corev1.Container) bool {
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		return false
	}
	live := probeCheck(c, c.LivenessProbe.ProbeHandler)
	return live != "" && live == probeCheck(c, c.ReadinessProbe.ProbeHandler)
}

// localCommands are programs that, in a probe, check the container alone:
// a file it writes, or nothing at all.
var localCommands = map[string]bool{"cat": true, "test": true, "ls": true, "stat": true, "true": true}

// localCheck reports whether the probe handler h plainly checks its own
// container and nothing else: a tcpSocket or gRPC check, which the kubelet
// makes to the pod's own address (a tcpSocket with a host is
// dependencyCheck's), or a command in localCommands, or grpc_health_probe
// given a loopback -addr.
func localCheck(h corev1.ProbeHandler) bool {
	switch {
	case h.TCPSocket != nil, h.GRPC != nil:
		return true
	case h.Exec != nil && len(h.Exec.Command) > 0:
		argv := h.Exec.Command
		switch path.Base(argv[0]) {
		case "grpc_health_probe":
			addr, ok := flagValue(argv[1:], "addr")
			return ok && isLoopback(addr)
		default:
			return localCommands[path.Base(argv[0])]
		}
	}
	return false
}

// flagValue returns the value of the Go-style flag name in args, given as
// -name=value, --name=value, or -name value, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// isLoopback reports whether the host:port addr names the local host: an
// empty host, localhost or a loopback address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" || host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
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
		return strings.TrimSpace(fmt.Sprintf("grpc :%d %s", h.GRPC.Port, ptr.Deref(h.GRPC.Service, "")))
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
