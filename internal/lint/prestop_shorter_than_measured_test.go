package lint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
)

func TestPreStopShorterThanMeasured(t *testing.T) { testRule(t, &preStopShorterThanMeasured) }

// TestMeasure reads the results files in testdata/measured: each valid-*
// file's measurements, and each invalid-* file's error, must match its
// .golden file.
func TestMeasure(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "measured", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("testdata/measured has no results files")
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			measured, err := readMeasured(t, file)
			var got string
			switch {
			case strings.HasPrefix(name, "valid-") && err != nil:
				t.Fatalf("Measure(%s) = %v, want no error", name, err)
			case strings.HasPrefix(name, "invalid-") && err == nil:
				t.Fatalf("Measure(%s) = %+v, want an error", name, measured)
			case err != nil:
				got = err.Error() + "\n"
			}
			for _, m := range measured {
				got += fmt.Sprintf("%+v\n", m)
			}
			golden.Check(t, strings.TrimSuffix(file, filepath.Ext(file))+".golden", []byte(got))
		})
	}
}

func TestUnmatched(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "prestop-shorter-than-measured")
	measured, err := readMeasured(t, filepath.Join(dir, "valid-other-namespace.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Measured: measured})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input string
		want  int
	}{
		{name: "same namespace and name", input: "valid-long-enough.yaml", want: 0},
		{name: "other namespace", input: "valid-other-namespace.yaml", want: 1},
		{name: "other name", input: "../readiness-probe-missing/invalid-no-probe.yaml", want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := l.Unmatched(readInput(t, filepath.Join(dir, tt.input)))
			if len(got) != tt.want {
				t.Errorf("Unmatched(%s) = %+v, want %d measurements", tt.input, got, tt.want)
			}
		})
	}
}
