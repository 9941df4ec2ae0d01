package lint

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

var proxyNotSidecar = Rule{
	ID:       "proxy-not-sidecar",
	Severity: Warning,
	Title:    "A proxy or log shipper runs among the app containers, where nothing orders its shutdown",
	Why: "The kubelet stops every container of containers at the same time. A proxy that exits while its app still " +
		"drains drops the app's last requests; an app that exits while its proxy still routes to it turns them into 502s " +
		"and 503s; a log shipper that exits first loses the app's last lines.",
	Fix: "Declare it under initContainers with restartPolicy: Always, a native sidecar (on by default since Kubernetes 1.29): " +
		"it starts before the app, and the kubelet sends it the stop signal only after the app containers have exited.",
	check: checkProxyNotSidecar,
}

// sidecarImages are the images, by the last element of their repository,
// of the proxies and log shippers that run beside an app.
var sidecarImages = map[string]string{
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

// sidecarKind returns what container c runs, if it is a proxy or a log
// shipper: by its image, by its command's program (envoy run from an
// image of one's own), or closingtime's own proxy (`closingtime proxy`).
func sidecarKind(c *corev1.Container) (string, bool) {
	if kind, ok := sidecarImages[imageName(c.Image)]; ok {
		return kind, true
	}
	if len(c.Command) > 0 {
		if kind, ok := sidecarImages[strings.ToLower(path.Base(c.Command[0]))]; ok {
			return kind, true
		}
	}
	if imageName(c.Image) == "closingtime" && len(c.Command) == 0 && len(c.Args) > 0 && c.Args[0] == "proxy" {
		return "proxy", true
	}
	return "", false
}

func checkProxyNotSidecar(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		cs := w.template.Spec.Containers
		if len(cs) < 2 {
			continue
		}
		for i, c := range cs {
			kind, ok := sidecarKind(&c)
			if !ok {
				continue
			}
			out = append(out, finding{
				at:    object{w.obj},
				field: w.containerPath(i),
				message: fmt.Sprintf("container %q (image %s) looks like a %s, and runs among the app containers: "+
					"the kubelet stops it at the same time as the others", c.Name, c.Image, kind),
			})
		}
	}
	return out
}
