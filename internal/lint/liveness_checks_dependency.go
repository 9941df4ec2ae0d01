package lint

import (
	"fmt"
	"path"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
)

var livenessChecksDependency = Rule{
	ID:       "liveness-checks-dependency",
	Severity: Warning,
	Title:    "The liveness probe looks like a readiness or dependency check",
	Why: "A liveness probe that fails when a database, cache or upstream is down restarts every healthy container at once; " +
		"the restarts and their CrashLoopBackOff waits stretch a dependency outage of seconds into minutes, " +
		"where a readiness probe would only take the pods out of rotation and back.",
	Fix:   "Make livenessProbe check only that the process itself is responsive; move dependency checks to readinessProbe.",
	check: checkLivenessChecksDependency,
}

// dependencyWords are the path words that name a readiness or dependency
// check rather than a check of the process itself.
var dependencyWords = map[string]bool{
	"ready": true, "readiness": true, "readyz": true,
	"deep": true, "full": true, "deps": true, "dependency": true, "dependencies": true,
	"upstream": true, "upstreams": true, "downstream": true, "external": true,
	"db": true, "database": true, "sql": true, "postgres": true, "postgresql": true, "mysql": true,
	"mongo": true, "mongodb": true, "redis": true, "cache": true, "memcached": true,
	"kafka": true, "rabbitmq": true, "amqp": true, "elasticsearch": true, "cassandra": true,
}

// dependencyClients are programs whose only use in a probe is to reach a
// dependency.
var dependencyClients = map[string]bool{
	"pg_isready": true, "psql": true, "mysql": true, "mysqladmin": true, "redis-cli": true,
	"mongo": true, "mongosh": true, "cqlsh": true, "kafka-topics": true, "kafka-topics.sh": true,
	"kafka-broker-api-versions": true, "kafka-broker-api-versions.sh": true, "rabbitmq-diagnostics": true,
}

func checkLivenessChecksDependency(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		for i, c := range w.template.Spec.Containers {
			p := c.LivenessProbe
			if p == nil || sameAsReadiness(c) {
				// A check that readiness shares is
				// liveness-same-as-readiness's to report.
				continue
			}
			why, field := dependencyCheck(p.ProbeHandler)
			if why == "" {
				continue
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + ".livenessProbe" + field,
				message: fmt.Sprintf("container %q: livenessProbe %s", c.Name, why),
			})
		}
	}
	return out
}

// dependencyCheck says why the probe handler h checks, or looks like it
// checks, something besides the container's own process: it reaches
// another host, its path names a readiness or dependency check, or its
// command is a client of a dependency. It also returns the field under
// the probe that shows it, such as ".httpGet.path". Both are "" when
// nothing shows it.
func dependencyCheck(h corev1.ProbeHandler) (why, field string) {
	switch {
	case h.HTTPGet != nil && h.HTTPGet.Host != "":
		return fmt.Sprintf("requests host %q, not the pod", h.HTTPGet.Host), ".httpGet.host"
	case h.HTTPGet != nil:
		if word := dependencyWord(h.HTTPGet.Path); word != "" {
			return fmt.Sprintf("requests path %q, which looks like a readiness or dependency check (%q)", h.HTTPGet.Path, word), ".httpGet.path"
		}
	case h.TCPSocket != nil && h.TCPSocket.Host != "":
		return fmt.Sprintf("connects to host %q, not the pod", h.TCPSocket.Host), ".tcpSocket.host"
	case h.Exec != nil:
		if client := dependencyClient(h.Exec.Command); client != "" {
			return fmt.Sprintf("runs %s, a client of a dependency", client), ".exec.command"
		}
	}
	return "", ""
}

// dependencyWord returns the first word of an HTTP path and query that is
// in dependencyWords, or "".
func dependencyWord(p string) string {
	words := strings.FieldsFunc(strings.ToLower(p), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for _, w := range words {
		if dependencyWords[w] {
			return w
		}
	}
	return ""
}

// dependencyClient returns the first program of a probe command, or of the
// script it gives a shell, that is in dependencyClients, or "".
func dependencyClient(argv []string) string {
	words := argv
	if script, ok := shellScript(argv); ok {
		words = strings.Fields(script)
	}
	for _, w := range words {
		if base := path.Base(w); dependencyClients[base] {
			return base
		}
	}
	return ""
}
