package lint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestPreStopShorterThanMeasuredLeavesNoDelay checks that a container with
// no preStop delay, behind a Service, gets one finding, from
// prestop-delay-missing, and not a second one from the measurement.
func TestPreStopShorterThanMeasuredLeavesNoDelay(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "prestop-shorter-than-measured", "valid-no-prestop-behind-service.yaml")
	measured, err := readMeasured(t, strings.TrimSuffix(file, ".yaml")+measuredSuffix)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Enable: []string{preStopDelayMissing.ID, preStopShorterThanMeasured.ID}, Measured: measured})
	if err != nil {
		t.Fatal(err)
	}
	got := l.Lint(readInput(t, file))
	if len(got) != 1 || got[0].Rule != preStopDelayMissing.ID {
		t.Errorf("Lint(%s) = %s; want one finding, of %s", file, render(got), preStopDelayMissing.ID)
	}
}

func TestMeasurementJudge(t *testing.T) {
	t.Parallel()
	base := Measurement{Deployment: "default/app", Runs: 1, OldPods: 3}
	tail := base
	tail.Served, tail.Tail, tail.Gap = 3, 600*time.Millisecond, 4400*time.Millisecond
	failedAt := func(preStop time.Duration) Measurement {
		m := base
		m.Served, m.Tail, m.Gap = 3, -1500*time.Millisecond, 1500*time.Millisecond+preStop
		m.Failed, m.FailedPreStop = 2, preStop
		return m
	}
	tests := []struct {
		name      string
		m         Measurement
		seconds   int64
		want      bool
		message   string // a part of the message
		fix       string // a part of the fix
		notInText string // in neither
	}{
		{name: "tail longer than delay", m: tail, seconds: 1, want: true, message: "preStop is 1 s, and that tail and the 1 s margin need 1.60 s", fix: "at least 2"},
		{name: "tail without delay", m: tail, seconds: 0, want: true, message: "the container has no preStop delay, and that tail", fix: "at least 2", notInText: "preStop is 0 s"},
		{name: "tail covered", m: tail, seconds: 2, want: false},
		{name: "failures at measured delay", m: failedAt(5 * time.Second), seconds: 5, want: true, message: "2 requests failed within 1 s of an old pod's SIGTERM, which came 5.00 s after its termination started; preStop is 5 s", fix: "beyond 5 s"},
		{name: "failures without delay", m: failedAt(0), seconds: 0, want: true, message: "2 requests failed within 1 s of an old pod's SIGTERM; the container has no preStop delay", fix: "Add lifecycle.preStop.sleep.seconds", notInText: "0 s"},
		{name: "failures at a shorter delay than now", m: failedAt(2 * time.Second), seconds: 5, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, ok := tt.m.judge(tt.seconds)
			if ok != tt.want {
				t.Fatalf("judge(%d) = %q, %v; want %v", tt.seconds, f.message, ok, tt.want)
			}
			if !strings.Contains(f.message, tt.message) || !strings.Contains(f.fix, tt.fix) {
				t.Errorf("judge(%d) = %q, fix %q; want %q and %q in them", tt.seconds, f.message, f.fix, tt.message, tt.fix)
			}
			if tt.notInText != "" && (strings.Contains(f.message, tt.notInText) || strings.Contains(f.fix, tt.notInText)) {
				t.Errorf("judge(%d) = %q, fix %q; want no %q", tt.seconds, f.message, f.fix, tt.notInText)
			}
		})
	}
}

// TestMeasuredChecks checks that each measured Deployment's serving
// container gets a sentence saying what was compared and the verdict,
// finding or not, and that none comes when the rule does not run.
func TestMeasuredChecks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "prestop-shorter-than-measured")
	tests := []struct {
		name    string
		enable  []string
		want    string // a part of the only sentence; "" for none
		wantNot string
	}{
		{name: "valid-long-enough", want: `Deployment app (1 run, 3 old pods): its old pods got new connections until 0.61 s after their termination started; container "app"'s preStop of 5 s covers it, with the 1 s margin`},
		{name: "invalid-exec-sleep-short", want: `container "app"'s preStop of 1 s falls short (prestop-shorter-than-measured)`},
		{name: "invalid-failures-at-sigterm", want: "3 requests failed within 1 s of a SIGTERM", wantNot: "covers"},
		{name: "valid-no-prestop-behind-service", want: `container "app" has no preStop delay (prestop-delay-missing)`},
		{name: "valid-long-enough", enable: []string{preStopDelayMissing.ID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(dir, tt.name+".yaml")
			measured, err := readMeasured(t, filepath.Join(dir, tt.name)+measuredSuffix)
			if err != nil {
				t.Fatal(err)
			}
			l, err := New(Config{Enable: tt.enable, Measured: measured})
			if err != nil {
				t.Fatal(err)
			}
			got := l.MeasuredChecks(readInput(t, file))
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("MeasuredChecks(%s) = %q, want none", file, got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want) || tt.wantNot != "" && strings.Contains(got[0], tt.wantNot)):
				t.Errorf("MeasuredChecks(%s) = %q, want one sentence with %q and without %q", file, got, tt.want, tt.wantNot)
			}
		})
	}
}
