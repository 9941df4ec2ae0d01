package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// runAsCommand is the environment variable that makes the test binary run
// its arguments as the closingtime command line (see TestMain).
const runAsCommand = "CLOSINGTIME_TEST_RUN_COMMAND"

// TestMain runs the command line instead of the tests when the test binary
// is started as a pod of `closingtime lab` or of a test's `closingtime
// cluster` (which run os.Executable with the pod's args, "serve …" or, for
// a load pod, "load …"), or by a test that sets runAsCommand, as os/exec's
// tests re-execute themselves. Otherwise it runs the tests, then stops the
// control plane they shared, if one started it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "load" || os.Getenv(runAsCommand) == "1") {
		os.Exit(Run(context.Background(), os.Args[1:], StdStreams()))
	}
	code := m.Run()
	controlplanetest.Stop()
	os.Exit(code)
}

func TestLabUsage(t *testing.T) {
	t.Parallel()
	testUsage(t, []usageCase{
		{name: "unknown scenario", args: []string{"lab", "9-nope"}, wantErr: `no scenario "9-nope"; the catalog has 1-plain, 2-readiness`},
		{name: "bad output", args: []string{"lab", "-o", "yaml"}, wantErr: `invalid --output "yaml"`},
		{name: "one file for results and report", args: []string{"lab", "--results", "out.json", "--report", "./out.json"}, wantErr: "--results and --report both name out.json"},
		{name: "negative repeat", args: []string{"lab", "--repeat", "-1"}, wantErr: "lab: invalid --repeat -1: must not be negative"},
		{name: "negative parallel", args: []string{"lab", "--parallel", "-2"}, wantErr: "lab: invalid --parallel -2: must not be negative"},
		{name: "missing file", args: []string{"lab", "-f", "testdata/no-such.yaml"}, wantErr: "lab: testdata/no-such.yaml: no such file or directory"},
		// Refused before any cluster starts, at the container's line.
		{name: "container without command", args: []string{"lab", "-f", "testdata/lab-image.yaml"},
			wantErr: "lab: testdata/rollout-image.yaml:29: Deployment app: spec.template.spec.containers[0]: container app has no command and its image \"registry.example/shop:1.4\" maps to no local command: map the image with --image-command"},
		{name: "names and files", args: []string{"lab", "1-plain", "-f", "x.yaml"}, wantErr: "not both"},
		{name: "invalid file", args: []string{"lab", "-f", "../scenario/testdata/invalid-scale.yaml"},
			wantErr: "invalid-scale.yaml:4: action.replicas: scale needs replicas"},
		{name: "compare and kube", args: []string{"lab", "--compare", "--kube"}, wantErr: "--compare runs on a closingtime cluster of its own"},
		{name: "state dir without compare", args: []string{"lab", "--state-dir", "x"}, wantErr: "--state-dir needs --compare"},
	})
}

// TestLabQuick runs `closingtime lab --quick 1-plain -o json` with this
// test binary as the pods' closingtime, and checks the results on standard
// output and in the results file (refused requests dominate), and that the
// HTML report was written.
func TestLabQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	dir := t.TempDir()
	path, page := filepath.Join(dir, "results.json"), filepath.Join(dir, "report.html")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"lab", "--quick", "1-plain", "-o", "json", "--results", path, "--report", page},
		Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "1-plain") || !strings.Contains(errOut.String(), "warm-up") {
		t.Errorf("no progress on stderr:\n%s", errOut.String())
	}
	if want := "lab: wrote the results to " + path + " and the HTML report to " + page + "\n"; !strings.HasSuffix(errOut.String(), want) {
		t.Errorf("stderr ends:\n%s\nwant %q", errOut.String()[max(0, errOut.Len()-300):], want)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(saved, out.Bytes()) {
		t.Errorf("results file differs from the JSON output")
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(html, []byte("<!DOCTYPE html>")) || !bytes.Contains(html, []byte("1-plain")) {
		t.Errorf("report.html is not the scenario's HTML report:\n%.300s", html)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	var r results.Results
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Scenarios) != 1 || r.Scenarios[0].Name != "1-plain" {
		t.Fatalf("results of %+v, want 1-plain only", r.Scenarios)
	}
	if tot := r.Scenarios[0].Totals; tot.Refused == 0 || tot.Refused <= tot.Failed()/2 {
		t.Errorf("totals %+v: want refused requests, most of the failures", tot)
	}
}

// TestLabList lists the catalog, or the scenarios a group selects, without
// running anything.
func TestLabList(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"lab", "--list", "pdb", "-o", "json"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var list []struct{ Name, Group, Seed, Description string }
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) < 2 {
		t.Fatalf("group pdb lists %d scenarios, want several", len(list))
	}
	for _, e := range list {
		if e.Group != "pdb" || e.Description == "" {
			t.Errorf("listed %+v: want group pdb and a description", e)
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"lab", "--list"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(out.String(), "1-plain") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestCatalogEntrypoints checks that the embedded cluster can start every
// container of the built-in scenarios without --image-command, as `lab`
// checks before it starts a cluster.
func TestCatalogEntrypoints(t *testing.T) {
	t.Parallel()
	catalog, err := scenario.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkEntrypoints("lab", catalog, nil); err != nil {
		t.Error(err)
	}
}

// TestWriteAll: files appear whole or not at all; a file whose writing
// fails leaves none of them, nor a temporary file.
func TestWriteAll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.html")
	write := func(text string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, text); return err }
	}
	failing := func(io.Writer) error { return errors.New("disk full") }
	if err := writeAll(output{a, write("a")}, output{"", failing}, output{b, failing}); err == nil || !strings.Contains(err.Error(), "write "+b+": disk full") {
		t.Errorf("writeAll with a failing file: %v, want its error", err)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("files left after a failed writeAll: %v", left)
	}
	if err := writeAll(output{a, write("a")}, output{b, write("b")}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{a: "a", b: "b"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 2 {
		t.Errorf("files after writeAll: %v, want a.json and b.html only", left)
	}
}

// TestInstalledScenarios: a scenario whose pods need a program this
// machine lacks is left out, with a line that says what and how to install
// it; the others run.
func TestInstalledScenarios(t *testing.T) {
	t.Parallel()
	needs := &scenario.Scenario{Name: "needs", Requires: []string{"closingtime-test-missing"}}
	plain := &scenario.Scenario{Name: "plain"}
	var w bytes.Buffer
	got := installedScenarios(&w, []*scenario.Scenario{needs, plain})
	if len(got) != 1 || got[0] != plain {
		t.Errorf("installedScenarios = %v, want plain alone", got)
	}
	if want := "lab: needs skipped: its pods run closingtime-test-missing, which is not installed here\n"; w.String() != want {
		t.Errorf("notice %q, want %q", w.String(), want)
	}
}
