package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// testdataDir returns the absolute path of testdata.
func testdataDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRolloutUsage(t *testing.T) {
	t.Parallel()
	const plain = "testdata/rollout-plain.yaml"
	abs, err := filepath.Abs("out.xml")
	if err != nil {
		t.Fatal(err)
	}
	testUsage(t, []usageCase{
		{name: "no files", args: []string{"rollout", "--local"}, wantErr: "no manifests"},
		{name: "missing file", args: []string{"rollout", "--local", "-f", "testdata/no-such.yaml"}, wantErr: "closingtime: rollout: testdata/no-such.yaml: no such file or directory\n"},
		{name: "no backend", args: []string{"rollout", "-f", plain}, wantErr: "give --local"},
		{name: "no such service", args: []string{"rollout", "-f", plain, "--local", "--service", "web"},
			wantErr: "closingtime: rollout: --service web: no Service \"web\" in " + plain + "; Services: app\n"},
		{name: "path without slash", args: []string{"rollout", "-f", plain, "--local", "--path", "work"},
			wantErr: "closingtime: rollout: --path work: want a path that starts with /, such as \"/work\"\n"},
		{name: "no service", args: []string{"rollout", "-f", "testdata/rollout-no-service.yaml", "--local"},
			wantErr: "closingtime: rollout: testdata/rollout-no-service.yaml: no Service to send the traffic through: add one whose selector matches the pods of Deployment shop (app: shop, tier: web)\n"},
		// Refused before any cluster starts, at the container's line,
		// with the two ways to give it a command.
		{name: "container without command", args: []string{"rollout", "-f", "testdata/rollout-image.yaml", "--local"},
			wantErr: "closingtime: rollout: testdata/rollout-image.yaml:29: Deployment app: spec.template.spec.containers[0]: container app has no command and its image \"registry.example/shop:1.4\" maps to no local command: " +
				"map the image with --image-command 'registry.example/shop:1.4=CMD ARGS…', or annotate the pod template with closingtime.dev/command.app: 'CMD ARGS…'\n"},
		// What the API refuses in a Deployment, at its line.
		{name: "restartPolicy Never", args: []string{"rollout", "-f", "testdata/rollout-restart-never.yaml", "--local"},
			wantErr: "closingtime: rollout: testdata/rollout-restart-never.yaml:26: Deployment app: spec.template.spec.restartPolicy: unsupported value \"Never\": a Deployment's pods may only have \"Always\"\n"},
		// A command that is no executable file is refused before any
		// cluster starts too, with what was looked up where.
		{name: "command not in PATH", args: []string{"rollout", "-f", "testdata/rollout-image.yaml", "--local", "--image-command", "registry.example/shop:1.4=no-such-app-of-closingtime serve"},
			wantErr: "closingtime: rollout: testdata/rollout-image.yaml:29: Deployment app: container app: --image-command for image \"registry.example/shop:1.4\": " +
				"command \"no-such-app-of-closingtime\": no executable file of that name in $PATH ("},
		{name: "command a directory", args: []string{"rollout", "-f", "testdata/rollout-image.yaml", "--local", "--image-command", "registry.example/shop:1.4=./testdata"},
			wantErr: "testdata/rollout-image.yaml:29: Deployment app: container app: --image-command for image \"registry.example/shop:1.4\": command \"./testdata\": " +
				testdataDir(t) + " (in working directory \".\") is a directory, not an executable file\n"},
		{name: "two Deployments", args: []string{"rollout", "-f", plain, "-f", "testdata/rollout-no-service.yaml", "--local"},
			wantErr: "closingtime: rollout: deploy/NAME: 2 Deployments (app, shop): name one\n"},
		{name: "no such Deployment", args: []string{"rollout", "-f", plain, "deploy/web", "--local"},
			wantErr: "closingtime: rollout: deploy/web: no Deployment \"web\" in " + plain + "; Deployments: app\n"},
		{name: "zero repeat", args: []string{"rollout", "-f", plain, "--local", "--repeat", "0"}, wantErr: "rollout: invalid --repeat 0: must be positive"},
		{name: "zero connect timeout", args: []string{"rollout", "-f", plain, "--local", "--connect-timeout", "0s"}, wantErr: "rollout: invalid --connect-timeout 0s: must be positive"},
		{name: "negative max failures", args: []string{"rollout", "-f", plain, "--local", "--max-failures", "-3"}, wantErr: "rollout: invalid --max-failures -3: give a count, or -1 for no limit"},
		{name: "results in no directory", args: []string{"rollout", "-f", plain, "--local", "--junit", "ok.xml", "--results", "/nonexistent/dir/x.json"}, wantErr: "closingtime: rollout: --results /nonexistent/dir/x.json: cannot write there: no such file or directory\n"},
		{name: "results a directory", args: []string{"rollout", "-f", plain, "--local", "--results", "testdata"}, wantErr: "closingtime: rollout: --results testdata: is a directory: name a file in it\n"},
		{name: "one file spelt twice", args: []string{"rollout", "-f", plain, "--local", "--results", "out.xml", "--junit", abs}, wantErr: "rollout: --results and --junit both name out.xml"},
		{name: "junit and results one file", args: []string{"rollout", "-f", plain, "--local", "--results", "out.xml", "--junit", "out.xml"}, wantErr: "rollout: --results and --junit both name out.xml"},
		{name: "negative warm-up", args: []string{"rollout", "-f", plain, "--local", "--warm-up", "-1s"}, wantErr: "rollout: invalid --warm-up -1s: must not be negative"},
		{name: "bad client", args: []string{"rollout", "-f", plain, "--local", "--client", "udp"}, wantErr: `--client "udp"`},
		{name: "bad image command", args: []string{"rollout", "-f", plain, "--local", "--image-command", "shop:1"}, wantErr: `--image-command "shop:1"`},
		{name: "bad protocol", args: []string{"rollout", "-f", plain, "--local", "--protocol", "h3"}, wantErr: "closingtime: rollout: --protocol \"h3\": want http, http2 (HTTP/2 without TLS, h2c) or grpc\n"},
		{name: "grpc with an HTTP path", args: []string{"rollout", "-f", plain, "--local", "--protocol", "grpc", "--path", "/work"},
			wantErr: "closingtime: rollout: --path: gRPC method \"/work\": want /SERVICE/METHOD, such as /grpc.health.v1.Health/Check: with --protocol grpc, --path is the method the traffic calls\n"},
		{name: "grpc with retries", args: []string{"rollout", "-f", plain, "--local", "--protocol", "grpc", "--retry"}, wantErr: "rollout: --retry is HTTP's"},
	})
}

