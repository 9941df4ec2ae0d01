package report

import (
	"bytes"
	"encoding/json"
	"html"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// twoScenarios returns two scenarios' results as a lab run makes them: one that
// failed with refused requests and a killed pod, one without failures.
func twoScenarios() *results.Results {
	start := time.Date(2026, 11, 29, 13, 43, 30, 0, time.UTC)
	f := ptr.To[float64]
	n := ptr.To[int]
	var plain, none load.Counts
	plain[load.OK], plain[load.Refused], plain[load.Closed] = 140, 252, 9
	none[load.OK] = 1350
	var second load.Counts
	second[load.Refused] = 50
	return &results.Results{Scenarios: []results.Result{
		{
			Name: "1-plain", Description: "no readiness probe", Seed: "001", Deployment: "default/app", Target: "grpc://app.default:50051/grpc.health.v1.Health/Check",
			Totals: results.Totals{Requests: 401, OK: 140, Refused: 252, Closed: 9},
			Runs: []results.Run{{
				Repetition: 1, Start: start,
				Totals:        results.Totals{Requests: 401, OK: 140, Refused: 252, Closed: 9},
				Clients:       []load.ClientReport{{Kind: load.NewConn, Rate: 50, Totals: plain, Latency: load.Percentiles{P50: 201 * time.Millisecond, P99: 203 * time.Millisecond}}},
				P99MS:         203,
				FailedSeconds: []results.FailedSecond{{Second: 0, Counts: second}, {Second: 1, Counts: second}},
				OldPods: []results.OldPod{
					{Name: "app-6c75f686b4-p9gcg", SigtermMS: f(4), LastRequestMS: f(-320), GapMS: f(324), AfterSigterm: n(0), DrainMS: 3.5, ExitCode: 143},
					{Name: "app-6c75f686b4-7sgbx", SigtermMS: f(5000), LastRequestMS: f(14570), GapMS: f(-9570), AfterSigterm: n(43), DrainMS: 10000, ExitCode: 137},
				},
				RolloutMS: 12.5,
				Timeline: []results.Entry{
					{AtMS: 0, Source: results.SourceCluster, Kind: "replicaset_scaled", Detail: map[string]string{"object": "ReplicaSet/app-7d9", "from": "0", "to": "1"}},
					{AtMS: 4, Source: results.SourceCluster, Kind: "signal_sent", Pod: "app-6c75f686b4-p9gcg", Node: "node-1", Detail: map[string]string{"signal": "SIGTERM", "grace": "30s"}},
					{AtMS: 5, Source: results.SourcePod, Kind: "sigterm", Pod: "app-6c75f686b4-p9gcg", Detail: map[string]string{"last_request": "2026-11-29T13:43:29.680Z"}},
					{AtMS: 120, Source: results.SourceClient, Kind: "refused", Detail: map[string]string{"client": "new-conn", "id": "r-1"}},
				},
			}},
		},
		{
			Name: "3-graceful", Seed: "001", Deployment: "default/app",
			Totals: results.Totals{Requests: 1350, OK: 1350},
			Runs: []results.Run{{
				Repetition: 1, Start: start.Add(time.Minute),
				Totals:    results.Totals{Requests: 1350, OK: 1350},
				Clients:   []load.ClientReport{{Kind: load.NewConn, Rate: 50, Totals: none}},
				P99MS:     202,
				OldPods:   []results.OldPod{{Name: "app-5bfbb5fb9f-f2rck", SigtermMS: f(11010), LastRequestMS: f(6280), GapMS: f(4730), AfterSigterm: n(0), DrainMS: 5002, ExitCode: 143}},
				RolloutMS: 23010,
			}},
		},
	}}
}

// disruptions returns the results of scenarios with disruption figures:
// an outage with restarts, back-offs and a recovery; a crash-looping
// release rolled back; a drain blocked by a budget and one that went
// through, over two runs. Their timelines have the runner's steps.
func disruptions() *results.Results {
	start := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	f := ptr.To[float64]
	step := func(atMS float64, kind, node string, detail map[string]string) results.Entry {
		return results.Entry{AtMS: atMS, Source: results.SourceRunner, Kind: kind, Node: node, Detail: detail}
	}
	drain := func(endMS float64, drained string) []results.Entry {
		return []results.Entry{
			step(0.1, results.RunnerDrainStarted, "node-1", map[string]string{"timeout": "12s"}),
			step(endMS, results.RunnerDrainEnded, "node-1", map[string]string{"drained": drained}),
		}
	}
	var refused load.Counts
	refused[load.OK], refused[load.Refused] = 10, 10
	none, two := 0, 2
	return &results.Results{Scenarios: []results.Result{
		{
			Name: "probe-liveness-deep", Seed: "000", Deployment: "default/app", Action: "outage",
			Totals: results.Totals{Requests: 600, OK: 400, Refused: 200},
			Runs: []results.Run{{
				Repetition: 1, Start: start, Totals: results.Totals{Requests: 600, OK: 400, Refused: 200},
				FailedSeconds: []results.FailedSecond{{Second: 9, Counts: refused}},
				Restarts:      6,
				Capacity:      &results.Capacity{MinReady: 0, Replicas: 3, AtMS: 5250},
				BackOffs: []results.BackOff{
					{AtMS: 9650, Pod: "app-97986c4fd-vf2jp", DelayMS: 9998.5},
					{AtMS: 9770, Pod: "app-97986c4fd-2bxqw", DelayMS: 9999},
					{AtMS: 23100, Pod: "app-97986c4fd-vf2jp", DelayMS: 19997},
				},
				Outage:    &results.Outage{Mode: "blackhole", StartMS: 0.2, EndMS: 30000.4},
				RecoverMS: f(12400),
				Timeline: []results.Entry{
					step(0.2, results.RunnerOutageStarted, "", map[string]string{"mode": "blackhole"}),
					step(30000.4, results.RunnerOutageEnded, "", map[string]string{"mode": "blackhole"}),
				},
			}},
		},
		{
			Name: "crashloop", Seed: "000", Deployment: "default/app", Action: "set-env",
			Totals: results.Totals{Requests: 840, OK: 840},
			Runs: []results.Run{{
				Repetition: 1, Start: start.Add(time.Minute), Totals: results.Totals{Requests: 840, OK: 840},
				OldPods:      []results.OldPod{{Name: "app-85fcd6b497-q68cp", AfterSigterm: &none, ExitCode: -1}},
				RolloutMS:    38050,
				Restarts:     3,
				Capacity:     &results.Capacity{MinReady: 2, Replicas: 2, Allowed: &two},
				BackOffs:     []results.BackOff{{AtMS: 40, Pod: "app-85fcd6b497-q68cp", DelayMS: 9999}, {AtMS: 10060, Pod: "app-85fcd6b497-q68cp", DelayMS: 19998}, {AtMS: 30110, Pod: "app-85fcd6b497-q68cp", DelayMS: 39998}},
				RolledBackMS: f(38002),
				Timeline: []results.Entry{
					step(0.9, results.RunnerEnvApplied, "", map[string]string{"CT_CRASH_CODE": "1"}),
					step(38002, results.RunnerRolledBack, "", map[string]string{"timeout": "38s"}),
				},
			}},
		},
		{
			Name: "pdb-4-drain-min-available", Seed: "003", Deployment: "default/app", Action: "drain",
			Totals: results.Totals{Requests: 320, OK: 320},
			Runs: []results.Run{{
				Repetition: 1, Start: start.Add(2 * time.Minute), Totals: results.Totals{Requests: 320, OK: 320},
				Capacity:  &results.Capacity{MinReady: 1, Replicas: 1},
				Evictions: &results.Evictions{Refused: 3},
				Drain:     &results.DrainOutcome{Node: "node-1", EndMS: 12001, TimeoutMS: 12000},
				Timeline:  drain(12001, "false"),
			}},
		},
		{
			Name: "pdb-5-drain-max-unavailable", Seed: "003", Deployment: "default/app", Action: "drain",
			Totals: results.Totals{Requests: 240, OK: 240},
			Runs: []results.Run{
				{
					Repetition: 1, Start: start.Add(3 * time.Minute), Totals: results.Totals{Requests: 120, OK: 120},
					Capacity:  &results.Capacity{MinReady: 0, Replicas: 1, AtMS: 1.5},
					Evictions: &results.Evictions{Accepted: 1},
					Drain:     &results.DrainOutcome{Node: "node-1", Drained: true, EndMS: 2010, TimeoutMS: 12000},
					Timeline:  drain(2010, "true"),
				},
				{
					Repetition: 2, Start: start.Add(4 * time.Minute), Totals: results.Totals{Requests: 120, OK: 120},
					Capacity:  &results.Capacity{MinReady: 0, Replicas: 1, AtMS: 2},
					Evictions: &results.Evictions{Accepted: 1},
					Drain:     &results.DrainOutcome{Node: "node-1", Drained: true, EndMS: 2220, TimeoutMS: 12000},
					Timeline:  drain(2220, "true"),
				},
			},
		},
	}}
}

// userApp returns the results of a rollout of a server that sets no
// X-Pod-Name header, through routing that hid the pods' addresses: no
// request could be attributed to a pod, so the old pods' request figures
// are unknown.
func userApp() *results.Results {
	start := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	f := ptr.To[float64]
	var ok load.Counts
	ok[load.OK] = 750
	two := 2
	run := results.Run{
		Repetition: 1, Start: start, Totals: results.Totals{Requests: 750, OK: 750},
		Clients: []load.ClientReport{{Kind: load.NewConn, Rate: 50, Totals: ok, Latency: load.Percentiles{P50: 2 * time.Millisecond, P99: 9 * time.Millisecond}}},
		P99MS:   9,
		OldPods: []results.OldPod{
			{Name: "myapp-5d8f7c9b6-k2x7q", SigtermMS: f(5012), DrainMS: 5040, ExitCode: 143},
			{Name: "myapp-5d8f7c9b6-w9p4n", SigtermMS: f(11030), DrainMS: 5051, ExitCode: 143},
		},
		RolloutMS: 16090,
		Capacity:  &results.Capacity{MinReady: 2, Replicas: 2, Allowed: &two},
	}
	return &results.Results{Scenarios: []results.Result{{
		Name: "rollout", Deployment: "default/myapp", Action: "rollout-restart",
		Totals: run.Totals, Runs: []results.Run{run},
	}}}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name    string
		results func() *results.Results
		render  func(*bytes.Buffer, *results.Results) error
	}{
		{name: "table.txt", results: twoScenarios, render: func(b *bytes.Buffer, r *results.Results) error { return WriteTable(b, r) }},
		{name: "text.txt", results: twoScenarios, render: func(b *bytes.Buffer, r *results.Results) error { return WriteText(b, r) }},
		{name: "results.json", results: twoScenarios, render: func(b *bytes.Buffer, r *results.Results) error { return results.Write(b, r) }},
		{name: "disruptions.txt", results: disruptions, render: func(b *bytes.Buffer, r *results.Results) error { return WriteText(b, r) }},
		{name: "disruptions.json", results: disruptions, render: func(b *bytes.Buffer, r *results.Results) error { return results.Write(b, r) }},
		{name: "unattributed.txt", results: userApp, render: func(b *bytes.Buffer, r *results.Results) error { return WriteText(b, r) }},
		{name: "unattributed.json", results: userApp, render: func(b *bytes.Buffer, r *results.Results) error { return results.Write(b, r) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got bytes.Buffer
			if err := tt.render(&got, tt.results()); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tt.name+".golden"), got.Bytes())
		})
	}
}

