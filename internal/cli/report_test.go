package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/results"
)

func TestReport(t *testing.T) {
	t.Parallel()
	golden := "../report/testdata/results.json.golden"
	text := mustRead(t, "../report/testdata/text.txt.golden")
	html := mustRead(t, "../report/testdata/table.html.golden")
	broken := filepath.Join(t.TempDir(), "broken.json")
	if err := os.WriteFile(broken, []byte(`{"scenarios": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A field of the wrong type on line 3.
	mistyped := filepath.Join(t.TempDir(), "mistyped.json")
	if err := os.WriteFile(mistyped, []byte("{\"scenarios\": [{\"name\": \"s\",\n \"runs\": [\n {\"diagnosis\": 12}]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const not = ": not a results file of closingtime lab or rollout: "
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "text", args: []string{"report", golden}, wantOut: text},
		{name: "json", args: []string{"report", "-o", "json", golden}, wantOut: mustRead(t, golden)},
		{name: "no file", args: []string{"report"}, wantCode: ExitUsage, wantErr: "want exactly one results file"},
		{name: "html", args: []string{"report", "-o", "html", golden}, wantOut: html},
		{name: "bad output", args: []string{"report", "-o", "pdf", golden}, wantCode: ExitUsage, wantErr: `invalid --output "pdf": accepted values are text, json, html`},
		{name: "broken", args: []string{"report", broken}, wantCode: ExitUsage,
			wantErr: "closingtime: report: " + broken + not + "line 1, column 15: unexpected end of JSON input\n"},
		{name: "a manifest", args: []string{"report", "testdata/rollout-plain.yaml"}, wantCode: ExitUsage,
			wantErr: "closingtime: report: testdata/rollout-plain.yaml" + not + "line 1, column 1: invalid character '#' looking for beginning of value\n"},
		{name: "mistyped", args: []string{"report", mistyped}, wantCode: ExitUsage,
			wantErr: "closingtime: report: " + mistyped + not + "line 3: field scenarios.runs.diagnosis is a number, not an object\n"},
		{name: "missing", args: []string{"report", "no-such.json"}, wantCode: ExitUsage, wantErr: "closingtime: report: no-such.json: no such file or directory\n"},
		{name: "no scenarios", args: []string{"report", empty}, wantCode: ExitUsage, wantErr: "closingtime: report: " + empty + not + "no scenarios\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Run(context.Background(), tt.args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != tt.wantCode || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), tt.wantCode, tt.wantErr)
			}
			if tt.wantCode != ExitOK && out.Len() > 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
			if tt.wantOut != "" && out.String() != tt.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tt.wantOut)
			}
		})
	}
}

// TestReportDiagnosedAgain reads a results file whose request a former
// version's rules left unknown; its timeline shows the pod's exit on
// SIGTERM as the request failed: report gives it that cause, with its
// fix, in the text and in the JSON. A file from before the diagnosis
// shows no causes (TestReport's text).
func TestReportDiagnosedAgain(t *testing.T) {
	t.Parallel()
	const file = "testdata/report-diagnosed.json"
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append([]string{"report"}, args...), Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
			t.Fatalf("report %v: exit %d, stderr:\n%s", args, code, errOut.String())
		}
		return out.String()
	}
	cut := diagnosis.Describe(diagnosis.ExitWithoutDrain)
	text := run(file)
	for _, want := range []string{
		"  causes:\n    1 failed  " + cut.Title + " (sent in -1s)\n      fix: " + cut.Fix + " — docs/diagnosis.md#exit-without-drain\n",
		"  pod app-old: exited ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "unknown") {
		t.Errorf("text still has the former cause, unknown:\n%s", text)
	}
	res, err := results.Read(strings.NewReader(run("-o", "json", file)))
	if err != nil {
		t.Fatal(err)
	}
	d := res.Scenarios[0].Runs[0].Diagnosis
	if d == nil || len(d.Requests) != 1 || d.Requests[0].Cause != diagnosis.ExitWithoutDrain || d.Requests[0].Pod != "app-old" ||
		len(d.Causes) != 1 || d.Causes[0].Cause != diagnosis.ExitWithoutDrain {
		t.Errorf("JSON diagnosis %+v, want its request and its causes exit-without-drain, joined to pod app-old", d)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
