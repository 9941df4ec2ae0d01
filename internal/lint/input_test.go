package lint

import (
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
