package lint

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// index holds the objects the rules read, related to each other as the
// cluster relates them, the Dockerfiles and supervisord programs, and what
// rollouts measured.
type index struct {
	workloads   []*workload
	services    []*service
	pdbs        []*pdb
	hpas        []*hpa
	dockerfiles []*dockerfile
	programs    []*program
	// supervised are the programs of every supervisord configuration of
	// the input, for the workloads that run supervisord: each index has
	// them, where only the first reports on programs; and those of the
	// group's ConfigMaps, which no rule reports on as programs.
	supervised []*program
	measured   []Measurement
}

// workload is an object that runs pods from a pod template.
type workload struct {
	obj manifest.Object
	// template is the pod template; for a Pod, its own metadata and spec.
	template *corev1.PodTemplateSpec
	// templatePath is the template's field path, "" for a Pod.
	templatePath string
	// replicas is spec.replicas for the kinds that have it (nil when
	// unset); replicated reports whether the kind has it.
	replicas   *int32
	replicated bool
	deployment *appsv1.Deployment // non-nil for a Deployment
	daemonSet  *appsv1.DaemonSet  // non-nil for a DaemonSet

	services []*service
	pdbs     []*pdb
	hpa      *hpa
}

type service struct {
	obj manifest.Object
	svc *corev1.Service
}

type pdb struct {
	obj       manifest.Object
	pdb       *policyv1.PodDisruptionBudget
	workloads []*workload
}

// hpa is a HorizontalPodAutoscaler of autoscaling/v1 or v2.
type hpa struct {
	obj         manifest.Object
	target      autoscalingv2.CrossVersionObjectReference
	minReplicas int32 // defaulted
	maxReplicas int32
}

// newIndexes returns one index per group of in's objects (see
// clusters). The Dockerfiles and programs go in the first.
func newIndexes(in Input) []*index {
	groups := clusters(in.Objects)
	ixs := []*index{{dockerfiles: in.dockerfiles, programs: in.programs, supervised: slices.Clip(in.programs)}}
	for i, objs := range groups {
		if i > 0 {
			ixs = append(ixs, &index{supervised: slices.Clip(in.programs)})
		}
		ixs[i].addObjects(objs)
	}
	return ixs
}

// clusters groups objs by directory, in the order they first appear, as
// if each directory were applied to a cluster of its own: unrelated
// manifests in sibling directories (overlays, environments, separate
// applications) must not select each other's pods. The output of a
// kustomization or a chart is a directory of its own.
func clusters(objs []manifest.Object) [][]manifest.Object {
	// A directory of manifests, or a kustomization's or a chart's output.
	type group struct {
		dir   string
		built bool
	}
	var dirs []group
	byDir := make(map[group][]manifest.Object)
	for _, o := range objs {
		dir := group{filepath.Dir(o.File), false}
		if o.Build != "" {
			dir = group{o.Build, true}
		}
		if _, ok := byDir[dir]; !ok {
			dirs = append(dirs, dir)
		}
		byDir[dir] = append(byDir[dir], o)
	}
	out := make([][]manifest.Object, len(dirs))
	for i, dir := range dirs {
		out[i] = byDir[dir]
	}
	return out
}

// Duplicate is an object that one group of objects lint relates as one
// cluster's (a directory, a kustomization's or a chart's output) writes
// more than once, such as variants of one manifest side by side. A
// cluster holds one object of a kind, namespace and name, so lint relates
// each copy to the others' Services and budgets, as no cluster would.
type Duplicate struct {
	// Object names it, as "Deployment shop/web".
	Object string
	// At lists where each copy is written, as "deploy.yaml:1".
	At []string
}

// Duplicates returns the objects of in written more than once in one
// group, in the order they first appear.
func Duplicates(in Input) []Duplicate {
	var out []Duplicate
	for _, objs := range clusters(in.Objects) {
		type key struct{ kind, namespace, name string }
		byKey := make(map[key]int) // index in out
		for _, o := range objs {
			k := key{o.Kind(), namespace(o), o.Meta().GetName()}
			at := fmt.Sprintf("%s:%d", o.File, o.Line)
			if i, ok := byKey[k]; ok {
				out[i].At = append(out[i].At, at)
				continue
			}
			byKey[k] = len(out)
			out = append(out, Duplicate{Object: o.String(), At: []string{at}})
		}
	}
	return slices.DeleteFunc(out, func(d Duplicate) bool { return len(d.At) < 2 })
}

