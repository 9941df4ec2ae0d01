package lint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

func TestIsDockerfileName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{"Dockerfile", true},
		{"dockerfile", true},
		{"Containerfile", true},
		{"Dockerfile.prod", true},
		{"Dockerfile.dev", true},
		{"Dockerfile.good", true},
		{"Containerfile.ci", true},
		{"DOCKERFILE.PROD", true},
		{"deploy/Dockerfile.prod", true},
		{"api.Dockerfile", true},
		{"good.Dockerfile", true},
		{"web.containerfile", true},
		{"Dockerfile.dockerignore", false},
		{"api.Dockerfile.dockerignore", false},
		{".dockerignore", false},
		{"Dockerfiles", false},
		{"MyDockerfile", false},
		{"Dockerfile-prod", false},
		{"deploy.yaml", false},
		{"Dockerfile.d/deploy.yaml", false},
	}
	for _, tt := range tests {
		if got := IsDockerfileName(tt.name); got != tt.want {
			t.Errorf("IsDockerfileName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestReadDockerfileNames checks that Read takes the Dockerfiles that
// docker build -f and hadolint take, whether named or found in a
// directory, and lints each: every one here starts npm with a shell.
func TestReadDockerfileNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shellForm := &fstest.MapFile{Data: []byte("FROM node:22\nCMD npm start\n")}
	files := fstest.MapFS{
		"df/Dockerfile":              shellForm,
		"df/Dockerfile.prod":         shellForm,
		"df/Dockerfile.dev":          shellForm,
		"df/Containerfile.ci":        shellForm,
		"df/api.Dockerfile":          shellForm,
		"df/Dockerfile.dockerignore": {Data: []byte("node_modules\n")},
		"df/README.md":               {Data: []byte("# not read\n")},
		"single/Dockerfile.good":     shellForm,
	}
	if err := os.CopyFS(dir, files); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		paths []string
		want  []string
	}{
		{name: "directory", paths: []string{"df"}, want: []string{"df/Containerfile.ci", "df/Dockerfile", "df/Dockerfile.dev", "df/Dockerfile.prod", "df/api.Dockerfile"}},
		{name: "file", paths: []string{"single/Dockerfile.good"}, want: []string{"single/Dockerfile.good"}},
	}
	l, err := New(Config{Enable: []string{shellPID1.ID}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			paths := make([]string, len(tt.paths))
			for i, p := range tt.paths {
				paths[i] = filepath.Join(dir, p)
			}
			in, errs := Read(manifest.Reader{}, paths)
			if len(errs) > 0 {
				t.Fatalf("Read(%v) errors = %v, want none", tt.paths, errs)
			}
			var got []string
			for _, f := range l.Lint(in) {
				rel, err := filepath.Rel(dir, f.File)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, filepath.ToSlash(rel))
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("files with a shell-pid1 finding mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadSkipsFilesThatAreNotManifests checks that a directory's JSON and
// YAML files that hold no Kubernetes object are skipped and listed, while
// a manifest with a mistake, even one that hides its kind, is read (an
// error, or an object of a kind closingtime does not know),
// and a file named in the paths is always read as manifests.
func TestReadSkipsFilesThatAreNotManifests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        - name: web\n          image: web\n"
	files := fstest.MapFS{
		"app/deploy.yaml":    {Data: []byte(deployment)},
		"app/r-1.json":       {Data: []byte(`{"scenarios": [{"name": "rollout", "deployment": "default/web", "runs": [{"timeline": [{"kind": "sigterm"}]}]}]}`)},
		"app/package.json":   {Data: []byte(`{"name": "web", "scripts": {"start": "node server.js"}}`)},
		"app/values.yaml":    {Data: []byte("replicas: 3\nimage:\n  tag: v1\n")},
		"app/list.yaml":      {Data: []byte("- a\n- b\n")},
		"app/typo-kind.yaml": {Data: []byte("apiVersion: apps/v1\nkind: Deploymnet\nmetadata:\n  name: web\n")},
		"app/no-kind.yaml":   {Data: []byte("apiversion: apps/v1\nmetadata:\n  name: web\n")},
		"app/syntax.yaml":    {Data: []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n spec: {}\n")},
		"app/broken.json":    {Data: []byte(`{"apiVersion": "v1", "kind": "Service"`)},
		"app/second.yaml":    {Data: []byte("replicas: 3\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n")},
		"named/values.json":  {Data: []byte(`{"replicas": 3}`)},
	}
	if err := os.CopyFS(dir, files); err != nil {
		t.Fatal(err)
	}
	rel := func(name string) string {
		r, err := filepath.Rel(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(r)
	}
	in, errs := Read(manifest.Reader{}, []string{filepath.Join(dir, "app"), filepath.Join(dir, "named", "values.json")})
	var skipped, failed []string
	for _, name := range in.Skipped {
		skipped = append(skipped, rel(name))
	}
	for _, err := range errs {
		var e *manifest.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not a *manifest.Error", err)
		}
		failed = append(failed, rel(e.File))
	}
	slices.Sort(failed)
	if diff := cmp.Diff([]string{"app/list.yaml", "app/package.json", "app/r-1.json", "app/values.yaml"}, skipped); diff != "" {
		t.Errorf("skipped mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"app/broken.json", "app/no-kind.yaml", "app/second.yaml", "app/syntax.yaml", "app/typo-kind.yaml", "named/values.json"}, failed); diff != "" {
		t.Errorf("files with errors mismatch (-want +got):\n%s\nerrors: %v", diff, errs)
	}
	// A kind misspelt in a built-in group is an error, not a custom
	// resource.
	if len(in.Objects) != 2 {
		t.Errorf("read %d objects, want the Deployment and second.yaml's Service", len(in.Objects))
	}
}
