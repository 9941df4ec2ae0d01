package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
)

func runCLI(ctx context.Context, args ...string) (status int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	status = Run(ctx, args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return status, out.String(), errOut.String()
}

// usageCase is a command line that closingtime must refuse as a usage
// error, and a part of the message it must print.
type usageCase struct {
	name    string
	args    []string
	wantErr string
}

// testUsage runs each case in a parallel subtest and checks that the
// command exits with ExitUsage, says wantErr on stderr and prints nothing
// on stdout.
func testUsage(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, stdout, stderr := runCLI(context.Background(), tt.args...)
			if status != ExitUsage || !strings.Contains(stderr, tt.wantErr) || stdout != "" {
				t.Errorf("exit status %d, stderr %q, stdout %q; want %d and an error with %q", status, stderr, stdout, ExitUsage, tt.wantErr)
			}
		})
	}
}

func TestLoadUsageErrors(t *testing.T) {
	t.Parallel()
	testUsage(t, []usageCase{
		{name: "no URL", args: []string{"load"}, wantErr: "want exactly one URL"},
		{name: "retry settings without retry", args: []string{"load", "http://127.0.0.1:1/", "--retry-attempts", "3"}, wantErr: "need --retry"},
		{name: "rate zero", args: []string{"load", "http://127.0.0.1:1/", "--rate", "0"}, wantErr: "invalid --rate 0"},
		{name: "negative rate", args: []string{"load", "http://127.0.0.1:1/", "--rate=-5"}, wantErr: "invalid --rate -5"},
		{name: "rate not a number", args: []string{"load", "http://127.0.0.1:1/", "--rate", "fast"}, wantErr: "invalid argument"},
		{name: "client rate zero", args: []string{"load", "http://127.0.0.1:1/", "--client", "keep-alive=0"}, wantErr: "invalid rate"},
		{name: "unparsable URL", args: []string{"load", "http://[::1"}, wantErr: "target URL"},
		{name: "URL without scheme", args: []string{"load", "127.0.0.1:18080/work"},
			wantErr: `closingtime: load: target URL "127.0.0.1:18080/work": want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD], such as http://127.0.0.1:18080/work` + "\n"},
		{name: "unknown client kind", args: []string{"load", "http://127.0.0.1:1/", "--client", "http2"}, wantErr: `unknown client kind "http2"`},
		{name: "client twice", args: []string{"load", "http://127.0.0.1:1/", "--client", "new-conn", "--client", "new-conn=5"}, wantErr: "given twice"},
		{name: "bad output", args: []string{"load", "http://127.0.0.1:1/", "-o", "yaml"}, wantErr: "invalid --output"},
		{name: "zero duration", args: []string{"load", "http://127.0.0.1:1/", "--duration", "0s"}, wantErr: "load: invalid --duration 0s: must be positive"},
		{name: "zero connections", args: []string{"load", "http://127.0.0.1:1/", "--connections", "0"}, wantErr: "load: invalid --connections 0: must be positive"},
		{name: "negative max idle", args: []string{"load", "http://127.0.0.1:1/", "--client", "keep-alive", "--max-idle=-3s"}, wantErr: "load: invalid --max-idle -3s"},
		{name: "pool limit without a pool", args: []string{"load", "http://127.0.0.1:1/", "--max-lifetime", "1m"}, wantErr: "load: --max-idle and --max-lifetime limit a keep-alive client's pool: give --client keep-alive too"},
		{name: "zero retry attempts", args: []string{"load", "http://127.0.0.1:1/", "--retry", "--retry-attempts", "0"}, wantErr: "load: invalid --retry-attempts 0: must be positive"},
		{name: "jsonl and events", args: []string{"load", "http://127.0.0.1:1/", "-o", "jsonl", "--events", "e.jsonl"}, wantErr: "give --events or -o jsonl, not both"},
		{name: "negative wait", args: []string{"load", "http://127.0.0.1:1/", "--wait-serving=-1s"}, wantErr: "invalid --wait-serving -1s"},
	})
}

func podServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(load.PodHeader, "pod-a")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestLoadJSON runs two clients with their own rates and reads the JSON
// report and the events file.
func TestLoadJSON(t *testing.T) {
	t.Parallel()
	srv := podServer(t)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	status, stdout, stderr := runCLI(context.Background(), "load", srv.URL+"/work",
		"--client", "new-conn=40", "--client", "keep-alive=20", "--connections", "2",
		"--max-idle", "3s", "--max-lifetime", "1m", "--duration", "500ms", "-o", "json", "--events", events)
	if status != ExitOK {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	var report load.Report
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, stdout)
	}
	if len(report.Clients) != 2 {
		t.Fatalf("%d clients in the report, want 2", len(report.Clients))
	}
	for i, want := range []struct {
		kind load.Kind
		rate float64
		ok   int64
	}{{load.NewConn, 40, 20}, {load.KeepAlive, 20, 10}} {
		c := report.Clients[i]
		if c.Kind != want.kind || c.Rate != want.rate || c.Totals[load.OK] != want.ok || c.Pods["pod-a"] != want.ok {
			t.Errorf("client %d: %s %v/s totals %v pods %v, want %s %v/s with ok=%d from pod-a", i, c.Kind, c.Rate, c.Totals, c.Pods, want.kind, want.rate, want.ok)
		}
	}
	if nc, ka := report.Clients[0], report.Clients[1]; nc.MaxIdleMS != 0 || nc.MaxLifetimeMS != 0 || ka.MaxIdleMS != 3000 || ka.MaxLifetimeMS != 60000 {
		t.Errorf("pool limits: new-conn %v/%v ms, keep-alive %v/%v ms; want none for new-conn, 3000/60000 for keep-alive",
			nc.MaxIdleMS, nc.MaxLifetimeMS, ka.MaxIdleMS, ka.MaxLifetimeMS)
	}
	f, err := os.Open(events)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := make(map[string]bool)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e load.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		ids[e.ID] = true
	}
	if len(ids) != 30 {
		t.Errorf("%d distinct request ids in the events file, want 30", len(ids))
	}
}

// TestLoadClientErrors: a run whose responses are mostly 4xx warns on
// standard error, naming the status, the path and how to request
// another; one whose responses are mostly ok, or only a few 4xx, does
// not. Standard output has the report either way.
func TestLoadClientErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work" {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		name, path, output, want string
	}{
		{name: "404", path: "/", output: "text", want: "load: warning: 10 of 10 responses (100%) had a 4xx status, most often 404 Not Found: they count as ok, but path / is likely not one the server serves; give the path it serves in the URL, http://HOST:PORT/PATH\n"},
		{name: "ok", path: "/work", output: "text"},
		// A load pod's stream, whose reader warns of its own.
		{name: "jsonl", path: "/", output: "jsonl"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, stdout, stderr := runCLI(context.Background(), "load", srv.URL+tt.path, "--rate", "20", "--duration", "500ms", "-o", tt.output)
			if status != ExitOK || stderr != tt.want || !strings.Contains(stdout, "ok") {
				t.Errorf("exit status %d, stderr %q, stdout:\n%s\nwant %d, stderr %q and the report", status, stderr, stdout, ExitOK, tt.want)
			}
		})
	}
}

// TestClientErrorsWarning: the warning comes when most responses had a
// 4xx status (load.ClientErrors.Mostly), and says how many and which.
func TestClientErrorsWarning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		errors load.ClientErrors
		want   string
	}{
		{errors: load.ClientErrors{}},
		{errors: load.ClientErrors{Responses: 10, Count: 5, Commonest: 404}},
		{errors: load.ClientErrors{Responses: 10, Count: 6, Commonest: 401}, want: "warning: 6 of 10 responses (60%) had a 4xx status, most often 401 Unauthorized: they count as ok, but path /x is likely not one the server serves; set it"},
	} {
		got := clientErrorsWarning(tt.errors, "/x", "set it")
		if got != tt.want {
			t.Errorf("clientErrorsWarning(%+v) = %q, want %q", tt.errors, got, tt.want)
		}
	}
}

// TestLoadText: the summary lists only the seconds with failures, then the
// totals.
func TestLoadText(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // every connect is refused
	status, stdout, stderr := runCLI(context.Background(), "load", "http://"+addr+"/work", "--rate", "20", "--duration", "200ms")
	if status != ExitOK {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	// The four requests may straddle a second boundary: the lines of the
	// seconds with failures, between the headers and the totals, add up to 4.
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) < 3 {
		t.Fatalf("summary:\n%s\nwant the target, the client and its totals", stdout)
	}
	perSecond := 0
	for _, line := range lines[3:] {
		if strings.HasPrefix(line, "total ") {
			break
		}
		var n int
		if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "refused=%d", &n); err != nil {
			t.Errorf("second line %q: %v", line, err)
		}
		perSecond += n
	}
	if lines[0] != "http://"+addr+"/work, GETs over HTTP/1.1" || lines[2] != "new-conn 20/s" || perSecond != 4 || !strings.Contains(stdout, "\ntotal refused=4\n") {
		t.Errorf("summary:\n%s\nwant headers, the seconds with refused connects (4 in all), and total refused=4", stdout)
	}
}

