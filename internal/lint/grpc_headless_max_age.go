package lint

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

var grpcHeadlessMaxAge = Rule{
	ID:       "grpc-headless-max-age",
	Severity: Info,
	Title:    "A headless Service serves gRPC from pods whose server sets no maximum connection age",
	Why: "A gRPC client of a headless Service resolves the pods' addresses itself and holds its connections (one, with " +
		"grpc-go's default pick_first; one a pod, with round_robin) for as long as they live; grpc-go looks the names up again " +
		"only when a connection fails or gets a GOAWAY, and at most every 30 s. Through a rollout it stays on the old pods and " +
		"dials their addresses, and a new pod gets no call until something breaks. A server's maximum " +
		"connection age ends each connection after a while with a GOAWAY, which makes the client resolve and spread again. " +
		"The rule reads the age from the containers' flags and environment; a server that sets it in its code is not seen, hence info.",
	Fix: "Give the gRPC server a maximum connection age (grpc-go's keepalive.ServerParameters.MaxConnectionAge, Java's " +
		"maxConnectionAge, grpc-core's GRPC_ARG_MAX_CONNECTION_AGE_MS), a few minutes, with a grace for the calls in flight.",
	check: checkGRPCHeadlessMaxAge,
}

// maxAgeFlags and maxAgeEnv set a gRPC server's maximum connection age:
// closingtime serve's --max-connection-age and the common spellings.
var (
	maxAgeFlags = []string{"--max-connection-age", "--grpc-max-connection-age"}
	maxAgeEnv   = []string{"CT_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE", "MAX_CONNECTION_AGE",
		"GRPC_ARG_MAX_CONNECTION_AGE_MS"}
)

// grpcPort reports whether sp is a gRPC port: named grpc (or grpc-…), or
// with the application protocol grpc or h2c.
func grpcPort(sp corev1.ServicePort) bool {
	if p := sp.AppProtocol; p != nil && (strings.EqualFold(*p, "grpc") || *p == "kubernetes.io/h2c") {
		return true
	}
	return sp.Name == "grpc" || strings.HasPrefix(sp.Name, "grpc-")
}

func checkGRPCHeadlessMaxAge(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if slices.ContainsFunc(w.template.Spec.Containers, func(c corev1.Container) bool {
			// A zero age is none.
			return slices.ContainsFunc(durationSettings(c, maxAgeFlags, maxAgeEnv), func(d durationSetting) bool { return d.d > 0 })
		}) {
			continue
		}
		for _, s := range w.services {
			if s.svc.Spec.ClusterIP != corev1.ClusterIPNone {
				continue
			}
			i := slices.IndexFunc(s.svc.Spec.Ports, grpcPort)
			if i < 0 {
				continue
			}
			out = append(out, finding{
				at:    object{s.obj},
				field: "spec.clusterIP",
				message: fmt.Sprintf("headless Service serves gRPC (port %s) from %s, whose containers set no maximum connection age: "+
					"its clients keep their connections, and dial the old pods' addresses, through a rollout",
					cmpName(s.svc.Spec.Ports[i]), w.obj),
			})
		}
	}
	return out
}

// cmpName names a Service port: its name, or its number.
func cmpName(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return sp.Name
	}
	return fmt.Sprint(sp.Port)
}
