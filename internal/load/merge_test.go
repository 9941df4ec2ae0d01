package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMergeEqualsOneReport splits the same requests between two recorders
// of half the rate each, and checks that merging their reports gives the
// report of one recorder that recorded them all, percentiles and
// histograms included.
func TestMergeEqualsOneReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 10, 1, 13, 43, 25, 0, time.UTC)
	kinds := []Client{{Kind: NewConn, Rate: 50}, {Kind: KeepAlive, Rate: 200, Connections: 8}}
	var whole, parts [2][]*recorder
	for i, c := range kinds {
		whole[i] = []*recorder{newRecorder(c)}
		half := c
		half.Rate, half.Connections = c.Rate/2, c.Connections/2
		parts[i] = []*recorder{newRecorder(half), newRecorder(half)}
	}
	for _, rs := range append(whole[:], parts[:]...) {
		for _, r := range rs {
			r.results = newResultSink(nil, nil)
		}
	}
	classes := []Class{OK, OK, OK, OK, Refused, Reset, ConnectTimeout, HTTP5xx}
	for i := range 5000 {
		k := i % 2
		res := &Result{
			ID: "r-" + string(rune('a'+k)), Client: kinds[k].Kind,
			Time:  start.Add(time.Duration(i) * 3 * time.Millisecond),
			Lag:   time.Duration(rng.IntN(2000)) * time.Microsecond,
			Total: time.Duration(rng.ExpFloat64()*20e3) * time.Microsecond,
			Class: classes[rng.IntN(len(classes))], Attempts: 1,
		}
		res.FirstClass = res.Class
		if res.Class == OK && rng.IntN(10) == 0 {
			res.FirstClass, res.Attempts = Reset, 2
		}
		if res.Class == OK || res.Class == HTTP5xx {
			res.Pod = []string{"web-a", "web-b", "web-c"}[rng.IntN(3)]
		}
		whole[k][0].record(res)
		parts[k][rng.IntN(2)].record(res)
	}
	report := func(rs ...*recorder) *Report {
		r := &Report{URL: "http://web.default/", Start: start, End: start.Add(15 * time.Second)}
		for _, rec := range rs {
			r.Clients = append(r.Clients, rec.report())
		}
		return r
	}
	want := report(whole[0][0], whole[1][0])
	a, b := report(parts[0][0], parts[1][0]), report(parts[0][1], parts[1][1])
	b.Start, b.End = start.Add(time.Millisecond), start.Add(16*time.Second)
	want.End = b.End
	got, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged report differs from the report of all the requests (-want +got):\n%s", diff)
	}
	if want.Clients[0].Latency.P99 == 0 || want.Clients[1].Totals.Failed() == 0 {
		t.Errorf("the requests made no latency or no failures: %+v", want.Clients)
	}
}

