package report

import (
	"fmt"
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// labDiagnosis holds real results of `closingtime lab --quick
// 2-readiness C-graceful-keepalive E-client-retry`, each run with its
// diagnosis: new connections refused in a routing race, requests cut by
// an exit without drain and by SIGKILL on kept-alive connections, which
// E's retry absorbed, with their re-probes.
const labDiagnosis = "testdata/lab-diagnosis.html.json"

// diagnosedRun returns a run with a diagnosis of three failed requests
// and one absorbed: a connection refused with no endpoint, two requests
// cut by an exit without drain on pod app-1 (the same evidence), one
// reset on a reused connection of app-1 whose re-probe succeeded,
// absorbed by a retry as a stale connection.
func diagnosedRun() results.Run {
	ready := results.PodState{State: "ready", SinceMS: -4000, Ready: true, Listening: ptr.To(true)}
	signalled := results.PodState{State: "signalled", SinceMS: 1990, Ready: true, Listening: ptr.To(true)}
	exited := results.PodState{State: "exited", SinceMS: 2010, Ready: true, Listening: ptr.To(false), ExitCode: ptr.To(143)}
	cut := func(id string, atMS float64) results.Request {
		return results.Request{ID: id, Client: load.NewConn, AtMS: atMS, Class: load.Closed, Error: "read response: EOF",
			ConnectMS: atMS + 1, FailedMS: 2005, Addr: "10.0.0.1:8080", Pod: "app-1", AtConnect: ready, AtFailure: signalled,
			Published: ptr.To(true), RoutedBy: []string{"node-1", "node-2"}, ReadyEndpoints: ptr.To(2), Cause: diagnosis.ExitWithoutDrain}
	}
	requests := []results.Request{
		{ID: "r-1", Client: load.NewConn, AtMS: 1200, Class: load.Refused, Error: "dial tcp 10.0.0.9:8080: connect: connection refused",
			ConnectMS: 1201, FailedMS: 1201, ReadyEndpoints: ptr.To(0), Cause: diagnosis.NoEndpoint},
		cut("r-2", 1950), cut("r-3", 1960),
		{ID: "r-4", Client: load.KeepAlive, AtMS: 2500, Class: load.Reset, Absorbed: true, Error: "read: connection reset by peer",
			ConnectMS: 2500, FailedMS: 2502, Addr: "10.0.0.1:8080", ConnRequests: 3, ConnAgeMS: 1500, Pod: "app-1",
			AtConnect: ready, AtFailure: exited, Published: ptr.To(false), ReadyEndpoints: ptr.To(1),
			Reprobe: &results.Reprobe{Class: load.OK, Addr: "10.0.0.2:8080", Pod: "app-2", Status: 200, AtMS: 2503}, Cause: diagnosis.StaleConnection},
	}
	var timeline []results.Entry
	timeline = append(timeline, results.Entry{AtMS: -100, Source: results.SourceCluster, Kind: string(cluster.EndpointsApplied), Node: "node-1",
		Detail: map[string]string{"object": "Service/app"}, Endpoints: cluster.Endpoints{List: []cluster.Endpoint{{Address: "10.0.0.1", Ready: true, Serving: true}}}})
	for _, r := range requests {
		if !r.Absorbed {
			timeline = append(timeline, results.Entry{AtMS: r.AtMS, Source: results.SourceClient, Kind: r.Class.String(),
				Detail: map[string]string{"client": r.Client.String(), "id": r.ID, "error": r.Error}})
		}
	}
	return results.Run{
		Repetition: 1, Start: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Timeline: timeline,
		Totals: results.Totals{Requests: 100, OK: 97, Refused: 1, Closed: 2, Absorbed: 1},
		Diagnosis: &results.Diagnosis{
			Requests: requests,
			Causes: []results.CauseCount{
				{Cause: diagnosis.ExitWithoutDrain, Failed: 2, FirstMS: 1950, LastMS: 1960, Seconds: []int{1}, Pods: []string{"app-1"}},
				{Cause: diagnosis.NoEndpoint, Failed: 1, FirstMS: 1200, LastMS: 1200, Seconds: []int{1}},
				{Cause: diagnosis.StaleConnection, Absorbed: 1, FirstMS: 2500, LastMS: 2500, Seconds: []int{2}, Pods: []string{"app-1"}},
			},
			Findings: []results.Finding{
				{Pod: "app-1", Kind: "exited-without-drain", Text: "exited 0.02 s after SIGTERM with code 143, cutting 2 requests in flight"},
				{Pod: "app-1", Kind: "routing-not-converged", Text: "at SIGTERM, the routing view of node-1 still sent new connections to it"},
			},
			Limits: []string{"connections went to the Service's address: the pod is inferred"},
		},
	}
}

// one returns results of the single run run.
func one(run results.Run) *results.Results {
	return &results.Results{Scenarios: []results.Result{{Name: "s", Totals: run.Totals, Runs: []results.Run{run}}}}
}

// pageStory is a story as the page shows it: its colour, whether it tells
// absorbed requests, and its text.
type pageStory struct {
	class    string
	absorbed bool
	text     string
}

var (
	storyRE = regexp.MustCompile(`(?s)<section class="story (cause-[a-z-]+)( absorbed)?" id="([^"]+)">(.*?)</section>`)
	segRE   = regexp.MustCompile(`<a href="#([^"]+)"><rect class="(fail|absorbed) cause (cause-[a-z-]+)" x="([0-9.]+)"[^>]*><title>([^<]*)</title>`)
	tagRE   = regexp.MustCompile(`<[^>]+>`)
)

// pageStories parses the stories of page by id.
func pageStories(page string) map[string]pageStory {
	out := map[string]pageStory{}
	for _, m := range storyRE.FindAllStringSubmatch(page, -1) {
		text := html.UnescapeString(strings.Join(strings.Fields(tagRE.ReplaceAllString(m[4], " ")), " "))
		out[m[3]] = pageStory{class: m[1], absorbed: m[2] != "", text: text}
	}
	return out
}

// failLegendLabels returns the labels of the failed requests' legend of
// each chart of page, in order.
func failLegendLabels(t *testing.T, r *results.Results) [][]string {
	t.Helper()
	var out [][]string
	for _, s := range r.Scenarios {
		for _, run := range s.Runs {
			c := newHTMLRun(run, "r").Chart
			sec := c.Sections[len(c.Sections)-1]
			var labels []string
			for _, it := range sec.Legend {
				labels = append(labels, it.Label)
			}
			out = append(out, labels)
		}
	}
	return out
}

// TestHTMLCauseLegend checks that the legend of a diagnosed run's failure
// chart lists exactly the causes of its failed and absorbed requests, by
// their titles, and says what a hollow bar is when one was absorbed.
func TestHTMLCauseLegend(t *testing.T) {
	for _, r := range []*results.Results{readResults(t, labDiagnosis), one(diagnosedRun())} {
		labels := failLegendLabels(t, r)
		i := 0
		for _, s := range r.Scenarios {
			for _, run := range s.Runs {
				var want []string
				absorbed := false
				for _, c := range diagnosis.Causes() {
					if j := slices.IndexFunc(run.Diagnosis.Causes, func(cc results.CauseCount) bool { return cc.Cause == c.Cause }); j >= 0 {
						want = append(want, fitLabel(c.Title))
						absorbed = absorbed || run.Diagnosis.Causes[j].Absorbed > 0
					}
				}
				if absorbed {
					want = append(want, "hollow: absorbed by a retry")
				}
				got := labels[i]
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s run %d: the failure legend lists %q, want %q", s.Name, run.Repetition, got, want)
				}
				i++
			}
		}
	}
}

