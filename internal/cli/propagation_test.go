package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/scenario"
)

func TestPropagationUsage(t *testing.T) {
	t.Parallel()
	testUsage(t, []usageCase{
		{"no backend", []string{"propagation"}, "give --kube (the cluster of your kubeconfig) or --local"},
		{"both backends", []string{"propagation", "--kube", "--local"}, "give --kube"},
		{"window not whole seconds", []string{"propagation", "--local", "--window", "1500ms"}, "invalid --window 1.5s: want whole seconds"},
		{"no pods", []string{"propagation", "--local", "--pods", "0"}, "propagation: invalid --pods 0: must be positive"},
		{"no margin", []string{"propagation", "--local", "--margin", "0s"}, "propagation: invalid --margin 0s: must be positive"},
		{"bad output", []string{"propagation", "--local", "-o", "yaml"}, `invalid --output "yaml"`},
		{"kube flag without kube", []string{"propagation", "--local", "--image", "x:1"}, "--image needs --kube"},
		{"arguments", []string{"propagation", "--local", "web"}, "unknown command"},
	})
}

// TestPropagationLocal measures the embedded cluster's propagation: one
// pod deleted, a propagation within the cluster's default delays (and the
// measurement's resolution), and a preStop that covers it.
func TestPropagationLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("deletes a pod under load")
	}
	t.Parallel()
	status, stdout, stderr := runCLI(context.Background(), "propagation", "--local", "--pods", "1", "--window", "3s", "--rate", "200", "-o", "json")
	if status != ExitOK {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	var p scenario.Propagation
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(p.Pods) != 1 || p.MaxMS > 2500 || p.PreStopSeconds < 1 || float64(p.PreStopSeconds)*1000 < p.MaxMS+p.MarginMS {
		t.Errorf("propagation %+v: want one pod, within the cluster's delays, and a preStop that covers it with the margin", p)
	}
	t.Logf("embedded cluster: %+v", p)

	var b strings.Builder
	if err := writePropagation(&b, &p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POD", p.Pods[0].Pod, "recommended preStop", "seconds: "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, b.String())
		}
	}
}
