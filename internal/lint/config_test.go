package lint

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
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
			want: ConfigFile{Enable: []string{"shell-pid1"}, Disable: []string{"pdb-missing"}, Threshold: ptr(Error),
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

func ptr[T any](v T) *T { return &v }
