package local

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// containerEnv returns the environment of container c of pod, as the
// kubelet builds it (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go,
// makeEnvironmentVariables), as a map and as NAME=value entries for the
// process, in order.
//
// nodeEnv (KubeletConfig.Env, then the Services' variables) comes first,
// as the kubelet's Service variables do: c's own entries of the same name
// win, and every entry may refer to nodeEnv with $(NAME). Each env entry may also refer to earlier
// entries with $(NAME); valueFrom supports the downward API fields
// metadata.name, metadata.namespace, metadata.uid, spec.nodeName and
// status.podIP. Other sources (ConfigMaps, Secrets, resources) are an error
// that names the variable: the local cluster has no store for them. The
// process also gets the kubelet's PATH, in place of the image's ENV, so
// that commands resolve as they do in a shell on this machine, and
// HOSTNAME, as a container runtime sets it.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP string, nodeEnv []corev1.EnvVar) (map[string]string, []string, error) {
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
	// defined is what $(NAME) sees: nodeEnv, then the entries so far.
	defined := map[string]string{}
	for _, e := range nodeEnv {
		defined[e.Name] = e.Value
		set(e.Name, e.Value)
	}
	for _, e := range c.Env {
		value := e.Value
		switch {
		case e.ValueFrom == nil:
			value = cluster.Expand(value, defined)
		case e.ValueFrom.FieldRef != nil:
			var ok bool
			if value, ok = fieldRefValue(pod, e.ValueFrom.FieldRef.FieldPath, podIP); !ok {
				return nil, nil, fmt.Errorf("env %s: fieldRef %s is not supported locally", e.Name, e.ValueFrom.FieldRef.FieldPath)
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

// CommandAnnotationPrefix begins the pod annotation that gives a container
// the local command standing for its image's entrypoint:
// closingtime.dev/command.<container name>. Its value is a command line, split
// into words as [ParseImageCommand] splits one (no shell runs it), and $(VAR)
// references in it are expanded from the container's environment, as in a
// command. For its pod it wins over KubeletConfig.ImageCommands; a container
// that has a command ignores it.
//
// Kubernetes validates the part after the slash as a name of at most 63
// characters, so a container name may have at most 55 for the annotation to
// be accepted by a real API server.
const CommandAnnotationPrefix = "closingtime.dev/command."

// commandLine returns the argv of container c of pod: its command and
// args, each with $(NAME) expanded from env (k8s.io/kubernetes
// pkg/kubelet/container/helpers.go, ExpandContainerCommandAndArgs). A
// container without a command runs what stands for its image's entrypoint
// (a Dockerfile ENTRYPOINT, with CMD when there are no args): the command
// of pod's CommandAnnotationPrefix annotation for c, else the command
// imageCommands maps c's image to, followed by c's args.
func commandLine(pod *corev1.Pod, c *corev1.Container, env map[string]string, imageCommands map[string][]string) ([]string, error) {
	command, err := Entrypoint(pod.Annotations, c, imageCommands)
	if err != nil {
		return nil, err
	}
	argv := make([]string, 0, len(command)+len(c.Args))
	for _, s := range command {
		argv = append(argv, cluster.Expand(s, env))
	}
	for _, s := range c.Args {
		argv = append(argv, cluster.Expand(s, env))
	}
	return argv, nil
}

// Entrypoint returns the command of container c, or the local command that
// stands for its image's entrypoint: from its pod's annotations first,
// then from imageCommands, as a kubelet of a cluster whose
// KubeletConfig.ImageCommands is imageCommands finds it. The error for a
// container with neither says how to give one.
func Entrypoint(annotations map[string]string, c *corev1.Container, imageCommands map[string][]string) ([]string, error) {
	if len(c.Command) > 0 {
		return c.Command, nil
	}
	key := CommandAnnotationPrefix + c.Name
	if v, ok := annotations[key]; ok {
		argv, err := splitWords(v)
		if err != nil {
			return nil, fmt.Errorf("container %s: annotation %s: %w", c.Name, key, err)
		}
		return argv, nil
	}
	if command := imageCommands[c.Image]; len(command) > 0 {
		return command, nil
	}
	return nil, fmt.Errorf("container %s has no command and its image %q maps to no local command: "+
		"map the image with --image-command '%s=CMD ARGS…', or annotate the pod template with %s: 'CMD ARGS…'",
		c.Name, c.Image, c.Image, key)
}

// ParseImageCommand parses the value of the --image-command flag,
// IMAGE=CMD ARGS…: the image, exactly as containers name it, then the local
// command that stands for its entrypoint, split into words as a shell would
// split a simple command, but without a shell: words are separated by
// blanks; single quotes keep everything up to the next one; double quotes
// keep everything but a backslash-escaped " or \; outside quotes a
// backslash keeps the next character. $(VAR) references are kept for the
// kubelet to expand. Shell operators (| & ; < > and backquotes) outside
// quotes are an error, since no shell interprets them: wrap such a command
// in sh -c '…'. It returns an error for a missing =, an empty image or
// command, or an unclosed quote.
func ParseImageCommand(s string) (image string, argv []string, err error) {
	image, command, ok := strings.Cut(s, "=")
	image = strings.TrimSpace(image)
	if !ok || image == "" {
		return "", nil, fmt.Errorf("image command %q: want IMAGE=CMD ARGS…", s)
	}
	argv, err = splitWords(command)
	if err != nil {
		return "", nil, fmt.Errorf("image command %q: %w", s, err)
	}
	return image, argv, nil
}

// splitWords splits a command line into words, as ParseImageCommand
// describes. It returns an error when there is no word.
func splitWords(s string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == ' ' || ch == '\t' || ch == '\n':
			if inWord {
				words, inWord = append(words, word.String()), false
				word.Reset()
			}
		case ch == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' at byte %d", i)
			}
			word.WriteString(s[i+1 : i+1+end])
			i, inWord = i+1+end, true
		case ch == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
					j++
				}
				word.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("unclosed \" at byte %d", i)
			}
			i, inWord = j, true
		case ch == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("trailing \\ at byte %d", i)
			}
			i++
			word.WriteByte(s[i])
			inWord = true
		case strings.IndexByte("|&;<>`", ch) >= 0:
			return nil, fmt.Errorf("shell operator %q at byte %d: no shell runs the command; quote it, or run sh -c '…'", ch, i)
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	if len(words) == 0 {
		return nil, errors.New("no command")
	}
	return words, nil
}

// fieldRefPaths are the downward API's fields that the embedded kubelet
// fills, in fieldRefValue's order.
var fieldRefPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "status.podIP"}

// fieldRefValue returns the value of the downward API's field path for
// pod, whose address is podIP; false for a field the kubelet does not
// fill.
func fieldRefValue(pod *corev1.Pod, path, podIP string) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "status.podIP":
		return podIP, true
	}
	return "", false
}
