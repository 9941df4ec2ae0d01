package scenario

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// downwardFields maps the names that manifests commonly give to fields of
// the downward API, which the embedded cluster supports, to the field: the
// env entry that a reference to one of them most likely lacks. A name may
// also begin with MY_, as in Kubernetes' own examples (MY_POD_IP).
var downwardFields = map[string]string{
	"POD_IP":        "status.podIP",
	"POD_NAME":      "metadata.name",
	"POD_NAMESPACE": "metadata.namespace",
	"POD_UID":       "metadata.uid",
	"NODE_NAME":     "spec.nodeName",
}

// referenceNotices returns a notice for each $(NAME) in a container of
// the Deployments of objects that stays as written
// ([cluster.UnresolvedRefs]), so that the process gets the text "$(NAME)":
// the notice names the file and line of the field, the Deployment, the
// container and the env entry (or command or args), and says which entry
// to add. objects[i] is s.Objects[i] as the runner applies it, with the
// variables it sets.
func referenceNotices(s *Scenario, objects []runtime.Object) []string {
	var notices []string
	vars := serviceVars(objects)
	for i, obj := range objects {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		o := s.Objects[i]
		for j := range d.Spec.Template.Spec.Containers {
			c := &d.Spec.Template.Spec.Containers[j]
			for _, ref := range cluster.UnresolvedRefs(c, vars[d.Namespace]...) {
				where := o.File
				if line := o.FieldLine(fmt.Sprintf("spec.template.spec.containers[%d].%s", j, ref.Field)); line > 0 {
					where += ":" + strconv.Itoa(line)
				}
				notices = append(notices, fmt.Sprintf("%s: Deployment %s: container %s: %s", where, d.Name, c.Name, unresolvedNotice(ref)))
			}
		}
	}
	return notices
}

// serviceOfVar returns the name of the Service whose variable name is
// (NAME_SERVICE_HOST, NAME_SERVICE_PORT…; cluster.ServiceEnv), in the
// lower case and dashes of a Service's name.
func serviceOfVar(name string) (string, bool) {
	i := strings.Index(name, "_SERVICE_HOST")
	if i < 0 {
		i = strings.Index(name, "_SERVICE_PORT")
	}
	if i <= 0 {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(name[:i], "_", "-")), true
}

// serviceVars returns, by namespace, the names of the variables that the
// kubelet gives a container for the Services of objects
// (cluster.ServiceEnv), whatever cluster IPs they get.
func serviceVars(objects []runtime.Object) map[string][]string {
	vars := map[string][]string{}
	for _, obj := range objects {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		svc = svc.DeepCopy()
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = "0.0.0.0" // any: only the names count
		}
		for _, e := range cluster.ServiceEnv([]*corev1.Service{svc}) {
			vars[svc.Namespace] = append(vars[svc.Namespace], e.Name)
		}
	}
	return vars
}

// unresolvedNotice says what ref does and how to resolve it: the downward
// API's entry for a name of downwardFields, otherwise to define the name.
func unresolvedNotice(ref cluster.UnresolvedRef) string {
	what, scope, place := ref.Field, "in env", ""
	if ref.Env != "" {
		what, scope, place = "env "+ref.Env, "before it in env", " before "+ref.Env
	}
	msg := fmt.Sprintf("%s refers to $(%s), which is not defined %s: it stays as written, and the process gets the text \"$(%s)\"; ",
		what, ref.Name, scope, ref.Name)
	if path, ok := downwardFields[strings.TrimPrefix(ref.Name, "MY_")]; ok {
		return msg + fmt.Sprintf("add the env entry {name: %s, valueFrom: {fieldRef: {fieldPath: %s}}}%s", ref.Name, path, place)
	}
	if svc, ok := serviceOfVar(ref.Name); ok {
		return msg + fmt.Sprintf("it is the variable of a Service %s, which the kubelet defines when the pod's namespace has that Service as the pod starts, and the workload has none: add Service %s to the manifests", svc, svc)
	}
	return msg + fmt.Sprintf("define %s in env%s", ref.Name, place)
}
