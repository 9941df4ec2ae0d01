package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestRolloutUsage(t *testing.T) {
	t.Parallel()
	const plain = "testdata/rollout-plain.yaml"
	testUsage(t, []usageCase{
		{name: "no files", args: []string{"rollout", "--local"}, wantErr: "no manifests"},
		{name: "no backend", args: []string{"rollout", "-f", plain}, wantErr: "give --local"},
		{name: "no such service", args: []string{"rollout", "-f", plain, "--local", "--service", "web"}, wantErr: "traffic.service: the workload has no Service web"},
		{name: "bad client", args: []string{"rollout", "-f", plain, "--local", "--client", "udp"}, wantErr: `--client "udp"`},
		{name: "bad image command", args: []string{"rollout", "-f", plain, "--local", "--image-command", "shop:1"}, wantErr: `--image-command "shop:1"`},
	})
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

// TestRolloutImageCommand runs a Deployment whose container has an image
// and no command: without --image-command the error names the container
// and the flag; with it, the mapped local command (this test binary as
// closingtime serve) runs as the pods.
func TestRolloutImageCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	args := []string{"rollout", "-f", "testdata/rollout-image.yaml", "--local", "--path", "/work", "--warm-up", "1s", "--after", "1s", "--max-failures", "1000000"}
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code == ExitOK || !strings.Contains(errOut.String(), "registry.example/shop:1.4") || !strings.Contains(errOut.String(), "--image-command") {
		t.Errorf("without --image-command: exit %d, stderr:\n%s", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	args = append(args, "--image-command", "registry.example/shop:1.4="+os.Args[0]+" serve")
	if code := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "old pod") {
		t.Errorf("stdout lacks the old pods:\n%s", out.String())
	}
}
