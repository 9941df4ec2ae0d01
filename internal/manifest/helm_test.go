package manifest

import (
	"errors"
	"path/filepath"
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
				if o.File != chart+HelmSuffix {
					t.Errorf("object %s from %q, want %q", o, o.File, chart+HelmSuffix)
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