// TestLoadStopFile: the run ends early once the stop file exists.
func TestLoadStopFile(t *testing.T) {
	t.Parallel()
	srv := podServer(t)
	stop := filepath.Join(t.TempDir(), "stop")
	time.AfterFunc(300*time.Millisecond, func() { os.WriteFile(stop, nil, 0o644) })
	start := time.Now()
	status, stdout, stderr := runCLI(context.Background(), "load", srv.URL, "--rate", "20", "--duration", "1m", "--stop-file", stop, "-o", "json")
	if status != ExitOK {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Errorf("run took %v, want it to stop soon after the stop file appeared at 300ms", elapsed)
	}
	var report load.Report
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatal(err)
	}
	if n := report.Clients[0].Totals.Total(); n < 1 || n >= 1200 {
		t.Errorf("%d requests, want some but far fewer than a minute's 1200", n)
	}
}

// TestLoadJSONLines: -o jsonl writes a line per request, then the report
// with its histograms, which load.ReadStream reads back.
func TestLoadJSONLines(t *testing.T) {
	t.Parallel()
	srv := podServer(t)
	status, stdout, stderr := runCLI(context.Background(), "load", srv.URL, "--client", "new-conn=40", "--client", "keep-alive=60",
		"--retry", "--retry-attempts", "2", "--duration", "500ms", "-o", "jsonl")
	if status != ExitOK {
		t.Fatalf("exit status %d: %s", status, stderr)
	}
	events, report, err := load.ReadStream(strings.NewReader(stdout))
	if err != nil {
		t.Fatal(err)
	}
	if report == nil || len(report.Clients) != 2 {
		t.Fatalf("report %+v, want one of two clients", report)
	}
	var total int64
	for _, c := range report.Clients {
		total += c.Totals.Total()
		if c.LatencyHistogram == "" || c.ScheduleLagHistogram == "" {
			t.Errorf("%s client: no histograms in the report line", c.Kind)
		}
	}
	if int64(len(events)) != total || total == 0 {
		t.Errorf("%d event lines, want one per request: %d", len(events), total)
	}
	if _, err := load.Merge(report, report); err != nil {
		t.Errorf("merge the report with itself: %v", err)
	}
}

// TestLoadWaitServing: with --wait-serving, the run begins once the
// target answers, so a server that starts late costs no failure; its
// stream's first line says when it began. A server that never answers is
// an error once the bound has passed, and nothing is sent.
func TestLoadWaitServing(t *testing.T) {
	t.Parallel()
	// A port where nothing listens yet: connects are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	type result struct {
		status         int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		status, stdout, stderr := runCLI(context.Background(), "load", "http://"+addr+"/", "--wait-serving", "30s",
			"--rate", "40", "--duration", "500ms", "-o", "jsonl")
		done <- result{status, stdout, stderr}
	}()
	select {
	case r := <-done:
		t.Fatalf("load ended (status %d, %s) while nothing listened", r.status, r.stderr)
	case <-time.After(700 * time.Millisecond):
	}
	up := time.Now()
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(load.PodHeader, "pod-a")
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	r := <-done
	if r.status != ExitOK {
		t.Fatalf("exit status %d: %s", r.status, r.stderr)
	}
	first, _, _ := strings.Cut(r.stdout, "\n")
	if !load.IsStartLine([]byte(first)) {
		t.Errorf("first line %q, want the start line", first)
	}
	_, report, err := load.ReadStream(strings.NewReader(r.stdout))
	if err != nil || report == nil {
		t.Fatalf("stream: report %v, %v", report, err)
	}
	if totals := report.Clients[0].Totals; totals[load.OK] != 20 || totals.Failed() != 0 {
		t.Errorf("totals %v, want 20 ok and no failure: the run begins once the server answers", totals)
	}
	if report.Start.Before(up) {
		t.Errorf("run began at %v, before the server listened at %v", report.Start, up)
	}

	// Nothing ever listens: an error after the bound, naming the flag and
	// the last failure, and no stream.
	srv.Close()
	start := time.Now()
	status, stdout, stderr := runCLI(context.Background(), "load", "http://"+addr+"/", "--wait-serving", "1s", "-o", "jsonl")
	elapsed := time.Since(start)
	if status != ExitSetup || !strings.Contains(stderr, "--wait-serving 1s") || !strings.Contains(stderr, "refused") || stdout != "" {
		t.Errorf("exit status %d, stderr %q, %d bytes of output; want %d, an error naming --wait-serving and the refused connects, no output",
			status, stderr, len(stdout), ExitSetup)
	}
	if elapsed < time.Second || elapsed > 20*time.Second {
		t.Errorf("failed after %v, want soon after the 1 s bound", elapsed)
	}
}