// TestCapacityText spells a run's capacity against what its rollout's
// strategy allows: nothing said without an allowance (an action that is
// not a rollout, or an older results file), the allowance when the run
// kept to it, and that it fell below it otherwise.
func TestCapacityText(t *testing.T) {
	two := 2
	tests := []struct {
		name     string
		capacity results.Capacity
		want     string
	}{
		{name: "not a rollout", capacity: results.Capacity{MinReady: 2, Replicas: 3, AtMS: 1000},
			want: "  capacity: 2 of 3 pods ready at the fewest, from +1.00s\n"},
		{name: "as allowed", capacity: results.Capacity{MinReady: 2, Replicas: 3, Allowed: &two, AtMS: 1000},
			want: "  capacity: 2 of 3 pods ready at the fewest, from +1.00s; the rollout strategy allows 2\n"},
		{name: "below", capacity: results.Capacity{MinReady: 1, Replicas: 3, Allowed: &two, AtMS: 1000},
			want: "  capacity: 1 of 3 pods ready at the fewest, from +1.00s, below the 2 the rollout strategy allows\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeDisruption(&b, results.Run{Capacity: &tt.capacity})
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTableDescriptions checks that each row of the comparison table has
// its scenario's description on a line of its own under it, starting
// under the second column, one line whatever whitespace it holds, and
// that a scenario without one (a results file from before descriptions
// were recorded) has none.
func TestTableDescriptions(t *testing.T) {
	r := twoScenarios()
	r.Scenarios[1].Description = "readiness,\n\ta preStop sleep"
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	col := strings.Index(lines[0], "runs")
	want := []string{"scenario", "1-plain", "no readiness probe", "3-graceful", "readiness, a preStop sleep"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %q, want it to have %q", i, lines[i], w)
		}
	}
	for _, i := range []int{2, 4} {
		if strings.TrimSpace(lines[i][:col]) != "" || lines[i][col] == ' ' {
			t.Errorf("line %d = %q: want the description to start at column %d, under runs", i, lines[i], col)
		}
	}

	r.Scenarios[0].Description, r.Scenarios[1].Description = "", ""
	b.Reset()
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 3 {
		t.Errorf("without descriptions, %d lines, want 3:\n%s", n, b.String())
	}
}

// TestReadJSON checks that the fixtures' results read back as they were
// written.
func TestReadJSON(t *testing.T) {
	for _, fixture := range []func() *results.Results{twoScenarios, disruptions, userApp} {
		var b bytes.Buffer
		if err := results.Write(&b, fixture()); err != nil {
			t.Fatal(err)
		}
		got, err := results.Read(&b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fixture(), got); diff != "" {
			t.Errorf("read back differs (-wrote +read):\n%s", diff)
		}
	}
}

// TestOldPodLine: an old pod's line says when the last request it
// answered reached it, and counts the requests it answered after SIGTERM
// in words that agree with the count.
func TestOldPodLine(t *testing.T) {
	f := ptr.To[float64]
	pod := func(name string, after int) results.OldPod {
		return results.OldPod{Name: name, SigtermMS: f(5000), LastRequestMS: f(5720), GapMS: f(-720), AfterSigterm: &after, DrainMS: 1000, ExitCode: 0}
	}
	r := &results.Results{Scenarios: []results.Result{{Name: "s", Runs: []results.Run{{Repetition: 1,
		OldPods: []results.OldPod{pod("app-1", 1), pod("app-2", 2)}}}}}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  old pod app-1: SIGTERM +5.00s, last answered request +5.72s (0.72s after SIGTERM), 1 request after SIGTERM, exit 0 1.0s after termination began\n",
		"  old pod app-2: SIGTERM +5.00s, last answered request +5.72s (0.72s after SIGTERM), 2 requests after SIGTERM,",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestUnattributed: when no request of a run could be attributed to a pod,
// the old pods' request figures read as unknown, "-" in text and absent in
// JSON, with one line that says why; a count of zero that was measured
// stays 0 and present.
func TestUnattributed(t *testing.T) {
	var text bytes.Buffer
	if err := WriteText(&text, userApp()); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{
		"old pod myapp-5d8f7c9b6-k2x7q: SIGTERM +5.01s, last answered request -, - requests after SIGTERM,",
		"old pod myapp-5d8f7c9b6-w9p4n: SIGTERM +11.03s, last answered request -, - requests after SIGTERM,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, unattributedNote); n != 1 {
		t.Errorf("the note that says why appears %d times, want once:\n%s", n, out)
	}

	page := html.UnescapeString(renderHTML(t, userApp()))
	for _, want := range []string{
		`<td class="mono">myapp-5d8f7c9b6-k2x7q</td><td>+5.01s</td><td>-</td><td></td><td class="zero">-</td>`,
		`<p class="muted">` + unattributedNote + `</p>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	var js bytes.Buffer
	if err := results.Write(&js, userApp()); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Scenarios []struct {
			Runs []struct {
				OldPods []map[string]any `json:"oldPods"`
			} `json:"runs"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(js.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, p := range raw.Scenarios[0].Runs[0].OldPods {
		for _, key := range []string{"afterSigterm", "lastRequestMs", "gapMs"} {
			if v, ok := p[key]; ok {
				t.Errorf("old pod %v: %s = %v, want it absent (unknown)", p["name"], key, v)
			}
		}
		if _, ok := p["sigtermMs"]; !ok {
			t.Errorf("old pod %v: no sigtermMs; the signal's time is known", p["name"])
		}
	}

	// The same run with its requests attributed, none after SIGTERM.
	known := userApp()
	zero := 0
	for i := range known.Scenarios[0].Runs[0].OldPods {
		known.Scenarios[0].Runs[0].OldPods[i].AfterSigterm = &zero
	}
	text.Reset()
	js.Reset()
	if err := WriteText(&text, known); err != nil {
		t.Fatal(err)
	}
	if err := results.Write(&js, known); err != nil {
		t.Fatal(err)
	}
	if out := text.String(); strings.Contains(out, unattributedNote) || !strings.Contains(out, ", 0 requests after SIGTERM,") {
		t.Errorf("attributed run: want 0 requests after SIGTERM and no note:\n%s", out)
	}
	if n := strings.Count(js.String(), `"afterSigterm": 0`); n != 2 {
		t.Errorf("attributed run: %d old pods with \"afterSigterm\": 0 in JSON, want 2:\n%s", n, js.String())
	}
}

// TestClientLine: a client's line splits its 5xx by status and by the
// reason of the proxy that answered them, and counts what the ingress
// retried.
func TestClientLine(t *testing.T) {
	var totals load.Counts
	totals[load.OK], totals[load.HTTP5xx] = 90, 10
	c := load.ClientReport{Kind: load.KeepAlive, Rate: 150, Totals: totals,
		Statuses:     map[int]int64{200: 90, 504: 3, 502: 7},
		ProxyReasons: map[proxy.Reason]int64{proxy.UpstreamRefused: 7, proxy.UpstreamConnectTimeout: 3},
		ProxyRetried: 4}
	want := "keep-alive at 150/s: ok=90 http5xx=10 (502=7 504=3; the proxy's: upstream-connect-timeout=3 upstream-refused=7), retried by the ingress 4"
	if got := clientLine(c); got != want {
		t.Errorf("clientLine:\n got %s\nwant %s", got, want)
	}
}
