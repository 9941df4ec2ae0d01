package manifest

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

func TestReadChart(t *testing.T) {
	t.Parallel()
	chart := filepath.Join("testdata", "helm", "web")
	tests := []struct {
		name         string
		values       []string
		wantKinds    []string
		wantReplicas int32
	}{
		{name: "chart values", wantKinds: []string{"Deployment"}, wantReplicas: 1},
		{name: "values file", values: []string{filepath.Join("testdata", "helm", "prod-values.yaml")},
			wantKinds: []string{"Deployment", "PodDisruptionBudget"}, wantReplicas: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs, errs := Reader{Values: tt.values}.Read([]string{chart})
			if len(errs) > 0 {
				t.Fatalf("Read() errors = %v", errs)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.Kind())
				if o.Build != chart || filepath.Dir(o.File) != filepath.Join(chart, "templates") {
					t.Errorf("object %s from %q built by %q, want one of %s/templates built by %s", o, o.File, o.Build, chart, chart)
				}
				if d, ok := o.Obj.(*appsv1.Deployment); ok {
					if d.Name != HelmReleaseName+"-web" || *d.Spec.Replicas != tt.wantReplicas {
						t.Errorf("Deployment %s with %d replicas, want %s-web with %d", d.Name, *d.Spec.Replicas, HelmReleaseName, tt.wantReplicas)
					}
				}
			}
			if diff := cmp.Diff(tt.wantKinds, kinds); diff != "" {
				t.Errorf("kinds mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChartPositions: a rendered object's fields are placed at the lines
// of the template that wrote them, a value written by an action included;
// what an include or toYaml wrote, at its nearest ancestor in the
// template.
func TestChartPositions(t *testing.T) {
	t.Parallel()
	chart := filepath.Join("testdata", "helm", "web")
	objs, errs := Reader{}.Read([]string{chart})
	if len(errs) > 0 || len(objs) != 1 {
		t.Fatalf("Read() = %d objects, errors %v; want the Deployment", len(objs), errs)
	}
	o := objs[0]
	if want := filepath.Join(chart, "templates", "deployment.yaml"); o.File != want || o.Line != 1 {
		t.Errorf("Deployment at %s:%d, want %s:1", o.File, o.Line, want)
	}
	for path, want := range map[string]int{
		"metadata.name":                          4,
		"spec.replicas":                          6,
		"spec.selector.matchLabels[app]":         9,
		"spec.template.spec.containers[0]":       16,
		"spec.template.spec.containers[0].image": 17,
		// Not written: the nearest ancestor that is.
		"spec.template.spec.containers[0].readinessProbe": 16,
		"spec.strategy": 5,
	} {
		if got := o.FieldLine(path); got != want {
			t.Errorf("FieldLine(%s) = %d, want %d", path, got, want)
		}
	}
}

func TestAlignLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		template string
		rendered string
		want     []int
	}{
		{name: "literal lines", template: "a: 1\nb: 2\n", rendered: "a: 1\nb: 2\n", want: []int{1, 2}},
		{name: "a value of an action", template: "name: {{ .Values.name }}\nimage: {{ .Values.repo }}/{{ .Values.name }}:{{ .Values.tag }}\n",
			rendered: "name: web\nimage: registry.example/web:1.4\n", want: []int{1, 2}},
		{name: "actions that write nothing", template: "a:\n{{- if .Values.b }}\n  b: 1\n{{- end }}\n  c: 2\n",
			rendered: "a:\n  b: 1\n  c: 2\n", want: []int{1, 3, 5}},
		{name: "lines an action wrote", template: "resources:\n  {{- toYaml .Values.resources | nindent 2 }}\nc: 3\n",
			rendered: "resources:\n  limits:\n    cpu: 1\nc: 3\n", want: []int{1, 0, 0, 3}},
		{name: "trim markers", template: "a: {{- .Values.a }}\n{{ .Values.b -}} :b\n", rendered: "a:1\nx:b\n", want: []int{1, 2}},
		{name: "a branch not taken", template: "{{- if .Values.x }}\nkind: A\n{{- else }}\nkind: B\n{{- end }}\nname: n\n",
			rendered: "kind: B\nname: n\n", want: []int{4, 6}},
		{name: "blank lines match nothing", template: "a: 1\n\nb: 2\n", rendered: "a: 1\n\n\nb: 2\n", want: []int{1, 0, 0, 3}},
		{name: "an unclosed action matches nothing", template: "a: {{ include \"x\"\n  . }}\n", rendered: "a: y\n", want: []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, alignLines([]byte(tt.rendered), []byte(tt.template))); diff != "" {
				t.Errorf("alignLines() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadChartError(t *testing.T) {
	t.Parallel()
	broken := filepath.Join("testdata", "helm", "broken")
	objs, errs := Reader{}.Read([]string{broken})
	if len(objs) != 0 || len(errs) != 1 {
		t.Fatalf("Read() = %d objects, errors %v; want one error", len(objs), errs)
	}
	var e *Error
	if !errors.As(errs[0], &e) || e.File != broken || !strings.Contains(e.Error(), "kind is required") {
		t.Errorf("error = %v, want a helm template error naming %s", errs[0], broken)
	}
}

// TestChartSources: a subchart's objects are placed in its template when
// it is a directory named as the subchart, and at the dependencies of the
// chart's Chart.yaml when it is not; an object whose first line is no
// template line at its first line that is; a YAML mistake in a rendered
// template is reported at the template's line.
func TestChartSources(t *testing.T) {
	t.Parallel()
	const service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Chart.Name }}\nspec:\n  ports:\n    - port: 80\n"
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"app/Chart.yaml":             "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n  - name: db\n  - name: cache\n",
		"app/templates/service.yaml": service,
		// An object whose first line an action wrote whole: placed at
		// its first line that the template holds, not at the separator.
		"app/templates/settings.yaml":             "# Settings.\n---\n{{ print \"apiVersion: v1\" }}\nkind: ConfigMap\nmetadata:\n  name: settings\n",
		"app/charts/db/Chart.yaml":                "apiVersion: v2\nname: db\nversion: 1.0.0\n",
		"app/charts/db/templates/service.yaml":    "# The database.\n" + service,
		"app/charts/cache-2.0/Chart.yaml":         "apiVersion: v2\nname: cache\nversion: 2.0.0\n",
		"app/charts/cache-2.0/templates/svc.yaml": service,
		"broken/Chart.yaml":                       "apiVersion: v2\nname: broken\nversion: 1.0.0\n",
		"broken/templates/service.yaml":           "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Chart.Name }}\n labels: {}\n",
	})
	app := filepath.Join(dir, "app")
	objs, errs := Reader{}.Read([]string{app, filepath.Join(dir, "broken")})
	var got []string
	for _, o := range objs {
		rel, err := filepath.Rel(dir, o.File)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s:%d ports:%d", o, filepath.ToSlash(rel), o.Line, o.FieldLine("spec.ports[0].port")))
	}
	slices.Sort(got)
	want := []string{
		"ConfigMap settings app/templates/settings.yaml:4 ports:4",
		"Service app app/templates/service.yaml:1 ports:7",
		"Service cache app/Chart.yaml:4 ports:4",
		"Service db app/charts/db/templates/service.yaml:2 ports:8",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	var e *Error
	if len(errs) != 1 || !errors.As(errs[0], &e) || e.File != filepath.Join(dir, "broken", "templates", "service.yaml") || e.Line != 5 {
		t.Errorf("errors = %v, want broken/templates/service.yaml:5", errs)
	}
}
