package lint

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// lintReport lints the manifests of testdata/report with every rule.
func lintReport(t *testing.T) Report {
	t.Helper()
	in, errs := Read(manifest.Reader{}, []string{"testdata/report"})
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return Report{Version: "v1.2.3", Rules: l.Rules(), Findings: l.Lint(in), Errors: errs}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	r := lintReport(t)
	if len(r.Errors) != 1 {
		t.Fatalf("errors = %v, want one for broken.yaml", r.Errors)
	}
	tests := []struct {
		name   string
		golden string
		write  func(*bytes.Buffer) error
	}{
		{name: "text", golden: "text.golden", write: func(b *bytes.Buffer) error { return WriteText(b, r, false) }},
		{name: "text in colour", golden: "text-colour.golden", write: func(b *bytes.Buffer) error { return WriteText(b, r, true) }},
		{name: "json", golden: "json.golden", write: func(b *bytes.Buffer) error { return WriteJSON(b, r) }},
		{name: "sarif", golden: "sarif.golden", write: func(b *bytes.Buffer) error { return WriteSARIF(b, r) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := tt.write(&b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "report", tt.golden), b.Bytes())
		})
	}
}

// TestWriteSARIFLines checks what kube-linter's SARIF lacks: every result
// points at its finding's own line, and refers to a rule the driver lists.
func TestWriteSARIFLines(t *testing.T) {
	t.Parallel()
	r := lintReport(t)
	var b bytes.Buffer
	if err := WriteSARIF(&b, r); err != nil {
		t.Fatal(err)
	}
	var log sarifLog
	if err := json.Unmarshal(b.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	run := log.Runs[0]
	if len(run.Results) != len(r.Findings) {
		t.Fatalf("%d results, want %d", len(run.Results), len(r.Findings))
	}
	for i, res := range run.Results {
		f := r.Findings[i]
		if got := res.Locations[0].Physical.Region.StartLine; got != f.Line {
			t.Errorf("result %d startLine = %d, want %d", i, got, f.Line)
		}
		if got := run.Tool.Driver.Rules[res.RuleIndex].ID; got != res.RuleID {
			t.Errorf("result %d ruleIndex names %s, want %s", i, got, res.RuleID)
		}
	}
	if run.Invocations[0].ExecutionSuccessful {
		t.Error("executionSuccessful = true with an unreadable input")
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    Report
		want string
	}{
		{name: "nothing", r: Report{}, want: "0 errors, 0 warnings, 0 info"},
		{name: "one of each", r: Report{
			Findings: []Finding{{File: "a.yaml", Severity: Error}, {File: "b.yaml", Severity: Warning}, {File: "b.yaml", Severity: Info}},
			Errors:   []error{&manifest.Error{File: "c.yaml", Line: 3}},
		}, want: "1 error, 1 warning, 1 info in 2 files; 1 input could not be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := summary(tt.r); got != tt.want {
				t.Errorf("summary() = %q, want %q", got, tt.want)
			}
		})
	}
}