// TestLoadRoutes runs closingtime load as a process of a pod of
// `closingtime cluster` would run it, with CLOSINGTIME_KUBECONFIG and
// CLOSINGTIME_NODE_NAME, against a real API server: a Service's requests go
// to the endpoint of its EndpointSlice, an HTTP server of the test; with
// the slice emptied, every connect is refused. A kubeconfig that cannot be
// read, or a missing node name, is an error that names the variable.
func TestLoadRoutes(t *testing.T) {
	t.Parallel()
	cp := controlplanetest.Shared(t)
	client := controlplanetest.Client(t)
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "load-routes-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	// The endpoint: an HTTP server on a loopback address, which the API
	// knows by its PodIPInAPI address.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(load.PodHeader, "web-1")
	}))
	ln, err := net.Listen("tcp", "127.76.1.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if _, err := client.CoreV1().Services(ns.Name).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns.Name, Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "closingtime-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(addr.Port()))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{nodeagent.PodIPInAPI(addr.Addr()).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if slice, err = client.DiscoveryV1().EndpointSlices(ns.Name).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env := nodeagent.RoutingEnv(cp.Kubeconfig, "load-node", 0, 0)
	run := func(env ...corev1.EnvVar) (load.Counts, string, error) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "load", "http://web."+ns.Name+".svc:80/", "--rate", "20", "--duration", "1s", "-o", "json")
		cmd.Env = append(os.Environ(), runAsCommand+"=1")
		for _, e := range env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return load.Counts{}, stderr.String(), err
		}
		var report load.Report
		if err := json.Unmarshal(stdout.Bytes(), &report); err != nil || len(report.Clients) != 1 {
			t.Fatalf("JSON report: %v\n%s", err, stdout.String())
		}
		return report.Clients[0].Totals, stderr.String(), nil
	}

	totals, stderr, err := run(env...)
	if err != nil {
		t.Fatalf("load through the routing view: %v\n%s", err, stderr)
	}
	if totals[load.OK] != 20 || totals[load.OK] != totals.Total() {
		t.Errorf("with a Ready endpoint: totals %v, want 20 ok", totals)
	}

	slice.Endpoints = nil
	if _, err := client.DiscoveryV1().EndpointSlices(ns.Name).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	totals, stderr, err = run(env...)
	if err != nil {
		t.Fatalf("load through the routing view: %v\n%s", err, stderr)
	}
	if totals[load.Refused] != 20 || totals[load.Refused] != totals.Total() {
		t.Errorf("with no endpoint: totals %v, want 20 refused", totals)
	}

	missing := filepath.Join(t.TempDir(), "kubeconfig")
	for _, tt := range []struct {
		name string
		env  []corev1.EnvVar
		want []string
	}{
		{"unreadable kubeconfig", nodeagent.RoutingEnv(missing, "load-node", 0, 0), []string{nodeagent.KubeconfigEnv, missing}},
		{"no node", env[:1], []string{nodeagent.NodeNameEnv}},
		{"unreadable pod kubeconfig", []corev1.EnvVar{{Name: cluster.PodKubeconfigEnv, Value: missing}}, []string{cluster.PodKubeconfigEnv, missing}},
	} {
		_, stderr, err := run(tt.env...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != ExitUsage {
			t.Errorf("%s: %v, want exit status %d", tt.name, err, ExitUsage)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not name %s", tt.name, stderr, w)
			}
		}
	}
}
