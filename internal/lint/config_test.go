package lint

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

func TestNew(t *testing.T) {
	t.Parallel()
	all := make([]string, 0, len(allRules))
	for _, r := range Rules() {
		all = append(all, r.ID)
	}
	tests := []struct {
		name    string
		cfg     Config
		want    []string
		wantErr bool
	}{
		{name: "zero config runs every rule", cfg: Config{}, want: all},
		{name: "enable", cfg: Config{Enable: []string{"shell-pid1", "pdb-missing"}}, want: []string{"pdb-missing", "shell-pid1"}},
		{name: "disable after enable", cfg: Config{Enable: []string{"shell-pid1", "pdb-missing"}, Disable: []string{"pdb-missing"}}, want: []string{"shell-pid1"}},
		{name: "disable", cfg: Config{Disable: all[1:]}, want: all[:1]},
		{name: "unknown enabled rule", cfg: Config{Enable: []string{"shell-pid-1"}}, wantErr: true},
		{name: "unknown disabled rule", cfg: Config{Disable: []string{""}}, wantErr: true},
		{name: "suppression", cfg: Config{Suppress: []Suppression{{Rule: "shell-pid1", Path: "a/*.yaml"}}}, want: all},
		{name: "empty suppression", cfg: Config{Suppress: []Suppression{{}}}, wantErr: true},
		{name: "suppression of unknown rule", cfg: Config{Suppress: []Suppression{{Rule: "shell-pid-1"}}}, wantErr: true},
		{name: "bad pattern", cfg: Config{Suppress: []Suppression{{Path: "a/[.yaml"}}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var got []string
			for _, r := range l.Rules() {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Rules() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSeverity(t *testing.T) {
	t.Parallel()
	for _, s := range []Severity{Info, Warning, Error} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got Severity
		if err := got.UnmarshalText(text); err != nil || got != s {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, got, err, s)
		}
	}
	if _, err := ParseSeverity("critical"); err == nil {
		t.Error("ParseSeverity(critical) succeeded")
	}
	if got := Severity(7).String(); got != "Severity(7)" {
		t.Errorf("Severity(7).String() = %q", got)
	}
}

func TestParseConfigFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		want    ConfigFile
		wantErr bool
	}{
		{name: "empty", text: "", want: ConfigFile{}},
		{name: "full", text: "enable: [shell-pid1]\ndisable: [pdb-missing]\nthreshold: error\nignore:\n  - rule: single-replica\n    path: staging/\n  - object: Deployment shop/*\n",
			want: ConfigFile{Enable: []string{"shell-pid1"}, Disable: []string{"pdb-missing"}, Threshold: ptr.To(Error),
				Ignore: []Suppression{{Rule: "single-replica", Path: "staging/"}, {Object: "Deployment shop/*"}}}},
		{name: "unknown key", text: "disabled: [pdb-missing]\n", wantErr: true},
		{name: "bad threshold", text: "threshold: critical\n", wantErr: true},
		{name: "not YAML", text: "enable: [\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseConfigFile([]byte(tt.text))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseConfigFile() error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseConfigFile() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSuppression(t *testing.T) {
	t.Parallel()
	const rule, file, object = "single-replica", "deploy/staging/web.yaml", "Deployment shop/web"
	tests := []struct {
		name string
		s    Suppression
		want bool
	}{
		{name: "rule", s: Suppression{Rule: rule}, want: true},
		{name: "other rule", s: Suppression{Rule: "pdb-missing"}, want: false},
		{name: "path glob", s: Suppression{Path: "deploy/*/web.yaml"}, want: true},
		{name: "directory", s: Suppression{Path: "deploy/"}, want: true},
		{name: "other directory", s: Suppression{Path: "deploy/prod/"}, want: false},
		{name: "object glob", s: Suppression{Object: "Deployment shop/*"}, want: true},
		{name: "object of another namespace", s: Suppression{Object: "Deployment other/*"}, want: false},
		{name: "all fields", s: Suppression{Rule: rule, Path: "deploy/", Object: object}, want: true},
		{name: "all but one field", s: Suppression{Rule: rule, Path: "deploy/", Object: "Service shop/web"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.s.matches(rule, file, object); got != tt.want {
				t.Errorf("%+v.matches() = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
}

// TestSuppressionByBuild: a path suppression covers the objects that a
// kustomization builds from a base elsewhere by the kustomization's
// directory, as well as by the file each was written in.
func TestSuppressionByBuild(t *testing.T) {
	t.Parallel()
	const text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  template:\n    metadata:\n      labels:\n        app: web\n" +
		"    spec:\n      containers:\n        - name: web\n          image: web\n---\n" +
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n    - port: 80\n"
	objs, errs := manifest.Parse("deploy/base/web.yaml", []byte(text))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var in Input
	for _, o := range objs {
		o.Build = filepath.Join("deploy", "staging")
		in.Objects = append(in.Objects, o)
	}
	for _, tt := range []struct {
		path string
		want int
	}{
		{path: "deploy/staging/", want: 0},
		{path: "deploy/base/", want: 0},
		{path: "deploy/*/", want: 0},
		{path: "deploy/prod/", want: 1},
	} {
		l, err := New(Config{Enable: []string{"single-replica"}, Suppress: []Suppression{{Path: tt.path}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Lint(in); len(got) != tt.want {
			t.Errorf("path %s: %d findings, want %d:\n%s", tt.path, len(got), tt.want, render(got))
		}
	}
}
