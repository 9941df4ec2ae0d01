package cluster

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IsSidecar reports whether init container c is a sidecar: its
// restartPolicy is Always (IsRestartableInitContainer in the kubelet).
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// helperImages are the images, by the last element of their repository,
// of the proxies and log shippers that run beside an app.
var helperImages = map[string]string{
	"envoy": "proxy", "proxyv2": "proxy", "proxy": "proxy", "linkerd-proxy": "proxy", "haproxy": "proxy",
	"nginx": "proxy", "traefik": "proxy", "oauth2-proxy": "proxy", "cloud-sql-proxy": "proxy", "cloudsql-proxy": "proxy",
	"fluent-bit": "log shipper", "fluentd": "log shipper", "vector": "log shipper", "filebeat": "log shipper",
	"promtail": "log shipper", "opentelemetry-collector": "telemetry collector",
	"opentelemetry-collector-contrib": "telemetry collector", "otelcol": "telemetry collector", "otelcol-contrib": "telemetry collector",
}

// imageName returns the last element of an image's repository, without
// its registry, tag or digest: "envoy" for docker.io/envoyproxy/envoy:v1.30.
func imageName(image string) string {
	image, _, _ = strings.Cut(image, "@")
	name := path.Base(image)
	name, _, _ = strings.Cut(name, ":")
	return strings.ToLower(name)
}

// HelperKind returns what container c runs if it is a helper beside an
// app, a proxy or a log shipper, by its image, by its command's program
// (envoy run from an image of one's own), or closingtime's own proxy
// (`closingtime proxy`); false for anything else.
func HelperKind(c *corev1.Container) (string, bool) {
	if kind, ok := helperImages[imageName(c.Image)]; ok {
		return kind, true
	}
	argv := slices.Concat(c.Command, c.Args)
	if len(c.Command) > 0 {
		if kind, ok := helperImages[strings.ToLower(path.Base(c.Command[0]))]; ok {
			return kind, true
		}
	} else if imageName(c.Image) == "closingtime" {
		argv = slices.Concat([]string{"closingtime"}, argv)
	}
	if len(argv) > 1 && path.Base(argv[0]) == "closingtime" && argv[1] == "proxy" {
		return "proxy", true
	}
	return "", false
}

// ServerIndex returns the index in spec's containers of the pod's server:
// its first app container that is no helper (HelperKind), as a proxy that
// Istio's holdApplicationUntilProxyStarts puts first is not; the first if
// all are.
func ServerIndex(spec *corev1.PodSpec) int {
	for i := range spec.Containers {
		if _, helper := HelperKind(&spec.Containers[i]); !helper {
			return i
		}
	}
	return 0
}

// ContainerFields returns the fields that say which of spec's containers
// the container named name is, for its events: init=N/M for the Nth of M
// init containers, counted from 1 (kubectl's Init:K/M column counts the
// K that have completed); sidecar=true for a sidecar; app=N/M for the Nth
// of M app containers but the pod's server (ServerIndex); nil for the
// server.
func ContainerFields(spec *corev1.PodSpec, name string) map[string]string {
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
	switch {
	case i >= 0 && IsSidecar(&spec.InitContainers[i]):
		return map[string]string{"sidecar": "true"}
	case i >= 0:
		return map[string]string{"init": fmt.Sprintf("%d/%d", i+1, len(spec.InitContainers))}
	}
	if i = slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name }); i >= 0 && i != ServerIndex(spec) {
		return map[string]string{"app": fmt.Sprintf("%d/%d", i+1, len(spec.Containers))}
	}
	return nil
}
