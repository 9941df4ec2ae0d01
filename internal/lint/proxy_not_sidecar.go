package lint

import (
	"fmt"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

var proxyNotSidecar = Rule{
	ID:       "proxy-not-sidecar",
	Severity: Warning,
	Title:    "A proxy or log shipper runs among the app containers, where nothing orders its shutdown",
	Why: "The kubelet stops every app container (those under containers) at the same time. A proxy that exits while its app still " +
		"drains drops the app's last requests; an app that exits while its proxy still routes to it turns them into 502s " +
		"and 503s; a log shipper that exits first loses the app's last lines.",
	Fix: "Declare it under initContainers with restartPolicy: Always, a native sidecar (on by default since Kubernetes 1.29): " +
		"it starts before the app, and the kubelet sends it the stop signal only after the app containers have exited.",
	check: checkProxyNotSidecar,
}

func checkProxyNotSidecar(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		cs := w.template.Spec.Containers
		if len(cs) < 2 {
			continue
		}
		for i, c := range cs {
			kind, ok := cluster.HelperKind(&c)
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
