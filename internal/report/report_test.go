package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// results returns two scenarios' results as a lab run makes them: one that
// failed with refused requests and a killed pod, one without failures.
func results() *scenario.Results {
	start := time.Date(2026, 11, 29, 13, 43, 30, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	var plain, none load.Counts
	plain[load.OK], plain[load.Refused], plain[load.Closed] = 140, 252, 9
	none[load.OK] = 1350
	var second load.Counts
	second[load.Refused] = 50
	return &scenario.Results{Scenarios: []scenario.Result{
		{
			Name: "1-plain", Description: "no readiness probe", Seed: "001", Deployment: "default/app",
			Totals: scenario.Totals{Requests: 401, OK: 140, Refused: 252, Closed: 9},
			Runs: []scenario.Run{{
				Repetition: 1, Start: start,
				Totals:        scenario.Totals{Requests: 401, OK: 140, Refused: 252, Closed: 9},
				Clients:       []load.ClientReport{{Kind: load.NewConn, Rate: 50, Totals: plain, Latency: load.Percentiles{P50: 201 * time.Millisecond, P99: 203 * time.Millisecond}}},
				P99MS:         203,
				FailedSeconds: []scenario.FailedSecond{{Second: 0, Counts: second}, {Second: 1, Counts: second}},
				OldPods: []scenario.OldPod{
					{Name: "app-6c75f686b4-p9gcg", SigtermMS: f(4), LastRequestMS: f(-320), GapMS: f(324), DrainMS: 3.5, ExitCode: 143},
					{Name: "app-6c75f686b4-7sgbx", SigtermMS: f(5000), LastRequestMS: f(14570), GapMS: f(-9570), AfterSigterm: 43, DrainMS: 10000, ExitCode: 137},
				},
				RolloutMS: 12.5,
				Timeline: []scenario.Entry{
					{AtMS: 0, Source: "cluster", Kind: "replicaset_scaled", Detail: map[string]string{"object": "ReplicaSet/app-7d9", "from": "0", "to": "1"}},
					{AtMS: 4, Source: "cluster", Kind: "signal_sent", Pod: "app-6c75f686b4-p9gcg", Node: "node-1", Detail: map[string]string{"signal": "SIGTERM", "grace": "30s"}},
					{AtMS: 5, Source: "pod", Kind: "sigterm", Pod: "app-6c75f686b4-p9gcg", Detail: map[string]string{"last_request": "2026-11-29T13:43:29.680Z"}},
					{AtMS: 120, Source: "client", Kind: "refused", Detail: map[string]string{"client": "new-conn", "id": "r-1"}},
				},
			}},
		},
		{
			Name: "3-graceful", Seed: "001", Deployment: "default/app",
			Totals: scenario.Totals{Requests: 1350, OK: 1350},
			Runs: []scenario.Run{{
				Repetition: 1, Start: start.Add(time.Minute),
				Totals:    scenario.Totals{Requests: 1350, OK: 1350},
				Clients:   []load.ClientReport{{Kind: load.NewConn, Rate: 50, Totals: none}},
				P99MS:     202,
				OldPods:   []scenario.OldPod{{Name: "app-5bfbb5fb9f-f2rck", SigtermMS: f(11010), LastRequestMS: f(6280), GapMS: f(4730), DrainMS: 5002, ExitCode: 143}},
				RolloutMS: 23010,
			}},
		},
	}}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name   string
		render func(*bytes.Buffer, *scenario.Results) error
	}{
		{name: "table.txt", render: func(b *bytes.Buffer, r *scenario.Results) error { return WriteTable(b, r) }},
		{name: "text.txt", render: func(b *bytes.Buffer, r *scenario.Results) error { return WriteText(b, r) }},
		{name: "results.json", render: func(b *bytes.Buffer, r *scenario.Results) error { return WriteJSON(b, r) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got bytes.Buffer
			if err := tt.render(&got, results()); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got.String()); diff != "" {
				t.Errorf("%s differs from %s (-want +got):\n%s", tt.name, golden, diff)
			}
		})
	}
}

// TestReadJSON checks that results read back as they were written.
func TestReadJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, results()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(&b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(results(), got); diff != "" {
		t.Errorf("read back differs (-wrote +read):\n%s", diff)
	}
}
