package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRolloutUsage(t *testing.T) {
	t.Parallel()
	const plain = "testdata/rollout-plain.yaml"
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no files", args: []string{"rollout", "--local"}, wantErr: "no manifests"},
		{name: "no backend", args: []string{"rollout", "-f", plain}, wantErr: "give --local"},
		{name: "no such service", args: []string{"rollout", "-f", plain, "--local", "--service", "web"}, wantErr: "traffic.service: the workload has no Service web"},
		{name: "bad client", args: []string{"rollout", "-f", plain, "--local", "--client", "udp"}, wantErr: `--client "udp"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Run(context.Background(), tt.args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != ExitUsage || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), ExitUsage, tt.wantErr)
			}
		})
	}
}

// TestRolloutGate runs a rollout of a Deployment without a readiness probe,
// which fails requests: the exit status is 1 with the default allowance
// and 0 with a large one.
func TestRolloutGate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	tests := []struct {
		name        string
		maxFailures string
		wantCode    int
	}{
		{name: "over the allowance", maxFailures: "0", wantCode: rolloutExitFailures},
		{name: "within the allowance", maxFailures: "1000000", wantCode: ExitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Run(context.Background(), []string{"rollout", "-f", "testdata/rollout-plain.yaml", "--local", "--path", "/work",
				"--warm-up", "1s", "--after", "2s", "--max-failures", tt.maxFailures},
				Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "refused") || !strings.Contains(out.String(), "old pod") {
				t.Errorf("stdout lacks the table or the old pods:\n%s", out.String())
			}
		})
	}
}