// TestHTMLFailureColour checks that each failed request is drawn in the
// colour of its cause, filled when it failed and hollow when a retry
// absorbed it, at its send time, and links to a story of the same cause.
func TestHTMLFailureColour(t *testing.T) {
	run := diagnosedRun()
	page := renderHTML(t, one(run))
	stories := pageStories(page)
	scale, _ := newTimeScale(run)
	type seg struct {
		kind, class string
		x           float64
	}
	var got []seg
	for _, m := range segRE.FindAllStringSubmatch(page, -1) {
		s, ok := stories[m[1]]
		if !ok {
			t.Errorf("a bar links to %q, which is no story", m[1])
			continue
		}
		if s.class != m[3] || s.absorbed != (m[2] == "absorbed") {
			t.Errorf("a bar of class %s %s links to story %s of class %s, absorbed %v", m[2], m[3], m[1], s.class, s.absorbed)
		}
		x, _ := strconv.ParseFloat(m[4], 64)
		got = append(got, seg{m[2], m[3], x})
	}
	bucket := func(ms float64) float64 { return scale.x(float64(int(ms/bucketMS)) * bucketMS) }
	want := []seg{
		{"fail", "cause-no-endpoint", bucket(1200)},
		{"fail", "cause-exit-without-drain", bucket(1950)},
		{"absorbed", "cause-stale-connection", bucket(2500)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("the failure chart's bars: %v, want %v", got, want)
	}
	if n := strings.Count(page, `<section class="story `); n != 3 {
		t.Errorf("%d stories, want 3: the two cuts of app-1 share one", n)
	}
	for _, c := range diagnosis.Causes() {
		if !regexp.MustCompile(`(?m)^\.` + causeClass(c.Cause) + ` \{ --c: #[0-9a-f]{6}; \}$`).MatchString(htmlSource) {
			t.Errorf("the style sheet gives cause %s no colour", c.Cause)
		}
	}
	if got := causeClass("a-cause-of-a-newer-version"); got != "cause-unknown" {
		t.Errorf("an unknown cause has the class %q, want cause-unknown", got)
	}
}

// TestHTMLCausePalette checks that each cause has a colour of its own.
func TestHTMLCausePalette(t *testing.T) {
	colours := regexp.MustCompile(`(?m)^\.cause-([a-z-]+) \{ --c: (#[0-9a-f]{6}); \}$`).FindAllStringSubmatch(htmlSource, -1)
	if len(colours) != len(diagnosis.Causes()) {
		t.Errorf("the style sheet colours %d causes, want the %d of diagnosis.Causes", len(colours), len(diagnosis.Causes()))
	}
	seen := map[string]string{}
	for _, c := range colours {
		if other, ok := seen[c[2]]; ok {
			t.Errorf("causes %s and %s share the colour %s", other, c[1], c[2])
		}
		seen[c[2]] = c[1]
	}
}

// TestHTMLStory checks that a story says the evidence of its requests:
// the send and failure times, the class and error, the connection, the
// pod and its states, the EndpointSlices and the routing views, the
// re-probe, then the cause, its fix, its lint rule and its docs.
func TestHTMLStory(t *testing.T) {
	stories := pageStories(renderHTML(t, one(diagnosedRun())))
	tests := []struct {
		id   string
		want []string
	}{
		{"s1r1-1", []string{
			"1 failed request, refused",
			"Sent at +1.200 s by the new-conn client; it failed at +1.201 s: refused (dial tcp 10.0.0.9:8080: connect: connection refused).",
			"It tried a new connection; the address it tried is not recorded.",
			"The pod it reached is unknown.",
			"When the connection was tried (+1.201 s), no endpoint could take a new connection.",
			"Cause: " + diagnosis.Describe(diagnosis.NoEndpoint).Title,
			"Fix: " + diagnosis.Describe(diagnosis.NoEndpoint).Fix,
			"closingtime lint rule " + diagnosis.Describe(diagnosis.NoEndpoint).Rule,
			"docs/diagnosis.md#no-endpoint",
		}},
		{"s1r1-2", []string{
			"2 failed requests, closed, with the same evidence, sent from +1.950 s to +1.960 s; the first of them:",
			"Sent at +1.950 s by the new-conn client; it failed at +2.005 s: closed (read response: EOF).",
			"It went out on a new connection to 10.0.0.1:8080, ready at +1.951 s.",
			"It reached pod app-1.",
			"When the connection was made (+1.951 s), the pod was ready since -4.000 s, listening.",
			"When the request failed (+2.005 s), it was signalled (SIGTERM sent) since +1.990 s, still Ready, listening.",
			"When the connection was made (+1.951 s), the EndpointSlices listed the pod as a ready endpoint; the routing views of node-1 and node-2 sent new connections to it; 2 endpoints could take a new connection.",
			"Cause: " + diagnosis.Describe(diagnosis.ExitWithoutDrain).Title,
		}},
		{"s1r1-3", []string{
			"1 absorbed request, reset",
			"Sent at +2.500 s by the keep-alive client; an attempt failed at +2.502 s, reset (read: connection reset by peer), and a retry saved the request.",
			"It went out on a reused keep-alive connection to 10.0.0.1:8080, made at +1.000 s (1.500 s old), that had carried 3 requests before.",
			"When the connection was made (+1.000 s), the pod was ready",
			"When the request failed (+2.502 s), it was exited since +2.010 s, still Ready, not listening, exit code 143.",
			"When the connection was made (+1.000 s), the EndpointSlices did not list the pod as a ready endpoint; no node's routing view sent new connections to it. When the request took it (+2.500 s), 1 endpoint could take a new connection.",
			"A probe on a new connection at +2.503 s succeeded (200), from pod app-2: the Service answered, and the failure was the connection's.",
			"Cause: " + diagnosis.Describe(diagnosis.StaleConnection).Title,
		}},
	}
	for _, tt := range tests {
		s, ok := stories[tt.id]
		if !ok {
			t.Errorf("no story %s; the stories: %v", tt.id, stories)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(s.text, w) {
				t.Errorf("story %s lacks %q:\n%s", tt.id, w, s.text)
			}
		}
	}
}

// TestHTMLStoryPods checks the stories of a pod inferred behind a
// Service's address, of a connection made before the first routing view
// was recorded, and of a failed request that the diagnosis lacks.
func TestHTMLStoryPods(t *testing.T) {
	run := diagnosedRun()
	d := run.Diagnosis
	d.Requests[0].Pod, d.Requests[0].PodInferred = "app-9", true
	d.Requests[3].ConnAgeMS = 3000 // made at -0.500 s, before the first routing view
	run.Timeline = append(run.Timeline, results.Entry{AtMS: 3000, Source: results.SourceClient, Kind: "response-timeout",
		Detail: map[string]string{"client": "keep-alive", "id": "r-lost", "error": "timeout"}})
	stories := pageStories(renderHTML(t, one(run)))
	var inferred, lost, early pageStory
	for _, s := range stories {
		switch {
		case strings.Contains(s.text, "app-9"):
			inferred = s
		case strings.Contains(s.text, "+3.000 s"):
			lost = s
		case s.absorbed:
			early = s
		}
	}
	if !strings.Contains(early.text, "made at -0.500 s (3.000 s old)") || !strings.Contains(early.text, "no node's routing view had been recorded yet") {
		t.Errorf("the story of a connection made before the first routing view does not say so:\n%s", early.text)
	}
	if !strings.Contains(inferred.text, "It reached pod app-9, inferred, not seen") {
		t.Errorf("the story of an inferred pod does not say so:\n%s", inferred.text)
	}
	for _, w := range []string{"Sent at +3.000 s by the keep-alive client; it failed: response timeout (timeout).", "The diagnosis has no record of this request.", "Cause: " + diagnosis.Describe(diagnosis.Unknown).Title} {
		if !strings.Contains(lost.text, w) {
			t.Errorf("the story of a request the diagnosis lacks has no %q:\n%s", w, lost.text)
		}
	}
	if lost.class != "cause-unknown" {
		t.Errorf("a request the diagnosis lacks is coloured %s, want cause-unknown", lost.class)
	}
}

// TestHTMLCausesUnderChart checks the lines under a diagnosed run's
// chart: each cause with its counts, title, seconds, fix, lint rule,
// docs and a link to its first story; the findings by pod; the limits.
func TestHTMLCausesUnderChart(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, one(diagnosedRun())))
	exit := diagnosis.Describe(diagnosis.ExitWithoutDrain)
	for _, want := range []string{
		`<li><span class="swatch cause-exit-without-drain"></span><b>2 failed</b> · ` + exit.Title + ` <span class="muted">· sent in +1s</span> · <a href="#s1r1-2">story</a><br>`,
		`<span class="fix">Fix: ` + exit.Fix + `. See <code>docs/diagnosis.md#exit-without-drain</code>.</span>`,
		`<li><span class="swatch cause-stale-connection absorbed"></span><b>1 absorbed</b> · `,
		`<tr><td class="mono">app-1</td><td>exited 0.02 s after SIGTERM with code 143, cutting 2 requests in flight<br>at SIGTERM, the routing view of node-1 still sent new connections to it</td></tr>`,
		`<p class="note">Note: connections went to the Service's address: the pod is inferred.</p>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestHTMLOldResults checks that a run without a diagnosis, as an older
// results file has, draws its failures by class, without stories.
func TestHTMLOldResults(t *testing.T) {
	page := renderHTML(t, readLabResults(t))
	for _, bad := range []string{`class="story`, `cause-`, `<a href="#s1r1`} {
		if i := strings.Index(page[strings.Index(page, "</style>"):], bad); i >= 0 {
			t.Errorf("the page of results without a diagnosis has %q", bad)
		}
	}
}

