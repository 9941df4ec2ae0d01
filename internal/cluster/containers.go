package cluster

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// IsSidecar reports whether init container c is a sidecar: its
// restartPolicy is Always (IsRestartableInitContainer in the kubelet).
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// ContainerFields returns the fields that say which of spec's containers
// the container named name is, for its events: init=N/M for the Nth of M
// init containers, counted from 1 (kubectl's Init:K/M column counts the
// K that have completed); sidecar=true for a sidecar; app=N/M for the Nth
// of M app containers from the second on; nil for the first app
// container, the pod's server.
func ContainerFields(spec *corev1.PodSpec, name string) map[string]string {
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
	switch {
	case i >= 0 && IsSidecar(&spec.InitContainers[i]):
		return map[string]string{"sidecar": "true"}
	case i >= 0:
		return map[string]string{"init": fmt.Sprintf("%d/%d", i+1, len(spec.InitContainers))}
	}
	if i = slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name }); i > 0 {
		return map[string]string{"app": fmt.Sprintf("%d/%d", i+1, len(spec.Containers))}
	}
	return nil
}
