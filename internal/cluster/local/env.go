package local

import (
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// containerEnv returns the environment of container c of pod, as the
// kubelet builds it (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go,
// makeEnvironmentVariables), as a map and as NAME=value entries for the
// process, in order.
//
// Each env entry may refer to earlier entries with $(NAME); valueFrom
// supports the downward API fields metadata.name, metadata.namespace,
// metadata.uid, spec.nodeName and status.podIP. Other sources (ConfigMaps,
// Secrets, resources) are an error that names the variable: the local
// cluster has no store for them. The process also gets the kubelet's PATH,
// in place of the image's ENV, so that commands resolve as they do in a
// shell on this machine, and HOSTNAME, as a container runtime sets it.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP string) (map[string]string, []string, error) {
	vars := map[string]string{}
	var names []string
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			names = append(names, name)
		}
		vars[name] = value
	}
	set("PATH", os.Getenv("PATH"))
	set("HOSTNAME", pod.Name)
	defined := map[string]string{}
	for _, e := range c.Env {
		value := e.Value
		switch {
		case e.ValueFrom == nil:
			value = expand(value, defined)
		case e.ValueFrom.FieldRef != nil:
			switch path := e.ValueFrom.FieldRef.FieldPath; path {
			case "metadata.name":
				value = pod.Name
			case "metadata.namespace":
				value = pod.Namespace
			case "metadata.uid":
				value = string(pod.UID)
			case "spec.nodeName":
				value = pod.Spec.NodeName
			case "status.podIP":
				value = podIP
			default:
				return nil, nil, fmt.Errorf("env %s: fieldRef %s is not supported locally", e.Name, path)
			}
		default:
			return nil, nil, fmt.Errorf("env %s: only value and fieldRef are supported locally", e.Name)
		}
		defined[e.Name] = value
		set(e.Name, value)
	}
	entries := make([]string, len(names))
	for i, name := range names {
		entries[i] = name + "=" + vars[name]
	}
	return vars, entries, nil
}

// commandLine returns the argv of container c: its command and args, each
// with $(NAME) expanded from env (k8s.io/kubernetes
// pkg/kubelet/container/helpers.go, ExpandContainerCommandAndArgs). A
// container without a command runs the command its image maps to in
// imageCommands, followed by its args.
func commandLine(c *corev1.Container, env map[string]string, imageCommands map[string][]string) ([]string, error) {
	command := c.Command
	if len(command) == 0 {
		command = imageCommands[c.Image]
		if len(command) == 0 {
			return nil, fmt.Errorf("container %s has no command and image %q maps to no local command: "+
				"give the container a command, or map the image to a local command (KubeletConfig.ImageCommands)", c.Name, c.Image)
		}
	}
	argv := make([]string, 0, len(command)+len(c.Args))
	for _, s := range command {
		argv = append(argv, expand(s, env))
	}
	for _, s := range c.Args {
		argv = append(argv, expand(s, env))
	}
	return argv, nil
}

// expand replaces each $(NAME) in s by the value of NAME in vars, as
// Kubernetes expands env values, commands and args (k8s.io/kubernetes
// third_party/forked/golang/expansion/expand.go, Expand): $$ is a literal
// $, and a reference to an undefined name, or one left unclosed, stays as
// it is written.
func expand(s string, vars map[string]string) string {
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
			if v, ok := vars[name]; ok {
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
