package local

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
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

// CheckPodTemplate returns the first field of a Deployment's pod template
// that the embedded cluster would not run as Kubernetes does, or nil: what
// CheckPodSpec refuses, and a restartPolicy other than Always, which the
// API refuses in a Deployment.
func CheckPodTemplate(t *corev1.PodTemplateSpec, imageCommands map[string][]string) *SpecError {
	if p := t.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
		return &SpecError{"restartPolicy", fmt.Errorf("unsupported value %q: a Deployment's pods may only have %q", p, corev1.RestartPolicyAlways)}
	}
	return CheckPodSpec(t.Annotations, &t.Spec, imageCommands)
}

// CheckPodSpec returns the first field of a pod's spec that the embedded
// kubelet would not run as Kubernetes does, rather than run it as
// something else, or nil: a container with no local command
// ([Entrypoint], with the pod's annotations and imageCommands, the
// kubelet's KubeletConfig.ImageCommands), a postStart hook, or what the
// API refuses in an init container that is not a sidecar (probes,
// lifecycle hooks).
func CheckPodSpec(annotations map[string]string, spec *corev1.PodSpec, imageCommands map[string][]string) *SpecError {
	check := func(field string, c *corev1.Container, init bool) *SpecError {
		sidecar := cluster.IsSidecar(c)
		var err error
		switch {
		case init && c.RestartPolicy != nil && !sidecar:
			field, err = field+".restartPolicy", fmt.Errorf("init container %s: restartPolicy %s: an init container's may only be Always", c.Name, *c.RestartPolicy)
		case init && !sidecar && (c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil):
			err = fmt.Errorf("init container %s: only a sidecar (restartPolicy Always) may have probes", c.Name)
		case init && !sidecar && c.Lifecycle != nil:
			field, err = field+".lifecycle", fmt.Errorf("init container %s: only a sidecar (restartPolicy Always) may have lifecycle hooks", c.Name)
		case c.Lifecycle != nil && c.Lifecycle.PostStart != nil:
			field, err = field+".lifecycle.postStart", fmt.Errorf("container %s: a postStart hook is not run by the embedded kubelet", c.Name)
		default:
			_, err = Entrypoint(annotations, c, imageCommands)
		}
		if err != nil {
			return &SpecError{field, err}
		}
		return nil
	}
	for i := range spec.InitContainers {
		if err := check(fmt.Sprintf("initContainers[%d]", i), &spec.InitContainers[i], true); err != nil {
			return err
		}
	}
	for i := range spec.Containers {
		if err := check(fmt.Sprintf("containers[%d]", i), &spec.Containers[i], false); err != nil {
			return err
		}
	}
	return nil
}