// addObjects adds objs to ix and relates them.
func (ix *index) addObjects(objs []manifest.Object) {
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *appsv1.Deployment:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.Template, templatePath: "spec.template", replicas: v.Spec.Replicas, replicated: true, deployment: v})
		case *appsv1.StatefulSet:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.Template, templatePath: "spec.template", replicas: v.Spec.Replicas, replicated: true})
		case *appsv1.ReplicaSet:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.Template, templatePath: "spec.template", replicas: v.Spec.Replicas, replicated: true})
		case *appsv1.DaemonSet:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.Template, templatePath: "spec.template", daemonSet: v})
		case *batchv1.Job:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.Template, templatePath: "spec.template"})
		case *batchv1.CronJob:
			ix.addWorkload(&workload{obj: o, template: &v.Spec.JobTemplate.Spec.Template, templatePath: "spec.jobTemplate.spec.template"})
		case *corev1.Pod:
			ix.addWorkload(&workload{obj: o, template: &corev1.PodTemplateSpec{ObjectMeta: v.ObjectMeta, Spec: v.Spec}})
		case *corev1.Service:
			ix.services = append(ix.services, &service{obj: o, svc: v})
		case *corev1.ConfigMap:
			// A supervisord configuration mounted from a ConfigMap: its
			// programs are matched to the workloads that run supervisord,
			// by the key's name (their file is "ConfigMap NAME/KEY").
			for _, key := range slices.Sorted(maps.Keys(v.Data)) {
				if IsSupervisordName(key) {
					ix.supervised = append(ix.supervised, parseSupervisord("ConfigMap "+v.Name+"/"+key, []byte(v.Data[key]))...)
				}
			}
		case *policyv1.PodDisruptionBudget:
			ix.pdbs = append(ix.pdbs, &pdb{obj: o, pdb: v})
		case *autoscalingv2.HorizontalPodAutoscaler:
			ix.hpas = append(ix.hpas, &hpa{obj: o, target: v.Spec.ScaleTargetRef, minReplicas: ptr.Deref(v.Spec.MinReplicas, cluster.DefaultHPAMinReplicas), maxReplicas: v.Spec.MaxReplicas})
		case *autoscalingv1.HorizontalPodAutoscaler:
			ref := autoscalingv2.CrossVersionObjectReference(v.Spec.ScaleTargetRef)
			ix.hpas = append(ix.hpas, &hpa{obj: o, target: ref, minReplicas: ptr.Deref(v.Spec.MinReplicas, cluster.DefaultHPAMinReplicas), maxReplicas: v.Spec.MaxReplicas})
		}
	}
	for _, w := range ix.workloads {
		ns, podLabels := namespace(w.obj), labels.Set(w.template.Labels)
		for _, s := range ix.services {
			// A Service without a selector has its endpoints managed by
			// hand; it selects no workload.
			if namespace(s.obj) == ns && len(s.svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(s.svc.Spec.Selector).Matches(podLabels) {
				w.services = append(w.services, s)
			}
		}
		for _, p := range ix.pdbs {
			if namespace(p.obj) == ns && p.selector().Matches(podLabels) {
				w.pdbs = append(w.pdbs, p)
				p.workloads = append(p.workloads, w)
			}
		}
		for _, h := range ix.hpas {
			if namespace(h.obj) == ns && h.target.Kind == w.obj.Kind() && h.target.Name == w.obj.Meta().GetName() {
				w.hpa = h
			}
		}
	}
}

func (ix *index) addWorkload(w *workload) { ix.workloads = append(ix.workloads, w) }