// TestHTMLStoriesBounded renders runs of 3000 and of 30000 failures
// over the same 60 s, each failure of its own pod state, and checks that
// the stories stay few (one per cause and class past maxStories), that
// every failure is drawn, and that the page does not grow with the
// failures: its bars are per 100 ms and its stories per evidence.
func TestHTMLStoriesBounded(t *testing.T) {
	sizes := map[int]int{}
	for _, n := range []int{3000, 30000} {
		run := results.Run{Repetition: 1, Start: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Diagnosis: &results.Diagnosis{}}
		classes := []load.Class{load.Refused, load.Closed, load.Reset}
		causes := []results.Cause{diagnosis.RoutingRace, diagnosis.ExitWithoutDrain, diagnosis.Unknown}
		for i := range n {
			r := results.Request{ID: fmt.Sprintf("r-%d", i), AtMS: float64(i) * 60_000 / float64(n), Class: classes[i%3], Cause: causes[i%3],
				Pod: fmt.Sprintf("app-%d", i%200), AtFailure: results.PodState{State: "signalled", SinceMS: float64(i)}}
			run.Diagnosis.Requests = append(run.Diagnosis.Requests, r)
			run.Timeline = append(run.Timeline, results.Entry{AtMS: r.AtMS, Source: results.SourceClient, Kind: r.Class.String(), Detail: map[string]string{"id": r.ID}})
		}
		h := newHTMLRun(run, "r")
		if len(h.Stories) != 3 {
			t.Errorf("%d failures: %d stories, want 3, one per cause and class past %d", n, len(h.Stories), maxStories)
		}
		drawn := 0
		for _, b := range h.Chart.Fail.Bars {
			var k int
			fmt.Sscanf(b.Title[strings.Index(b.Title, ": ")+2:], "%d", &k)
			drawn += k
		}
		if drawn != n {
			t.Errorf("the bars draw %d failures, want %d", drawn, n)
		}
		sizes[n] = len(renderHTML(t, one(run)))
		t.Logf("%d failures: %d stories, %d bars, a page of %d bytes", n, len(h.Stories), len(h.Chart.Fail.Bars), sizes[n])
	}
	if sizes[30000] > sizes[3000]*11/10 {
		t.Errorf("the page of 30000 failures is %d bytes, over 10%% more than the %d of 3000 over the same time", sizes[30000], sizes[3000])
	}
}

