package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{name: "broken", args: []string{"report", broken}, wantCode: ExitUsage, wantErr: "report: " + broken + ": read results"},
		{name: "missing", args: []string{"report", "no-such.json"}, wantCode: ExitUsage, wantErr: "closingtime: report: no-such.json: no such file or directory\n"},
		{name: "no scenarios", args: []string{"report", empty}, wantCode: ExitUsage, wantErr: "report: " + empty + ": no scenarios"},
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

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
