package load

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/golden"
)

// goldenReport is seed 001's first rollout, as a report of two clients.
func goldenReport() *Report {
	at := func(s int) time.Time { return time.Date(2026, 10, 1, 13, 43, s, 0, time.UTC) }
	return &Report{
		URL:   "http://app/work",
		Start: at(25),
		End:   at(40),
		Clients: []ClientReport{
			{
				Kind:   NewConn,
				Rate:   50,
				Totals: Counts{OK: 414, Refused: 217, Reset: 8, ConnectTimeout: 23},
				Seconds: []Second{
					{Time: at(29), Counts: Counts{OK: 50}},
					{Time: at(30), Counts: Counts{OK: 33, Refused: 12, Reset: 1, ConnectTimeout: 4}},
					{Time: at(34), Counts: Counts{Refused: 50}},
				},
				Latency:     Percentiles{P50: 201 * time.Millisecond, P90: 204 * time.Millisecond, P99: 1210 * time.Millisecond, Max: 2003 * time.Millisecond},
				ScheduleLag: Percentiles{P50: 80 * time.Microsecond, P90: 150 * time.Microsecond, P99: 260 * time.Microsecond, Max: 640 * time.Microsecond},
				Pods:        map[string]int64{"app-69d5b57d4d-cxr7s": 141, "app-5f657484ff-np5gl": 134},
				Statuses:    map[int]int64{200: 410, 404: 4},
			},
			{
				Kind:        KeepAlive,
				Rate:        200,
				Connections: 8,
				Totals:      Counts{OK: 3000},
				Absorbed:    Counts{Reset: 3},
				Seconds:     []Second{{Time: at(29), Counts: Counts{OK: 200}}},
				Latency:     Percentiles{P50: 3 * time.Millisecond, P90: 42 * time.Millisecond, P99: 250 * time.Millisecond, Max: 480 * time.Millisecond},
				Pods:        map[string]int64{},
			},
		},
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, goldenReport()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "report.golden.txt"), b.Bytes())
}

// TestReportJSON pins the JSON field names, which scripts rely on, and
// checks that a report decodes to what was encoded.
func TestReportJSON(t *testing.T) {
	report := goldenReport()
	got, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "report.golden.json"), append(got, '\n'))
	var back Report
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(report, &back); diff != "" {
		t.Errorf("decoded report differs (-encoded +decoded):\n%s", diff)
	}
}

func TestClassText(t *testing.T) {
	for class := range Class(numClasses) {
		text, err := class.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Class
		if err := back.UnmarshalText(text); err != nil || back != class {
			t.Errorf("class %d → %q → %d, %v", class, text, back, err)
		}
	}
	if _, err := Class(numClasses).MarshalText(); err == nil {
		t.Error("an unknown class marshaled without error")
	}
}

func TestDescribeTarget(t *testing.T) {
	for _, tt := range []struct {
		name, target, want string
	}{
		{"HTTP/1.1", "http://127.0.0.1:8080/work", "GETs over HTTP/1.1"},
		{"h2c", "h2c://127.0.0.1:8080/work", "GETs over HTTP/2 without TLS"},
		{"the lab's Work", "grpc://127.0.0.1:50051", "gRPC calls of closingtime.lab.v1.Lab/Work"},
		{"the lab's Work, with a slash", "grpc://127.0.0.1:50051/", "gRPC calls of closingtime.lab.v1.Lab/Work"},
		{"a method", "grpc://127.0.0.1:50051/grpc.health.v1.Health/Check", "gRPC calls of grpc.health.v1.Health/Check"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeTarget(tt.target); got != tt.want {
				t.Errorf("DescribeTarget(%q) = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}
