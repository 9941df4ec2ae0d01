package lint

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// TestLintRelatesWithinDirectory checks that a Service relates to the
// workloads of its own directory only, as if each directory were applied
// to a cluster of its own.
func TestLintRelatesWithinDirectory(t *testing.T) {
	t.Parallel()
	const service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n"
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n" +
		"  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: web\n"
	tests := []struct {
		name                    string
		serviceFile, deployFile string
		// serviceBuild and deployBuild are the kustomizations that built
		// them, "" for none.
		serviceBuild, deployBuild string
		wantFindings              int
	}{
		{name: "same directory", serviceFile: "app/service.yaml", deployFile: "app/deployment.yaml", wantFindings: 1},
		{name: "sibling directories", serviceFile: "staging/service.yaml", deployFile: "prod/deployment.yaml", wantFindings: 0},
		{name: "one kustomization's output", serviceFile: "base/service.yaml", serviceBuild: "prod",
			deployFile: "base/deployment.yaml", deployBuild: "prod", wantFindings: 1},
		{name: "a kustomization and its directory", serviceFile: "base/service.yaml", serviceBuild: "prod",
			deployFile: "prod/deployment.yaml", wantFindings: 0},
		{name: "two kustomizations of one base", serviceFile: "base/service.yaml", serviceBuild: "staging",
			deployFile: "base/deployment.yaml", deployBuild: "prod", wantFindings: 0},
	}
	l, err := New(Config{Enable: []string{"readiness-probe-missing"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var in Input
			for _, f := range []struct{ name, build, text string }{{tt.serviceFile, tt.serviceBuild, service}, {tt.deployFile, tt.deployBuild, deployment}} {
				objs, errs := manifest.Parse(f.name, []byte(f.text))
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				for _, o := range objs {
					o.Build = f.build
					in.Objects = append(in.Objects, o)
				}
			}
			if got := l.Lint(in); len(got) != tt.wantFindings {
				t.Errorf("Lint() = %d findings, want %d:\n%s", len(got), tt.wantFindings, render(got))
			}
		})
	}
}

// TestLintVariantsSideBySide checks that variants of one manifest in one
// directory, each with the same Deployment and Service, name each Service
// once in a message, and are reported as Duplicates; a copy in another
// directory is no duplicate.
func TestLintVariantsSideBySide(t *testing.T) {
	t.Parallel()
	const variant = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n---\n" +
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n" +
		"  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: web\n"
	var in Input
	for _, name := range []string{"app/deploy.yaml", "app/deploy2.yaml", "app/deploy3.yaml", "other/deploy.yaml"} {
		objs, errs := manifest.Parse(name, []byte(variant))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		in.Objects = append(in.Objects, objs...)
	}
	l, err := New(Config{Enable: []string{"readiness-probe-missing"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Lint(in) {
		if want := `container "web" has no readinessProbe, but Service web sends it traffic`; f.Message != want {
			t.Errorf("%s: message = %q, want %q", f.File, f.Message, want)
		}
	}
	want := []Duplicate{
		{Object: "Service web", At: []string{"app/deploy.yaml:1", "app/deploy2.yaml:1", "app/deploy3.yaml:1"}},
		{Object: "Deployment web", At: []string{"app/deploy.yaml:11", "app/deploy2.yaml:11", "app/deploy3.yaml:11"}},
	}
	if diff := cmp.Diff(want, Duplicates(in)); diff != "" {
		t.Errorf("Duplicates() mismatch (-want +got):\n%s", diff)
	}
}