// TestHTMLStoryEscapes gives a diagnosis markup for its pods, errors,
// causes, findings and limits, and checks that the page shows it as text
// and colours a cause it does not know as unknown.
func TestHTMLStoryEscapes(t *testing.T) {
	run := diagnosedRun()
	d := run.Diagnosis
	d.Requests[1].Pod = `app"><script>alert(1)</script>`
	d.Requests[1].Error = `</li><img src=x onerror=alert(2)>`
	d.Requests[0].Cause = `"><svg onload=alert(3)>`
	d.Causes[1].Cause = d.Requests[0].Cause
	d.Findings[0].Pod, d.Findings[0].Text = `<u>pod`, `</td><em>text`
	d.Limits[0] = `<iframe>`
	page := renderHTML(t, one(run))
	for _, raw := range []string{"<script", "<img", "<svg onload", "<u>", "<em>", "<iframe"} {
		if strings.Contains(page, raw) {
			t.Errorf("the page contains %q unescaped", raw)
		}
	}
	if !strings.Contains(page, `<section class="story cause-unknown" id=`) {
		t.Error("a cause of markup is not coloured as unknown")
	}
	for _, want := range []string{`app&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;`, `&lt;/li&gt;&lt;img src=x onerror=alert(2)&gt;`, `&lt;u&gt;pod`, `&lt;iframe&gt;`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the escaped %q", want)
		}
	}
}

