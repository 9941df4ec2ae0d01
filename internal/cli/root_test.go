package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string // in standard error; empty: nothing printed
	}{
		{name: "version", args: []string{"version"}, want: ExitOK},
		{name: "unknown command", args: []string{"bogus"}, want: ExitUsage, wantErr: `unknown command "bogus"`},
		{name: "unknown flag", args: []string{"version", "--bogus"}, want: ExitUsage, wantErr: "unknown flag: --bogus"},
		{name: "extra argument", args: []string{"version", "extra"}, want: ExitUsage, wantErr: `unknown command "extra"`},
		{name: "invalid flag value", args: []string{"version", "-o", "yaml"}, want: ExitUsage, wantErr: "accepted values are text, json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			got := Run(context.Background(), tt.args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if got != tt.want {
				t.Errorf("exit status %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
			if tt.wantErr == "" && errOut.Len() > 0 || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr %q, want %q", errOut.String(), tt.wantErr)
			}
		})
	}
}
