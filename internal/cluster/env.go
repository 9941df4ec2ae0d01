package cluster

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Expand replaces each $(NAME) in s by the value of NAME in vars, as
// Kubernetes expands env values, commands and args (k8s.io/kubernetes
// third_party/forked/golang/expansion/expand.go, Expand): $$ is a literal
// $, and a reference to a name vars lacks, or one left unclosed, stays as
// it is written.
func Expand(s string, vars map[string]string) string {
	return expand(s, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
}

// expand is Expand with the values of lookup, which reports whether a
// name is defined.
func expand(s string, lookup func(name string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// An UnresolvedRef is a $(NAME) in a container's env value, command or
// args that names no variable defined where it is written. Kubernetes
// leaves such a reference as it is written (k8s.io/kubernetes
// pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables: an env entry's
// value sees the entries before it; pkg/kubelet/container/helpers.go,
// ExpandContainerCommandAndArgs: command and args see them all), so the
// process gets the text "$(NAME)": an app told to listen on
// "$(POD_IP):8080" without POD_IP in its env fails to resolve the host
// "$(POD_IP)".
type UnresolvedRef struct {
	// Field is the reference's place in the container, as kubectl names
	// fields: "env[2]", "command[0]", "args[1]".
	Field string
	// Env is the name of the env entry at Field; empty for command and
	// args.
	Env string
	// Name is the variable referred to.
	Name string
}

// UnresolvedRefs returns the references of container c that stay as
// written, in the order of its fields (env, command, args), each once per
// field. It knows the variables of c's env, and kubelet, the names of the
// variables the kubelet adds (the Service variables, ServiceEnv): none is
// reported for a container with envFrom, whose names only its sources
// know.
func UnresolvedRefs(c *corev1.Container, kubelet ...string) []UnresolvedRef {
	if len(c.EnvFrom) > 0 {
		return nil
	}
	var refs []UnresolvedRef
	defined := map[string]bool{}
	for _, name := range kubelet {
		defined[name] = true
	}
	// unresolved adds the references of s, at field, that defined lacks.
	unresolved := func(s, field, env string) {
		seen := map[string]bool{}
		expand(s, func(name string) (string, bool) {
			// A name that no env entry can have, such as a shell's
			// $(cat file), is the shell's to expand.
			if len(validation.IsEnvVarName(name)) > 0 {
				return "", true
			}
			if !defined[name] && !seen[name] {
				seen[name] = true
				refs = append(refs, UnresolvedRef{Field: field, Env: env, Name: name})
			}
			return "", true
		})
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			unresolved(e.Value, "env["+strconv.Itoa(i)+"]", e.Name)
		}
		defined[e.Name] = true
	}
	for i, s := range c.Command {
		unresolved(s, "command["+strconv.Itoa(i)+"]", "")
	}
	for i, s := range c.Args {
		unresolved(s, "args["+strconv.Itoa(i)+"]", "")
	}
	return refs
}

// ServiceEnv returns the variables by which the kubelet tells a container
// of the Services of its namespace, as it does for every Service that has a
// cluster IP when the container starts (k8s.io/kubernetes
// pkg/kubelet/envvars/envvars.go, FromServices): NAME_SERVICE_HOST,
// NAME_SERVICE_PORT (the first port) and NAME_SERVICE_PORT_PORTNAME for
// each named port, and the Docker link variables NAME_PORT and
// NAME_PORT_<port>_<PROTOCOL>{,_PROTO,_PORT,_ADDR}, where NAME is the
// Service's name in upper case with "-" as "_". A Service without a cluster
// IP (headless, or none given yet) has none. services are in the order of
// their names.
func ServiceEnv(services []*corev1.Service) []corev1.EnvVar {
	var env []corev1.EnvVar
	add := func(name, value string) { env = append(env, corev1.EnvVar{Name: name, Value: value}) }
	for _, svc := range services {
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
			continue
		}
		name := envName(svc.Name)
		add(name+"_SERVICE_HOST", ip)
		add(name+"_SERVICE_PORT", strconv.Itoa(int(svc.Spec.Ports[0].Port)))
		for _, p := range svc.Spec.Ports {
			if p.Name != "" {
				add(name+"_SERVICE_PORT_"+envName(p.Name), strconv.Itoa(int(p.Port)))
			}
		}
		for i, p := range svc.Spec.Ports {
			protocol := string(p.Protocol)
			if protocol == "" {
				protocol = string(corev1.ProtocolTCP)
			}
			url := fmt.Sprintf("%s://%s", strings.ToLower(protocol), net.JoinHostPort(ip, strconv.Itoa(int(p.Port))))
			if i == 0 {
				add(name+"_PORT", url)
			}
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(protocol))
			add(prefix, url)
			add(prefix+"_PROTO", strings.ToLower(protocol))
			add(prefix+"_PORT", strconv.Itoa(int(p.Port)))
			add(prefix+"_ADDR", ip)
		}
	}
	return env
}

// envName is a name as a variable name: upper case, "-" as "_".
func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
