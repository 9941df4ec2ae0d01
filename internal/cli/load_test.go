package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/load"
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
		{name: "URL without scheme", args: []string{"load", "127.0.0.1:8080/work"}, wantErr: "target URL"},
		{name: "unknown client kind", args: []string{"load", "http://127.0.0.1:1/", "--client", "http2"}, wantErr: `unknown client kind "http2"`},
		{name: "client twice", args: []string{"load", "http://127.0.0.1:1/", "--client", "new-conn", "--client", "new-conn=5"}, wantErr: "given twice"},
		{name: "bad output", args: []string{"load", "http://127.0.0.1:1/", "-o", "yaml"}, wantErr: "invalid --output"},
		{name: "zero duration", args: []string{"load", "http://127.0.0.1:1/", "--duration", "0s"}, wantErr: "must be positive"},
		{name: "zero retry attempts", args: []string{"load", "http://127.0.0.1:1/", "--retry", "--retry-attempts", "0"}, wantErr: "--retry-attempts and --retry-base-delay must be positive"},
		{name: "jsonl and events", args: []string{"load", "http://127.0.0.1:1/", "-o", "jsonl", "--events", "e.jsonl"}, wantErr: "give --events or -o jsonl, not both"},
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
		"--duration", "500ms", "-o", "json", "--events", events)
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
	// seconds with failures, between the header and the totals, add up to 4.
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	perSecond := 0
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "total ") {
			break
		}
		var n int
		if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "refused=%d", &n); err != nil {
			t.Errorf("second line %q: %v", line, err)
		}
		perSecond += n
	}
	if lines[0] != "new-conn 20/s" || perSecond != 4 || !strings.Contains(stdout, "\ntotal refused=4\n") {
		t.Errorf("summary:\n%s\nwant a header, the seconds with refused connects (4 in all), and total refused=4", stdout)
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