// namespace returns obj's namespace; an object that names none is created
// in "default" by kubectl without -n.
func namespace(obj manifest.Object) string {
	if ns := obj.Meta().GetNamespace(); ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

// selector returns the PDB's selector. In policy/v1 a null selector selects
// no pod and an empty one every pod of the namespace (k8s.io/api policy/v1
// types.go, PodDisruptionBudgetSpec.Selector); an invalid one selects none.
func (p *pdb) selector() labels.Selector {
	s, err := metav1.LabelSelectorAsSelector(p.pdb.Spec.Selector)
	if err != nil {
		return labels.Nothing()
	}
	return s
}

// batch reports whether the workload is a Job or CronJob, whose pods run
// to completion rather than serve.
func (w *workload) batch() bool {
	k := w.obj.Kind()
	return k == "Job" || k == "CronJob"
}

// specPath is the path of the pod spec.
func (w *workload) specPath() string {
	if w.templatePath == "" {
		return "spec"
	}
	return w.templatePath + ".spec"
}

// containerPath is the path of the i-th container.
func (w *workload) containerPath(i int) string {
	return fmt.Sprintf("%s.containers[%d]", w.specPath(), i)
}

// replicaCount returns spec.replicas with its default.
func (w *workload) replicaCount() int32 {
	if w.replicas == nil {
		return cluster.DefaultReplicas
	}
	return *w.replicas
}

// grace returns the pod's terminationGracePeriodSeconds with its default,
// and, for messages, " (the default)" when it is the default.
func (w *workload) grace() (seconds int64, source string) {
	if g := w.template.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g, ""
	}
	return cluster.DefaultTerminationGracePeriodSeconds, " (the default)"
}

// replicasField describes where replicaCount comes from, for messages.
func (w *workload) replicasField() string {
	if w.replicas == nil {
		return fmt.Sprintf("spec.replicas unset, default %d", cluster.DefaultReplicas)
	}
	return "spec.replicas"
}

// annotation returns the workload's annotation key, from the object or
// else from its pod template.
func (w *workload) annotation(key string) (string, bool) {
	if v, ok := w.obj.Meta().GetAnnotations()[key]; ok {
		return v, true
	}
	v, ok := w.template.Annotations[key]
	return v, ok
}

// annotationSeconds reads a whole-seconds annotation. It returns ok false
// when the annotation is absent, and an error naming it when its value is
// not a non-negative integer.
func (w *workload) annotationSeconds(key string) (seconds int64, ok bool, err error) {
	v, ok := w.annotation(key)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("annotation %s: %q is not a whole number of seconds", key, v)
	}
	return n, true, nil
}

// annotationPath is the field path of the workload's annotation key,
// wherever it is written.
func (w *workload) annotationPath(key string) string {
	if _, ok := w.obj.Meta().GetAnnotations()[key]; ok || w.templatePath == "" {
		return "metadata.annotations[" + key + "]"
	}
	return w.templatePath + ".metadata.annotations[" + key + "]"
}

// serviceNames lists the Services that select the workload, for
// messages, each name once: copies of one Service written side by side
// (see Duplicate) all select it.
func (w *workload) serviceNames() string {
	var names []string
	for _, s := range w.services {
		if name := s.obj.String(); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// servingContainers returns the indexes of the containers that the
// workload's Services send traffic to: those that declare a port a Service
// targets (by number or name; an unset targetPort is the Service port).
// When no declared port matches, as when a container listens without
// declaring its port, every container is taken to serve.
func (w *workload) servingContainers() []int {
	cs := w.template.Spec.Containers
	var idx []int
	for i, c := range cs {
		if w.targets(c) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		for i := range cs {
			idx = append(idx, i)
		}
	}
	return idx
}

func (w *workload) targets(c corev1.Container) bool {
	for _, s := range w.services {
		for _, sp := range s.svc.Spec.Ports {
			tp := sp.TargetPort
			for _, cp := range c.Ports {
				switch {
				case tp.Type == intstr.String && tp.StrVal != "" && tp.StrVal == cp.Name:
					return true
				case tp.Type == intstr.Int && tp.IntVal != 0 && tp.IntVal == cp.ContainerPort:
					return true
				case tp.Type == intstr.Int && tp.IntVal == 0 && sp.Port == cp.ContainerPort:
					return true
				}
			}
		}
	}
	return false
}
