package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLint(t *testing.T) {
	t.Parallel()
	const (
		clean   = "../lint/testdata/readiness-probe-missing/valid-probe.yaml"
		missing = "../lint/testdata/readiness-probe-missing/invalid-no-probe.yaml"
		warns   = "../lint/testdata/liveness-same-as-readiness/invalid-same-http.yaml"
		broken  = "../lint/testdata/report/broken.yaml"
		// measured holds manifests, each with the results of its rollout.
		measured = "../lint/testdata/prestop-shorter-than-measured/"
		results  = "../lint/testdata/measured/"
	)
	stdin, err := os.ReadFile(missing)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		stdin     []byte
		wantCode  int
		wantOut   []string // substrings of stdout
		wantErr   string   // substring of stderr
		notInErr  string
		notInOut  string
		checkJSON bool
		config    string // a configuration file's content, given with --config
	}{
		{name: "no input", args: []string{"lint"}, wantCode: 2, wantErr: "no input"},
		{name: "no input but a manifest given with -f", args: []string{"lint", "-f", missing}, wantCode: 2,
			wantErr: "lint: no input: -f is --values, Helm values for a chart; to lint " + missing + ", name it: closingtime lint " + missing + "\n"},
		{name: "no input but values", args: []string{"lint", "-f", "../manifest/testdata/helm/prod-values.yaml"}, wantCode: 2,
			wantErr: "lint: no input: name files, directories, or - for standard input"},
		{name: "bad output", args: []string{"lint", "-o", "yaml", clean}, wantCode: 2, wantErr: `invalid --output "yaml"`},
		{name: "bad threshold", args: []string{"lint", "--threshold", "fatal", clean}, wantCode: 2, wantErr: `unknown severity "fatal"`},
		{name: "unknown rule", args: []string{"lint", "--disable", "no-such-rule", clean}, wantCode: 2, wantErr: `unknown rule "no-such-rule"`},
		{name: "clean", args: []string{"lint", clean}, wantCode: 0, wantOut: []string{"0 errors, 0 warnings, 0 info"}},
		{name: "finding", args: []string{"lint", missing}, wantCode: 1,
			wantOut: []string{"invalid-no-probe.yaml:21: error [readiness-probe-missing] Deployment web, spec.template.spec.containers[0].readinessProbe"}},
		{name: "disabled", args: []string{"lint", "--disable", "readiness-probe-missing,prestop-delay-missing", missing}, wantCode: 0,
			notInOut: "readiness-probe-missing"},
		{name: "enabled only", args: []string{"lint", "--enable", "single-replica", missing}, wantCode: 0, notInOut: "readiness-probe-missing"},
		{name: "below threshold", args: []string{"lint", "--threshold", "error", warns}, wantCode: 0, wantOut: []string{"liveness-same-as-readiness"}},
		{name: "at threshold", args: []string{"lint", warns}, wantCode: 1},
		{name: "stdin", args: []string{"lint", "-"}, stdin: stdin, wantCode: 1, wantOut: []string{"<stdin>:21: error [readiness-probe-missing]"}},
		{name: "unreadable input and another file", args: []string{"lint", broken, missing}, wantCode: 2,
			wantOut: []string{"broken.yaml:11: cannot read: found unexpected end of stream", "invalid-no-probe.yaml:21: error"}},
		{name: "missing file", args: []string{"lint", "no-such.yaml", clean}, wantCode: 2, wantOut: []string{"no-such.yaml: cannot read: no such file or directory"}},
		{name: "json", args: []string{"lint", "-o", "json", broken, missing}, wantCode: 2, checkJSON: true,
			wantOut: []string{`"rule": "readiness-probe-missing"`, `"line": 11`}, wantErr: "broken.yaml:11: found unexpected end of stream"},
		{name: "sarif", args: []string{"lint", "-o", "sarif", missing}, wantCode: 1, checkJSON: true,
			wantOut: []string{`"version": "2.1.0"`, `"startLine": 21`, `"name": "closingtime",` + "\n          " + `"version": "` + buildVersion().String() + `",`}},
		{name: "config ignores by path", args: []string{"lint", missing}, wantCode: 0, notInOut: "readiness-probe-missing",
			config: "ignore:\n  - path: ../lint/testdata/readiness-probe-missing/\n"},
		{name: "config ignores by object", args: []string{"lint", "--enable", "readiness-probe-missing", missing}, wantCode: 0,
			config: "ignore:\n  - rule: readiness-probe-missing\n    object: Deployment web\n", wantOut: []string{"0 errors"}},
		{name: "config threshold", args: []string{"lint", warns}, wantCode: 0, config: "threshold: error\n"},
		{name: "flag threshold wins", args: []string{"lint", "--threshold", "warning", warns}, wantCode: 1, config: "threshold: error\n"},
		{name: "config disables", args: []string{"lint", "--disable", "prestop-delay-missing", missing}, wantCode: 0,
			config: "disable: [readiness-probe-missing]\n"},
		{name: "config unknown key", args: []string{"lint", clean}, wantCode: 2, config: "ignores: []\n", wantErr: `unknown field "ignores"`},
		{name: "config unknown rule", args: []string{"lint", clean}, wantCode: 2, config: "ignore:\n  - rule: no-such-rule\n", wantErr: `unknown rule "no-such-rule"`},
		{name: "config missing", args: []string{"lint", "--config", "no-such-config.yaml", clean}, wantCode: 2, wantErr: "no-such-config.yaml"},
		{name: "kustomization", args: []string{"lint", "--threshold", "info", "../manifest/testdata/kustomize/overlays/prod"}, wantCode: 1,
			wantOut: []string{"kustomize/base/deployment.yaml:12: info [pdb-missing] Deployment shop/web"}},
		{name: "helm chart with values", args: []string{"lint", "--threshold", "info", "-f", "../manifest/testdata/helm/prod-values.yaml", "../manifest/testdata/helm/web"},
			wantCode: 0, wantOut: []string{"0 errors, 0 warnings, 0 info"}},
		{name: "helm chart that fails", args: []string{"lint", "../manifest/testdata/helm/broken"}, wantCode: 2,
			wantOut: []string{"helm/broken: cannot read: helm template:"}},
		{name: "measured too short", args: []string{"lint", "--measured", measured + "invalid-no-prestop.results.json", measured + "invalid-no-prestop.yaml"},
			wantCode: 1, wantOut: []string{"invalid-no-prestop.yaml:18: error [prestop-shorter-than-measured] Deployment app", "(1 run, 3 old pods)"}},
		{name: "measured long enough", args: []string{"lint", "--enable", "prestop-shorter-than-measured",
			"--measured", measured + "valid-long-enough.results.json", measured + "valid-long-enough.yaml"}, wantCode: 0, wantOut: []string{"0 errors"},
			wantErr: "closingtime: lint: measured: Deployment app (1 run, 3 old pods): its old pods got new connections until 0."},
		{name: "measured long enough, JSON", args: []string{"lint", "-o", "json", "--enable", "prestop-shorter-than-measured",
			"--measured", measured + "valid-long-enough.results.json", measured + "valid-long-enough.yaml"}, wantCode: 0, checkJSON: true, notInErr: "measured:"},
		{name: "measured Deployment not in the inputs", args: []string{"lint", "--measured", measured + "invalid-no-prestop.results.json", measured + "valid-other-namespace.yaml"},
			wantCode: 2, wantOut: []string{"[prestop-delay-missing] Deployment shop/app"}, notInOut: "[prestop-shorter-than-measured]",
			wantErr: "--measured " + measured + "invalid-no-prestop.results.json: no input has Deployment default/app"},
		{name: "measured file missing", args: []string{"lint", "--measured", "no-such-results.json", clean}, wantCode: 2, wantErr: "lint: --measured no-such-results.json: no such file or directory"},
		{name: "measured file not results", args: []string{"lint", "--measured", results + "invalid-not-results.json", clean}, wantCode: 2,
			wantErr: "--measured " + results + "invalid-not-results.json: not a results file of closingtime lab or rollout: no scenarios"},
		{name: "measured file truncated", args: []string{"lint", "--measured", results + "invalid-truncated.json", clean}, wantCode: 2,
			wantErr: "invalid-truncated.json: not a results file of closingtime lab or rollout: line 17, column 9: unexpected end of JSON input\n"},
		{name: "directory with results files", args: []string{"lint", "--enable", "prestop-shorter-than-measured", measured}, wantCode: 0,
			wantOut: []string{"0 errors"}, wantErr: "closingtime: lint: skipped, as they hold no Kubernetes object: " + measured + "invalid-exec-sleep-short.results.json, "},
		{name: "variants side by side", args: []string{"lint", "--enable", "prestop-delay-missing", measured}, wantCode: 1,
			wantOut: []string{`container "app" has no preStop hook, but Service app sends it traffic`},
			wantErr: "closingtime: lint: note: Deployment app is written 7 times among objects related as one cluster's (" + measured + "invalid-exec-sleep-short.yaml:"},
		{name: "results file named", args: []string{"lint", measured + "valid-long-enough.results.json"}, wantCode: 2,
			wantOut: []string{"valid-long-enough.results.json:1: cannot read: not a Kubernetes object"}},
		{name: "list rules", args: []string{"lint", "--list-rules"}, wantCode: 0, wantOut: []string{"shell-pid1  ", "pdb-blocks-drain  "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.config != "" {
				name := filepath.Join(t.TempDir(), "lint.yaml")
				if err := os.WriteFile(name, []byte(tt.config), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append([]string{args[0], "--config", name}, args[1:]...)
			}
			var out, errOut bytes.Buffer
			code := Run(context.Background(), args, Streams{In: bytes.NewReader(tt.stdin), Out: &out, Err: &errOut})
			if code != tt.wantCode {
				t.Errorf("exit status = %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errOut.String())
			}
			for _, s := range tt.wantOut {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
			if tt.notInOut != "" && strings.Contains(out.String(), tt.notInOut) {
				t.Errorf("stdout has %q:\n%s", tt.notInOut, out.String())
			}
			if !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", errOut.String(), tt.wantErr)
			}
			if tt.notInErr != "" && strings.Contains(errOut.String(), tt.notInErr) {
				t.Errorf("stderr has %q:\n%s", tt.notInErr, errOut.String())
			}
			if tt.checkJSON && !json.Valid(out.Bytes()) {
				t.Errorf("stdout is not JSON:\n%s", out.String())
			}
		})
	}
}

// TestOwnManifestsLintClean lints the project's own Dockerfile and
// deployment manifests, which must follow what lint prescribes.
func TestOwnManifestsLintClean(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"lint", "../../Dockerfile", "../../deploy/"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK {
		t.Errorf("exit %d:\n%s%s", code, out.String(), errOut.String())
	}
}

// TestLintMeasuredRollout measures a rollout on the embedded cluster and
// judges its manifest by the measurement: a graceful server behind a 5 s
// preStop sleep, whose kept-alive connections reach the old pods until
// SIGTERM and whose new connections stop as the endpoints propagate,
// passes. Counting the kept-alive requests as propagation would ask for a
// longer delay than the one measured, whatever it was.
func TestLintMeasuredRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	const manifest = "testdata/rollout-graceful.yaml"
	results := filepath.Join(t.TempDir(), "results.json")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"rollout", "-f", manifest, "--local", "--client", "keep-alive=40", "--client", "new-conn=20",
		"--warm-up", "1s", "--after", "1s", "--results", results}, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK {
		t.Fatalf("rollout: exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code = Run(context.Background(), []string{"lint", "--enable", "prestop-shorter-than-measured", "--measured", results, manifest},
		Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK || !strings.Contains(out.String(), "0 errors, 0 warnings, 0 info") {
		t.Errorf("lint --measured: exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, out.String(), errOut.String())
	}
}