// TestMergeGenerators merges the reports of two real generators against
// one server: the totals, seconds and pods add up, and the merged
// percentiles lie within the parts'.
func TestMergeGenerators(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(PodHeader, "web-a")
	}))
	defer srv.Close()
	var reports []*Report
	for range 2 {
		gen, err := New(Config{URL: srv.URL, Clients: []Client{{Kind: NewConn, Rate: 100}}, Duration: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		r, err := gen.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	m, err := Merge(reports...)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := reports[0].Clients[0], reports[1].Clients[0], m.Clients[0]
	if c.Totals[OK] != a.Totals[OK]+b.Totals[OK] || c.Totals[OK] == 0 || c.Pods["web-a"] != c.Totals[OK] || c.Statuses[http.StatusOK] != c.Totals[OK] || c.Rate != 200 {
		t.Errorf("merged %+v from %+v and %+v", c, a, b)
	}
	if c.Latency.Max != max(a.Latency.Max, b.Latency.Max) ||
		c.Latency.P50 < min(a.Latency.P50, b.Latency.P50) || c.Latency.P50 > max(a.Latency.P50, b.Latency.P50) {
		t.Errorf("merged latency %+v from %+v and %+v", c.Latency, a.Latency, b.Latency)
	}
}

func TestMergeErrors(t *testing.T) {
	ok := func() *Report {
		rec := newRecorder(Client{Kind: NewConn, Rate: 1})
		return &Report{URL: "http://a/", Clients: []ClientReport{rec.report()}}
	}
	other := ok()
	other.URL = "http://b/"
	bare := ok()
	bare.Clients[0].LatencyHistogram = ""
	garbled := ok()
	garbled.Clients[0].ScheduleLagHistogram = "not a histogram"
	for _, tt := range []struct {
		name    string
		reports []*Report
		want    string
	}{
		{"none", nil, "no report"},
		{"other URL", []*Report{ok(), other}, "report 1 is of http://b/, not http://a/"},
		{"no histogram", []*Report{ok(), bare}, "report 1: new-conn client's latency histogram"},
		{"garbled histogram", []*Report{garbled}, "report 0: new-conn client's schedule lag histogram"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Merge(tt.reports...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Merge: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestStream writes a generator's stream as `closingtime load -o jsonl`
// does and reads it back.
func TestStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var buf bytes.Buffer
	var direct []Result
	gen, err := New(Config{URL: srv.URL, Clients: []Client{{Kind: KeepAlive, Rate: 100}}, Duration: 200 * time.Millisecond,
		Events: &buf, OnResult: func(r Result) { direct = append(direct, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteStartLine(&buf, time.Now()); err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
	if !IsStartLine(first) {
		t.Errorf("IsStartLine(%s) = false, want true", first)
	}
	report, err := gen.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteReportLine(&buf, report); err != nil {
		t.Fatal(err)
	}
	events, got, err := ReadStream(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(events)) != report.Clients[0].Totals.Total() || len(events) == 0 {
		t.Errorf("%d events, want %d", len(events), report.Clients[0].Totals.Total())
	}
	// The event lines decode into the results that OnResult got, in the
	// same order.
	if diff := cmp.Diff(direct, events, sameResult); diff != "" {
		t.Errorf("results read back (-OnResult +read):\n%s", diff)
	}
	// Times go through JSON at their RFC 3339 precision.
	report.Start, report.End = report.Start.Round(0), report.End.Round(0)
	if diff := cmp.Diff(report, got); diff != "" {
		t.Errorf("report read back (-written +read):\n%s", diff)
	}

	for _, tt := range []struct{ name, stream, want string }{
		{"not JSON", okLine + "\nclosingtime: load: oops\n", "line 2"},
		{"neither", "{}\n", "line 1: neither a request nor the report"},
		{"after the report", `{"report":{"url":"http://a/"}}` + "\n" + okLine + "\n", "line 2: a line after the report"},
		{"start not first", okLine + "\n" + `{"start":"2026-01-02T03:04:05Z"}` + "\n", "line 2: a start line after the first line"},
		{"start not a time", `{"start":"soon"}` + "\n", "line 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ReadStream(strings.NewReader(tt.stream)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadStream: %v, want an error with %q", err, tt.want)
			}
		})
	}
	for _, line := range []string{okLine, `{"report":{"start":"2026-01-02T03:04:05Z"}}`, `{"start":"soon"}`, "closingtime: load: oops"} {
		if IsStartLine([]byte(line)) {
			t.Errorf("IsStartLine(%s) = true, want false", line)
		}
	}
	// A stream cut before its report has no report and no error.
	events, got, err = ReadStream(strings.NewReader(okLine + "\n"))
	if err != nil || got != nil || len(events) != 1 {
		t.Errorf("cut stream: %d events, report %v, %v; want 1 event and no report", len(events), got, err)
	}
}

// okLine is the event line of an ok request.
const okLine = `{"id":"a","client":"new-conn","time":"2026-01-02T03:04:05Z","class":"ok"}`

// sameResult compares Results: their errors by their text, as an error
// read back from a stream keeps only that, and their addresses by value.
var sameResult = cmp.Options{
	cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
}

// TestStreamResult writes results that carry every field as event lines
// and reads them back: each is the result written, but for its Err, which
// keeps its text, and its Time, which is in UTC.
func TestStreamResult(t *testing.T) {
	at := time.Date(2026, 10, 1, 13, 43, 25, 123456789, time.FixedZone("CEST", 2*3600))
	written := []Result{
		{ID: "r-0", Client: KeepAlive, Time: at, Lag: 1234567 * time.Nanosecond, Connect: 4023 * time.Microsecond,
			FirstByte: 9 * time.Millisecond, Total: 10*time.Millisecond + 1, Class: OK, Status: 200, Pod: "web-a",
			Addr: netip.MustParseAddrPort("[fe80::1%eth0]:8080"), ConnRequests: 3, ConnAge: 1500*time.Millisecond + 7, Attempts: 2, FirstClass: Reset,
			FirstFailure: &Attempt{Class: Reset, Addr: netip.MustParseAddrPort("10.77.0.3:8080"), ConnRequests: 41, ConnAge: 29*time.Second + 3,
				Connect: 2 * time.Microsecond, Total: 1200 * time.Microsecond, Err: errors.New("read response: connection reset by peer")},
			Reprobe: &Reprobe{Class: OK, Addr: netip.MustParseAddrPort("10.77.0.4:8080"), Pod: "web-b", Status: 200, At: 10*time.Millisecond + 3, Total: 900 * time.Microsecond}},
		{ID: "r-4", Client: KeepAlive, Time: at.Add(4 * time.Second), Connect: time.Millisecond, Total: 3 * time.Millisecond, Class: Closed,
			Addr: netip.MustParseAddrPort("127.0.0.1:8080"), ConnRequests: 1, ConnAge: time.Second, Attempts: 1, FirstClass: Closed, Err: errors.New("read response: EOF"),
			Reprobe: &Reprobe{Class: Refused, Addr: netip.MustParseAddrPort("127.0.0.1:8080"), At: 3*time.Millisecond + 1, Total: 80 * time.Microsecond}},
		{ID: "r-1", Client: NewConn, Time: at.Add(time.Second), Total: 2 * time.Second, Class: ConnectTimeout,
			Addr: netip.MustParseAddrPort("10.96.0.10:80"), Attempts: 1, FirstClass: ConnectTimeout, Err: errors.New("dial tcp: i/o timeout")},
		{ID: "r-3", Client: NewConn, Time: at.Add(3 * time.Second), Total: 300 * time.Millisecond, Class: Refused, Attempts: 3, FirstClass: Refused,
			FirstFailure: &Attempt{Class: Refused, Total: time.Millisecond, Err: errors.New("connection refused")}, Err: errors.New("connection refused")},
		{ID: "r-2", Client: NewConn, Time: at.Add(2 * time.Second), Class: Error, FirstClass: Error, Err: errors.New("bad request")},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range written {
		if err := enc.Encode(EventOf(&r)); err != nil {
			t.Fatal(err)
		}
	}
	// A reader that wants only whether the connection was reused still
	// finds "reused".
	if line := buf.String(); !strings.Contains(line, `"reused":true,"connRequests":3,"connAgeMs":1500.000007,`) {
		t.Errorf("event line %s: want reused, connRequests and connAgeMs", line)
	}
	read, report, err := ReadStream(&buf)
	if err != nil || report != nil {
		t.Fatalf("ReadStream: report %v, %v; want no report, no error", report, err)
	}
	if diff := cmp.Diff(written, read, sameResult); diff != "" {
		t.Errorf("results read back (-written +read):\n%s", diff)
	}
	if read[0].Time.Location() != time.UTC {
		t.Errorf("time read back in %v, want UTC", read[0].Time.Location())
	}

	// A line that records only that its connection was reused reads as
	// one request carried before.
	old, _, err := ReadStream(strings.NewReader(`{"id":"a","client":"keep-alive","time":"2026-01-02T03:04:05Z","class":"ok","reused":true}` + "\n"))
	if err != nil || len(old) != 1 || old[0].ConnRequests != 1 || !old[0].Reused() {
		t.Errorf("a line with only reused: %+v, %v; want a result with ConnRequests 1", old, err)
	}

	for _, tt := range []struct{ name, stream, want string }{
		{"bad time", `{"id":"a","class":"ok","time":"noon"}`, "line 1: request a: time"},
		{"bad addr", `{"id":"a","class":"ok","time":"2026-01-02T03:04:05Z","addr":"web:80"}`, "line 1: request a: addr"},
		{"bad first failure addr", `{"id":"a","class":"ok","time":"2026-01-02T03:04:05Z","firstFailure":{"class":"reset","addr":"web:80"}}`, "line 1: request a: firstFailure.addr"},
		{"bad reprobe addr", `{"id":"a","class":"ok","time":"2026-01-02T03:04:05Z","reprobe":{"class":"ok","addr":"web:80"}}`, "line 1: request a: reprobe.addr"},
	} {
		if _, _, err := ReadStream(strings.NewReader(tt.stream + "\n")); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ReadStream: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	cfg := Config{URL: "http://web.shop/", Clients: []Client{{Kind: NewConn}, {Kind: KeepAlive, Rate: 900, Connections: 8}}, Duration: time.Minute}
	got := Split(cfg, 3)
	want := Config{URL: "http://web.shop/", Clients: []Client{{Kind: NewConn, Rate: DefaultRate / 3}, {Kind: KeepAlive, Rate: 300, Connections: 3}}, Duration: time.Minute}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b Dialer) bool { return a == nil && b == nil })); diff != "" {
		t.Errorf("Split (-want +got):\n%s", diff)
	}
	if cfg.Clients[0].Rate != 0 {
		t.Errorf("Split changed its argument: %+v", cfg.Clients)
	}
	if got := Split(Config{}, 2); len(got.Clients) != 1 || got.Clients[0] != (Client{Kind: NewConn, Rate: DefaultRate / 2}) {
		t.Errorf("Split of no clients: %+v, want one new-conn client at half the default rate", got.Clients)
	}
}
