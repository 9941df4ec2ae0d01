package cluster

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestContainerFields names each container of a pod as its events do:
// init containers by their place, a native sidecar, and every app
// container but the server, which is the first that is no proxy or log
// shipper, wherever it stands.
func TestContainerFields(t *testing.T) {
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "setup", Image: "busybox"},
			{Name: "mesh", Image: "istio/proxyv2:1.24", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
		},
		Containers: []corev1.Container{
			{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.24"},
			{Name: "edge", Image: "registry.example/edge:1", Command: []string{"/usr/local/bin/envoy", "-c", "/etc/envoy.yaml"}},
			{Name: "lab-proxy", Image: "registry.example/tools:1", Command: []string{"/bin/closingtime", "proxy"}},
			{Name: "app", Image: "closingtime", Args: []string{"serve"}},
			{Name: "logs", Image: "cr.fluentbit.io/fluent/fluent-bit:3.1"},
		},
	}
	if got := ServerIndex(spec); got != 3 {
		t.Errorf("ServerIndex = %d, want 3, the first that is no helper", got)
	}
	for name, want := range map[string]map[string]string{
		"setup":       {"init": "1/2"},
		"mesh":        {"sidecar": "true"},
		"istio-proxy": {"app": "1/5"},
		"edge":        {"app": "2/5"},
		"lab-proxy":   {"app": "3/5"},
		"app":         nil,
		"logs":        {"app": "5/5"},
	} {
		if got := ContainerFields(spec, name); !maps.Equal(got, want) {
			t.Errorf("ContainerFields(%q) = %v, want %v", name, got, want)
		}
	}
	only := &corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.30"}}}
	if got := ServerIndex(only); got != 0 {
		t.Errorf("ServerIndex of a pod of one proxy = %d, want 0", got)
	}
}