// TestRolloutGate runs a rollout of a Deployment without a readiness probe,
// which fails requests: the exit status is 1 with the default allowance,
// and the JUnit XML has the run as a failed test case; 0 with a large one,
// and the test case passed. Either way, standard error says at the end
// which files were written, with their absolute paths, or that none was,
// and last how many requests failed and the cause of most of them.
func TestRolloutGate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	dir := t.TempDir()
	results, page, junit := filepath.Join(dir, "results.json"), filepath.Join(dir, "report.html"), filepath.Join(dir, "junit.xml")
	tests := []struct {
		name        string
		maxFailures string
		files       []string
		wantCode    int
		wantWrote   string
		// wantJUnit is in the JUnit XML, of the file or, without one, of
		// standard output (-o junit).
		wantJUnit string
	}{
		{name: "over the allowance", maxFailures: "0", files: []string{"--junit", junit}, wantCode: ExitFailed,
			wantWrote: "rollout: wrote the JUnit XML to " + junit + "\n", wantJUnit: `<testsuites name="closingtime rollout" tests="1" failures="1">`},
		{name: "within the allowance", maxFailures: "1000000", files: []string{"--results", results, "--report", page, "-o", "junit"}, wantCode: ExitOK,
			wantWrote: "rollout: wrote the results to " + results + " and the HTML report to " + page + "\n", wantJUnit: `<testsuites name="closingtime rollout" tests="1" failures="0">`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Run(context.Background(), append([]string{"rollout", "-f", "testdata/rollout-plain.yaml", "--local", "--path", "/work",
				"--warm-up", "1s", "--after", "2s", "--max-failures", tt.maxFailures}, tt.files...),
				Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "refused") || !strings.Contains(out.String(), "old pod") {
				t.Errorf("stdout lacks the table or the old pods:\n%s", out.String())
			}
			if !strings.Contains(errOut.String(), tt.wantWrote) {
				t.Errorf("stderr:\n%s\nwant %q", errOut.String(), tt.wantWrote)
			}
			if tt.wantCode == ExitFailed && !strings.Contains(errOut.String(), "rollout: rollout (Deployment default/app), run 1: ") {
				t.Errorf("stderr:\n%s\nwant the run over the allowance named", errOut.String())
			}
			// Last, the verdict: the failed requests, then each cause
			// with its count and fix.
			verdict := errOut.String()[max(0, strings.LastIndex(errOut.String(), "\nrollout: ")+1):]
			lines := strings.Split(strings.TrimSuffix(verdict, "\n"), "\n")
			if !strings.HasSuffix(lines[0], " requests failed, by cause:") || len(lines) < 2 {
				t.Fatalf("stderr:\n%s\nwant it to end with the failed requests, by cause", errOut.String())
			}
			for _, l := range lines[1:] {
				if !strings.Contains(l, "; fix: ") || !strings.Contains(l, " — docs/diagnosis.md#") {
					t.Errorf("verdict line %q: want a cause with its fix and docs", l)
				}
			}
			xml := out.String()
			for i := 0; i < len(tt.files); i += 2 {
				if tt.files[i] == "-o" {
					continue
				}
				b, err := os.ReadFile(tt.files[i+1])
				if err != nil || len(b) == 0 {
					t.Errorf("%s: %v, want it written", tt.files[i+1], err)
				}
				if tt.files[i] == "--junit" {
					xml = string(b)
				}
			}
			if !strings.Contains(xml, tt.wantJUnit) {
				t.Errorf("JUnit XML:\n%s\nwant %q", xml, tt.wantJUnit)
			}
		})
	}
}

