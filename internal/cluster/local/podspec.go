package local

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// A SpecError is a field of a pod's spec that the embedded kubelet can't
// run as Kubernetes would.
type SpecError struct {
	// Field is the field's path from the pod's spec:
	// initContainers[0].restartPolicy.
	Field string
	Err   error
}

func (e *SpecError) Error() string { return "spec." + e.Field + ": " + e.Err.Error() }

func (e *SpecError) Unwrap() error { return e.Err }

// CheckPodSpec returns the first field of a pod's spec that the embedded
// kubelet would not run as Kubernetes does, rather than run it as
// something else, or nil: a container with no local command
// ([Entrypoint], with the pod's annotations and imageCommands, the
// kubelet's KubeletConfig.ImageCommands), a sidecar (an init container
// with restartPolicy Always), a PID namespace shared by the pod's
// containers, or what the API refuses in an init container (probes,
// lifecycle hooks).
func CheckPodSpec(annotations map[string]string, spec *corev1.PodSpec, imageCommands map[string][]string) *SpecError {
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		return &SpecError{"shareProcessNamespace", errors.New("a PID namespace shared by the pod's containers is not run by the embedded kubelet")}
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		field := fmt.Sprintf("initContainers[%d]", i)
		var err error
		switch {
		case c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways:
			field, err = field+".restartPolicy", fmt.Errorf("init container %s is a sidecar (restartPolicy Always), which the embedded kubelet does not run yet: list it in containers to run it beside the app, stopped with it at once", c.Name)
		case c.RestartPolicy != nil:
			field, err = field+".restartPolicy", fmt.Errorf("init container %s: restartPolicy %s: an init container's may only be Always", c.Name, *c.RestartPolicy)
		case c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil:
			err = fmt.Errorf("init container %s: only a sidecar may have probes", c.Name)
		case c.Lifecycle != nil:
			field, err = field+".lifecycle", fmt.Errorf("init container %s: only a sidecar may have lifecycle hooks", c.Name)
		default:
			_, err = Entrypoint(annotations, c, imageCommands)
		}
		if err != nil {
			return &SpecError{field, err}
		}
	}
	for i := range spec.Containers {
		if _, err := Entrypoint(annotations, &spec.Containers[i], imageCommands); err != nil {
			return &SpecError{fmt.Sprintf("containers[%d]", i), err}
		}
	}
	return nil
}
