package scenario

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	vars := serviceVars(objects)
	return containerNotices(s, objects, func(d *appsv1.Deployment, c *corev1.Container) []fieldNotice {
		var notices []fieldNotice
		for _, ref := range cluster.UnresolvedRefs(c, vars[d.Namespace]...) {
			notices = append(notices, fieldNotice{ref.Field, unresolvedNotice(ref)})
		}
		return notices
	})
}

// A fieldNotice is what a notice says of a field of a container: the
// field's path below the container (env[2], args[0]) and the text.
type fieldNotice struct{ field, text string }

// containerNotices returns the notices that say gives of each container
// of the Deployments of objects, init containers first, each after the file and line of its
// field, the Deployment and the container. objects[i] is s.Objects[i] as
// the runner applies it.
func containerNotices(s *Scenario, objects []runtime.Object, say func(d *appsv1.Deployment, c *corev1.Container) []fieldNotice) []string {
	var notices []string
	for i, obj := range objects {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		o := s.Objects[i]
		spec := &d.Spec.Template.Spec
		for _, list := range []struct {
			path       string
			containers []corev1.Container
		}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
			for j := range list.containers {
				c := &list.containers[j]
				for _, n := range say(d, c) {
					where := o.File
					if line := o.FieldLine(fmt.Sprintf("spec.template.spec.%s[%d].%s", list.path, j, n.field)); line > 0 {
						where += ":" + strconv.Itoa(line)
					}
					notices = append(notices, fmt.Sprintf("%s: Deployment %s: container %s: %s", where, d.Name, c.Name, n.text))
				}
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
		for _, e := range kubeletVars(svc) {
			vars[svc.Namespace] = append(vars[svc.Namespace], e.Name)
		}
	}
	return vars
}

// kubeletVars returns the variables that the kubelet gives a container for
// Service svc (cluster.ServiceEnv), whatever cluster IP it gets: none for
// a headless Service or one without ports.
func kubeletVars(svc *corev1.Service) []corev1.EnvVar {
	svc = svc.DeepCopy()
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP = "0.0.0.0" // any: only the names count
	}
	return cluster.ServiceEnv([]*corev1.Service{svc})
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

// dnsNameNotices returns a notice for each field of a container of the
// Deployments of objects that names one of the workload's Services by its
// DNS name (shop, shop.default, shop.default.svc.cluster.local) where a
// host goes: in a URL, or before a port. A cluster with no cluster DNS,
// the embedded one and closingtime cluster, resolves no such name in its
// pods, and the container's connects fail. A bare name counts only in a
// URL or before a port, so that a word that happens to be a Service's
// name does not. The notice names the file and line of the field and says
// to use the Service's variable instead.
func dnsNameNotices(s *Scenario, objects []runtime.Object) []string {
	// The Services that have a variable to use instead (not a headless
	// one), and its name, NAME_SERVICE_HOST, the first of their variables.
	var services []*corev1.Service
	hostVar := map[*corev1.Service]string{}
	for _, obj := range objects {
		if svc, ok := obj.(*corev1.Service); ok {
			if vars := kubeletVars(svc); len(vars) > 0 {
				services = append(services, svc)
				hostVar[svc] = vars[0].Name
			}
		}
	}
	return containerNotices(s, objects, func(d *appsv1.Deployment, c *corev1.Container) []fieldNotice {
		var notices []fieldNotice
		for _, f := range containerFields(c) {
			for _, svc := range services {
				if svc.Namespace != d.Namespace {
					continue
				}
				name, ok := dnsNameIn(f.value, svc.Name, cmp.Or(svc.Namespace, metav1.NamespaceDefault))
				if !ok {
					continue
				}
				host := hostVar[svc]
				notices = append(notices, fieldNotice{f.path, fmt.Sprintf("%s names Service %s by its DNS name %q, which no pod of this cluster resolves (it has no cluster DNS): write $(%s) for the host, the Service's cluster IP, which the kubelet sets in the container's env",
					f.what, svc.Name, name, host)})
			}
		}
		return notices
	})
}

// A containerField is a string of a container that a process reads: an
// env value, or an element of command or args.
type containerField struct {
	path  string // below the container: env[2].value, args[0]
	what  string // for a notice: env BACKEND, args[0]
	value string
}

// containerFields returns c's env values, command and args.
func containerFields(c *corev1.Container) []containerField {
	var fields []containerField
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			fields = append(fields, containerField{fmt.Sprintf("env[%d].value", i), "env " + e.Name, e.Value})
		}
	}
	for i, v := range c.Command {
		fields = append(fields, containerField{fmt.Sprintf("command[%d]", i), fmt.Sprintf("command[%d]", i), v})
	}
	for i, v := range c.Args {
		fields = append(fields, containerField{fmt.Sprintf("args[%d]", i), fmt.Sprintf("args[%d]", i), v})
	}
	return fields
}

// dnsNameIn returns the first DNS name of Service name in namespace that s
// gives as a host: a qualified one (name.namespace, with .svc and
// .svc.cluster.local or not) anywhere a host name can stand, the bare
// name only after "://" or before ":PORT".
func dnsNameIn(s, name, namespace string) (string, bool) {
	qualified := []string{name + "." + namespace + ".svc.cluster.local", name + "." + namespace + ".svc", name + "." + namespace}
	// isHostByte says whether b can be part of a host name.
	isHostByte := func(b byte) bool {
		return b == '-' || b == '.' || b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
	}
	// One occurrence of name per round; the loop ends at the end of s.
	for from := 0; ; {
		i := strings.Index(s[from:], name)
		if i < 0 {
			return "", false
		}
		start := from + i
		from = start + 1
		if start > 0 && isHostByte(s[start-1]) {
			continue
		}
		rest := s[start:]
		for _, q := range qualified {
			if strings.HasPrefix(rest, q) && (len(rest) == len(q) || !isHostByte(rest[len(q)])) {
				return q, true
			}
		}
		after := rest[len(name):]
		if len(after) > 0 && isHostByte(after[0]) {
			continue
		}
		inURL := strings.HasSuffix(s[:start], "://")
		beforePort := len(after) > 1 && after[0] == ':' && '0' <= after[1] && after[1] <= '9'
		if inURL || beforePort {
			return name, true
		}
	}
}