// TestNotDeployed runs a rollout, and a lab scenario, whose containers
// exit at their start: each ends at once with ExitSetup and an error that
// quotes the exit, prints no table and writes neither the results nor
// the report.
func TestNotDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods that crash")
	}
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
	}{
		{name: "rollout", args: []string{"rollout", "-f", "testdata/rollout-crash.yaml", "--local"}},
		{name: "lab", args: []string{"lab", "-f", "testdata/lab-crash.yaml"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			results, page := filepath.Join(dir, "results.json"), filepath.Join(dir, "report.html")
			var out, errOut bytes.Buffer
			args := append(tt.args, "--results", results, "--report", page)
			code := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			want := "closingtime: " + tt.name + ": scenario "
			if code != ExitSetup || out.Len() > 0 || !strings.Contains(errOut.String(), want) ||
				!strings.Contains(errOut.String(), ": deploy: a container exited before the rollout-restart, which was not done: a workload that does not run is not measured (from the cluster: pod app-") {
				t.Errorf("exit %d; stdout:\n%s\nstderr:\n%s\nwant %d, nothing on stdout and an error %q… that quotes the exit", code, out.String(), errOut.String(), ExitSetup, want)
			}
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Errorf("files written for a run that did not deploy: %v", left)
			}
		})
	}
}

// TestRolloutClientErrors runs a rollout whose traffic requests a path
// that the pods answer with 404: nothing fails, and standard error warns
// that most responses were 4xx, with the path and the flag that sets it.
// The lab, whose warning names the scenario file instead, runs the same.
func TestRolloutClientErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts under load")
	}
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "rollout", args: []string{"rollout", "-f", "testdata/rollout-plain.yaml", "--local", "--path", "/nope", "--warm-up", "1s", "--after", "1s", "--max-failures", "1000000"},
			want: "had a 4xx status, most often 404 Not Found: they count as ok, but path /nope is likely not one the server serves; give the path your app serves with --path PATH\n"},
		{name: "lab", args: []string{"lab", "-f", "testdata/lab-404.yaml", "--results", "", "--report", ""},
			want: "had a 4xx status, most often 404 Not Found: they count as ok, but path /nope is likely not one the server serves; set traffic.path in testdata/lab-404.yaml to one it serves\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := Run(context.Background(), tt.args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != ExitOK {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
			}
			prefix := tt.name + ": warning: "
			if tt.name == "lab" {
				prefix = "lab: scenario not-found: warning: "
			}
			line := errOut.String()[max(0, strings.LastIndex(errOut.String(), prefix)):]
			if !strings.HasPrefix(line, prefix) || !strings.Contains(line, "responses (100%) "+tt.want) {
				t.Errorf("stderr:\n%s\nwant a line %q…%q", errOut.String(), prefix, tt.want)
			}
		})
	}
}