// TestHTMLStoriesReproducible renders a run whose failed requests tie on
// their send time, two of distinct stories (a new connection and a
// kept-alive one refused at +0.741 s) and two of one story that failed at
// different times, and checks that every rendering gives the same bytes,
// with the requests in either order: ties go by the request's id.
func TestHTMLStoriesReproducible(t *testing.T) {
	run := func(reversed bool) results.Run {
		run := diagnosedRun()
		d := run.Diagnosis
		race := func(id string, client load.Kind, connRequests int) results.Request {
			return results.Request{ID: id, Client: client, AtMS: 741, Class: load.Refused, Error: "connect: connection refused",
				ConnectMS: 742, FailedMS: 742, ConnRequests: connRequests, Pod: "app-1", Cause: diagnosis.RoutingRace}
		}
		late := d.Requests[1]
		late.ID, late.FailedMS = "r-7", 2008
		d.Requests = append(d.Requests, race("r-5", load.KeepAlive, 4), race("r-6", load.NewConn, 0), late)
		d.Causes = append(d.Causes, results.CauseCount{Cause: diagnosis.RoutingRace, Failed: 2, FirstMS: 741, LastMS: 741, Seconds: []int{0}})
		d.Causes[0].Failed++
		run.Timeline = run.Timeline[:1]
		for _, r := range d.Requests {
			if !r.Absorbed {
				run.Timeline = append(run.Timeline, results.Entry{AtMS: r.AtMS, Source: results.SourceClient, Kind: r.Class.String(),
					Detail: map[string]string{"client": r.Client.String(), "id": r.ID, "error": r.Error}})
			}
		}
		if reversed {
			slices.Reverse(d.Requests)
			slices.Reverse(run.Timeline[1:])
		}
		return run
	}
	want := renderHTML(t, one(run(false)))
	for i := range 8 {
		if got := renderHTML(t, one(run(i%2 == 1))); got != want {
			t.Fatalf("rendering %d (requests reversed: %t) differs from the first", i+2, i%2 == 1)
		}
	}
	// The story of the kept-alive request, r-5, comes first, and the
	// closed requests' story tells r-2, not r-7, sent at the same time.
	stories := pageStories(want)
	if s := stories["s1r1-2"].text; !strings.Contains(s, "by the keep-alive client") {
		t.Errorf("story s1r1-2 does not tell r-5, the keep-alive request:\n%s", s)
	}
	if s := stories["s1r1-4"].text; !strings.Contains(s, "3 failed requests, closed") || !strings.Contains(s, "it failed at +2.005 s") {
		t.Errorf("story s1r1-4 does not tell r-2 first of three:\n%s", s)
	}
}

// TestConnectionLineNoFreeConnection tells a request that waited for the
// load client's pool from one whose connect was tried.
func TestConnectionLineNoFreeConnection(t *testing.T) {
	r := results.Request{Class: load.ConnectTimeout, Cause: diagnosis.NoFreeConnection, AtMS: 1000, ConnectMS: 3000, FailedMS: 3000,
		Error: "wait for a free connection: i/o timeout"}
	if got := connectionLine(r); !strings.Contains(got, "no connection was tried") {
		t.Errorf("connection line %q: want it to say no connection was tried", got)
	}
}
