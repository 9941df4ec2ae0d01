package scenario

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
)

// TestReadFile reads every testdata/valid-*.yaml, which must parse, and
// every invalid-*.yaml, whose errors must match its .golden file.
func TestReadFile(t *testing.T) {
	files, err := filepath.Glob("testdata/*-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		valid := strings.HasPrefix(name, "valid-")
		if !valid && !strings.HasPrefix(name, "invalid-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := ReadFile(file)
			if valid {
				if err != nil {
					t.Fatalf("ReadFile() = %v, want no error", err)
				}
				if len(s.Objects) == 0 {
					t.Errorf("no workload objects")
				}
				return
			}
			if err == nil {
				t.Fatal("ReadFile() succeeded, want errors")
			}
			golden.Check(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(err.Error()+"\n"))
		})
	}
}

// TestParseDefaults checks the settings of a scenario that sets few, and
// of a quick run of one that has quick settings.
func TestParseDefaults(t *testing.T) {
	inline, err := ReadFile("testdata/valid-inline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ReadFile("testdata/valid-files.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		s     *Scenario
		quick bool
		want  settings
	}{
		{name: "defaults", s: inline, want: settings{repetitions: DefaultRepetitions, warmUp: DefaultWarmUp, after: DefaultAfter, settle: DefaultSettle, rl: DefaultRunLimit}},
		{name: "set", s: files, want: settings{repetitions: 2, warmUp: 1e9, after: 2e9, settle: 3e9, rl: 60e9}},
		{name: "quick", s: files, quick: true, want: settings{repetitions: 1, warmUp: 1e9, after: 2e9, settle: 3e9, rl: 60e9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Runner{cfg: RunnerConfig{Quick: tt.quick}}
			if got := r.settings(tt.s); got != tt.want {
				t.Errorf("settings = %+v, want %+v", got, tt.want)
			}
		})
	}
}