// TestRolloutImageCommand runs a Deployment whose container has an image
// and no command, with --image-command mapping it to a local command (this
// test binary as closingtime serve), which runs as the pods. Without the
// flag it is refused (TestRolloutUsage).
func TestRolloutImageCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	args := []string{"rollout", "-f", "testdata/rollout-image.yaml", "--local", "--path", "/work", "--warm-up", "1s", "--after", "1s", "--max-failures", "1000000",
		"--image-command", "registry.example/shop:1.4=" + os.Args[0] + " serve"}
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "old pod") {
		t.Errorf("stdout lacks the old pods:\n%s", out.String())
	}
}

// TestRolloutVerdict spells a rollout's last lines: the failed requests
// over its runs and every cause of them, the most first, each with its
// count and its fix; the causes of the runs are summed before they are
// ordered, and a cause that only absorbed requests is left out.
func TestRolloutVerdict(t *testing.T) {
	t.Parallel()
	run := func(counts ...results.CauseCount) results.Run {
		if len(counts) == 0 {
			return results.Run{}
		}
		return results.Run{Diagnosis: &results.Diagnosis{Causes: counts}}
	}
	cut := func(n int) results.CauseCount {
		return results.CauseCount{Cause: diagnosis.ExitWithoutDrain, Failed: n}
	}
	refused := func(n int) results.CauseCount { return results.CauseCount{Cause: diagnosis.NoEndpoint, Failed: n} }
	stale := results.CauseCount{Cause: diagnosis.StaleConnection, Absorbed: 40}
	line := func(n string, c results.Cause) string {
		return "\n  " + n + " " + diagnosis.Describe(c).Title + "; fix: " + report.Fix(c)
	}
	tests := []struct {
		name   string
		totals results.Totals
		runs   []results.Run
		want   string
	}{
		{name: "none failed", totals: results.Totals{Requests: 1102, OK: 1102}, runs: []results.Run{run()},
			want: "none of 1102 requests failed"},
		{name: "absorbed", totals: results.Totals{Requests: 1102, OK: 1102, Absorbed: 40}, runs: []results.Run{run(stale)},
			want: "none of 1102 requests failed; a retry absorbed 40"},
		{name: "one cause", totals: results.Totals{Requests: 1102, OK: 1090, Closed: 12}, runs: []results.Run{run(cut(12), stale)},
			want: "12 of 1102 requests failed, by cause:\n  12 " + diagnosis.Describe(diagnosis.ExitWithoutDrain).Title +
				"; fix: " + diagnosis.Describe(diagnosis.ExitWithoutDrain).Fix + " — docs/diagnosis.md#exit-without-drain"},
		// A stale connection that absorbed 40 sorts first in a run's
		// causes, but failed none.
		{name: "summed over runs, the most first", totals: results.Totals{Requests: 2204, OK: 2172, Refused: 14, Closed: 18}, runs: []results.Run{run(stale, refused(8), cut(6)), run(cut(12), refused(6))},
			want: "32 of 2204 requests failed, by cause:" + line("18", diagnosis.ExitWithoutDrain) + line("14", diagnosis.NoEndpoint)},
		{name: "counts aligned", totals: results.Totals{Requests: 2204, OK: 2091, Refused: 5, Closed: 108}, runs: []results.Run{run(cut(108), refused(5))},
			want: "113 of 2204 requests failed, by cause:" + line("108", diagnosis.ExitWithoutDrain) + line("  5", diagnosis.NoEndpoint)},
		{name: "a run without a diagnosis", totals: results.Totals{Requests: 2204, OK: 2184, Refused: 20}, runs: []results.Run{run(refused(8)), run()},
			want: "20 of 2204 requests failed, by cause:" + line(" 8", diagnosis.NoEndpoint) + "\n  12 without a diagnosis"},
		{name: "no diagnosis", totals: results.Totals{Requests: 1102, OK: 1090, Refused: 12}, runs: []results.Run{run()},
			want: "12 of 1102 requests failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rolloutVerdict(results.Result{Totals: tt.totals, Runs: tt.runs}); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestRolloutSidecar: a workload whose pods have a native sidecar deploys
// and rolls out; the timeline shows the sidecar's signal after the app's
// exit.
func TestRolloutSidecar(t *testing.T) {
	t.Parallel()
	r := rolloutOnce(t, "testdata/rollout-sidecar.yaml", "--max-failures", "1000000")
	// Each old pod's sidecar gets its signal after the app exited.
	exited := map[string]bool{}
	signalled := 0
	for _, e := range r.Scenarios[0].Runs[0].Timeline {
		switch {
		case e.Kind == string(cluster.ContainerExited) && e.Container == "app":
			exited[e.Pod] = true
		case e.Kind == string(cluster.SignalSent) && e.Container == "proxy":
			if !exited[e.Pod] || e.Detail["after"] != "app" {
				t.Errorf("pod %s: sidecar signalled %v, before its app exited", e.Pod, e.Detail)
			}
			signalled++
		}
	}
	if signalled != 3 {
		t.Errorf("%d sidecars signalled, want the 3 old pods'", signalled)
	}
}

// TestRolloutInitContainer: a workload whose pods have an init container
// deploys and rolls out: the init container's end is a step of each pod's
// start, not an exit that stops the deploy.
func TestRolloutInitContainer(t *testing.T) {
	t.Parallel()
	// The first init container to run fails, as a wait for a dependency
	// does before it is up: the kubelet runs it again after its back-off,
	// and the deploy waits for it.
	manifest, err := os.ReadFile("testdata/rollout-init.yaml")
	if err != nil {
		t.Fatal(err)
	}
	once := filepath.Join(t.TempDir(), "once")
	file := filepath.Join(t.TempDir(), "rollout-init.yaml")
	manifest = bytes.Replace(manifest, []byte("echo init; sleep 0.2"), []byte("test -e "+once+" || { touch "+once+"; exit 1; }; echo init"), 1)
	if err := os.WriteFile(file, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"rollout", "-f", file, "--local", "--path", "/work",
		"--warm-up", "1s", "--after", "1s", "--max-failures", "1000000"},
		Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "old pod") {
		t.Errorf("stdout lacks the old pods:\n%s", out.String())
	}
	if _, err := os.Stat(once); err != nil {
		t.Errorf("no init container failed: %v", err)
	}
}

// TestRolloutHTTP2: --protocol http2 sends the traffic over HTTP/2 without
// TLS, through the Service, and the results say so; the lab server
// answers it.
func TestRolloutHTTP2(t *testing.T) {
	t.Parallel()
	r := rolloutOnce(t, "testdata/rollout-plain.yaml", "--max-failures", "-1",
		"--protocol", "http2", "--client", "keep-alive=20", "--connections", "2")
	s := r.Scenarios[0]
	if !strings.HasPrefix(s.Target, "h2c://app.") || !strings.HasSuffix(s.Target, ":80/work") {
		t.Errorf("target %q, want the Service's h2c URL", s.Target)
	}
	if c := s.Runs[0].Clients[0]; c.Totals[load.OK] == 0 || c.Statuses[200] != c.Totals[load.OK] {
		t.Errorf("keep-alive totals %v, statuses %v: want OK requests, each a 200", c.Totals, c.Statuses)
	}
}

// TestRolloutGRPCMethod: --protocol grpc with --path calls that method of
// the pods' service, here the health service's Check, through the
// Service; the results name it, and the pods answer every call.
func TestRolloutGRPCMethod(t *testing.T) {
	t.Parallel()
	r := rolloutOnce(t, "testdata/rollout-grpc.yaml", "--max-failures", "-1", "--protocol", "grpc", "--path", "/grpc.health.v1.Health/Check",
		"--client", "keep-alive=20", "--connections", "2")
	s := r.Scenarios[0]
	if !strings.HasPrefix(s.Target, "grpc://app.") || !strings.HasSuffix(s.Target, ":50051/grpc.health.v1.Health/Check") {
		t.Errorf("target %q, want the Service's address and the method", s.Target)
	}
	c := s.Runs[0].Clients[0]
	var answered int64
	for _, n := range c.Pods {
		answered += n
	}
	if c.Totals[load.OK] == 0 || answered != c.Totals[load.OK] {
		t.Errorf("keep-alive totals %v, by pod %v: want OK calls, each a pod's", c.Totals, c.Pods)
	}
}

// rolloutOnce runs one rollout of file on the embedded cluster, with a
// second of traffic before and after, and args, and returns its results,
// which must be one run's.
func rolloutOnce(t *testing.T, file string, args ...string) *results.Results {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"rollout", "-f", file, "--local", "--path", "/work",
		"--warm-up", "1s", "--after", "1s", "-o", "json"}, args...),
		Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitOK {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitOK, out.String(), errOut.String())
	}
	r, err := results.Read(&out)
	if err != nil || len(r.Scenarios) != 1 || len(r.Scenarios[0].Runs) != 1 {
		t.Fatalf("results: %v, %+v", err, r)
	}
	return r
}
