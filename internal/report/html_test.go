package report

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// labResults holds real timelines of `closingtime lab --quick`:
// 1-plain, 3-graceful and B-no-handler of one run, crashloop of another.
// They have refused requests, preStop hooks, keep-alive connections, pods
// killed at the end of their grace period, a container crashing through
// its back-offs and a rollback.
const labResults = "testdata/lab.html.json"

func readLabResults(t *testing.T) *scenario.Results {
	t.Helper()
	f, err := os.Open(labResults)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ReadJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", labResults, err)
	}
	return r
}

func renderHTML(t *testing.T, r *scenario.Results) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestHTMLGolden compares the page of the lab's results and of the
// table's results with their golden files; -update rewrites them. The
// second rendering of the same results must give the same bytes.
func TestHTMLGolden(t *testing.T) {
	tests := []struct {
		name    string
		results func(*testing.T) *scenario.Results
	}{
		{name: "lab.html", results: readLabResults},
		{name: "table.html", results: func(*testing.T) *scenario.Results { return results() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderHTML(t, tt.results(t))
			if again := renderHTML(t, tt.results(t)); again != got {
				t.Fatalf("two renderings of the same results differ:\n%s", cmp.Diff(got, again))
			}
			golden.Check(t, filepath.Join("testdata", tt.name+".golden"), []byte(got))
		})
	}
}

// TestHTMLContent checks what the lab's page shows: a row and a section
// per scenario, a lane per pod and per routing view, SIGTERM, SIGKILL and
// exit codes, and the failures of 1-plain.
func TestHTMLContent(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, readLabResults(t)))
	for _, want := range []string{
		`<a href="#s1">1-plain</a>`, `<h2 id="s3">B-no-handler</h2>`,
		`>app-6c75f686b4-fkk2g</text>`, `>node-1 routing view</text>`, `>EndpointSlice (API)</text>`,
		`signal_sent at +0.002 s: grace=30s signal=SIGTERM`,
		`app-598fd98954-kfmt2: SIGKILL at +15.059 s`,
		`class="fail refused"`, `class="fail closed"`, `class="prestop"`, `class="sigterm"`,
		`>137</text>`, `>143</text>`, `no failed request`,
		`<h2 id="s4">crashloop</h2>`, `>rolled back</text>`, `class="down"`, `back_off at +10.073 s: delay=19.999974762s`,
		`<li>back-offs of pod app-85fcd6b497-p4smt: 10.0s at +0.05s, 20.0s at +10.07s, 40.0s at +30.09s</li>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestHTMLEscapes renders names that are markup, and checks that they
// show as text: html/template escapes them for their context (element
// text, attribute, SVG title).
func TestHTMLEscapes(t *testing.T) {
	r := results()
	evil := `<script>alert(1)</script>`
	r.Scenarios[0].Name = evil
	r.Scenarios[0].Description = `"><img src=x onerror=alert(2)>`
	r.Scenarios[0].Deployment = `default/</code><u>`
	run := &r.Scenarios[0].Runs[0]
	run.OldPods[0].Name = `pod"><svg onload=alert(3)>`
	run.Timeline = append(run.Timeline,
		scenario.Entry{AtMS: 7, Source: "cluster", Kind: "container_exited", Pod: `pod"><svg onload=alert(3)>`,
			Detail: map[string]string{"code": `</title><script>alert(4)</script>`}},
		scenario.Entry{AtMS: 8, Source: "cluster", Kind: "endpoints_applied", Node: `node-<em>`,
			Detail: map[string]string{"endpoints": `127.0.0.1=1/1/0`, "object": `Service/'";alert(5)//`}},
	)
	page := renderHTML(t, r)
	for _, raw := range []string{"<script", "<img", "<svg onload", "<u>", "<em>"} {
		if strings.Contains(page, raw) {
			t.Errorf("the page contains %q unescaped", raw)
		}
	}
	for _, want := range []string{
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`,
		`pod&#34;&gt;&lt;svg onload=alert(3)&gt;`,
		`&lt;/title&gt;&lt;script&gt;alert(4)&lt;/script&gt;`,
		`node-&lt;em&gt;`,
		`default/&lt;/code&gt;&lt;u&gt;`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the escaped %q", want)
		}
	}
}

// TestHTMLSelfContained checks that the page refers to nothing outside
// itself: every href is a fragment or a data: URL, and there is no src,
// url(), @import, script or protocol-relative or absolute URL.
func TestHTMLSelfContained(t *testing.T) {
	page := renderHTML(t, readLabResults(t))
	for _, m := range regexp.MustCompile(`(?i)href\s*=\s*"([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], "#") && !strings.HasPrefix(m[1], "data:") {
			t.Errorf("the page links to %q", m[1])
		}
	}
	for _, bad := range []string{"http:", "https:", "src=", "url(", "@import", "<script", "//fonts", "xlink:"} {
		if i := strings.Index(strings.ToLower(page), bad); i >= 0 {
			t.Errorf("the page contains %q: …%s…", bad, page[max(0, i-60):min(len(page), i+60)])
		}
	}
	if !strings.Contains(page, `http-equiv="Content-Security-Policy" content="default-src 'none'`) {
		t.Error("the page lacks its Content-Security-Policy")
	}
}

// requireChromiumEnv names the variable that turns a missing Chromium into
// a failure instead of a skip; CI sets it to 1.
const requireChromiumEnv = "CLOSINGTIME_REQUIRE_CHROMIUM"

// chromium returns the path of a Chromium or Chrome binary, or skips the
// test (fails it when CLOSINGTIME_REQUIRE_CHROMIUM=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv(requireChromiumEnv) == "1" {
		t.Fatalf("no chromium, chromium-browser or google-chrome in PATH, and %s=1", requireChromiumEnv)
	}
	t.Skipf("no chromium, chromium-browser or google-chrome in PATH (apt-get install chromium; set %s=1 to fail instead)", requireChromiumEnv)
	return ""
}

// TestHTMLChromium loads the lab's page in headless Chromium, from a
// loopback server, and checks that it draws and that it fetches nothing.
//
// Requests. The loopback server is also Chromium's HTTP proxy, so that
// nothing leaves the machine: Chromium sends loopback requests directly
// (the page) and all others through the proxy (a GET with an absolute URL
// for http, CONNECT for https), which refuses them. Chromium makes some of
// its own (sign-in, search preconnect, network time) whatever its flags;
// Chromium's net log (--log-net-log, the format of chrome://net-export)
// tells them apart: a request made for a page carries the page's site in
// its network isolation key, or the page's origin as its initiator. The
// test wants, of those, only the page itself, and wants the server to have
// served it once. The page's icon is a data: URL, so Chromium asks for no
// /favicon.ico. As the page's Content-Security-Policy blocks a fetch
// before it is made, the test also wants no console message at all
// (--enable-logging=stderr logs them, CSP violations included), and
// TestHTMLSelfContained checks the markup.
//
// Drawing. The screenshot must not be blank: at least 5% of its pixels not
// white and 64 colours. It must show the timelines' colours in whole
// areas: the ready pods' green and 1-plain's refused requests' red.
func TestHTMLChromium(t *testing.T) {
	bin := chromium(t)
	page := renderHTML(t, readLabResults(t))

	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.IsAbs() || r.URL.Path != "/" {
			http.Error(w, "this server serves the report only", http.StatusForbidden)
			return
		}
		mu.Lock()
		served++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page))
	}))
	defer srv.Close()

	dir := t.TempDir()
	shot, netLog := filepath.Join(dir, "page.png"), filepath.Join(dir, "net.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
		"--proxy-server="+srv.URL, "--log-net-log="+netLog, "--enable-logging=stderr", "--v=0",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1400,2000",
		srv.URL+"/")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	t.Logf("chromium took %v", time.Since(start).Round(time.Millisecond))

	mu.Lock()
	if served != 1 {
		t.Errorf("the page was served %d times, want 1", served)
	}
	mu.Unlock()
	if got, want := pageRequests(t, netLog, srv.URL), []string{srv.URL + "/"}; !cmp.Equal(got, want) {
		t.Errorf("the page's requests: %q, want only %q", got, want)
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console message (a blocked fetch breaks the Content-Security-Policy): %s", line)
		}
	}

	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, stderr.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", shot, err)
	}
	st := pixelStats(img)
	t.Logf("%d×%d: %d pixels not white, %d colours, %d ready green, %d refused red",
		st.width, st.height, st.notWhite, st.colours, st.exact[readyGreen], st.exact[refusedRed])
	if area := st.width * st.height; st.notWhite < area/20 || st.colours < 64 {
		t.Errorf("the screenshot looks blank: %d of %d pixels not white, %d colours", st.notWhite, area, st.colours)
	}
	if st.exact[readyGreen] < 5000 {
		t.Errorf("%d pixels of the ready pods' green, want ≥ 5000: the pod lanes did not draw", st.exact[readyGreen])
	}
	if st.exact[refusedRed] < 2000 {
		t.Errorf("%d pixels of the refused requests' red, want ≥ 2000: the failure chart did not draw", st.exact[refusedRed])
	}
}

// pageRequests reads a Chromium net log and returns the URLs of the
// requests made for the page at origin: those whose network isolation key
// names its site (for an IP address, without the port) or whose initiator
// is its origin.
func pageRequests(t *testing.T, path, origin string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var log struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int `json:"type"`
			Params struct {
				URL        string `json:"url"`
				Initiator  string `json:"initiator"`
				IsolateKey string `json:"network_isolation_key"`
			} `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(data, &log); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	start, ok := log.Constants.LogEventTypes["URL_REQUEST_START_JOB"]
	if !ok {
		t.Fatalf("%s: no URL_REQUEST_START_JOB event type", path)
	}
	u, err := url.Parse(origin)
	if err != nil {
		t.Fatal(err)
	}
	site := u.Scheme + "://" + u.Hostname()
	var urls []string
	for _, e := range log.Events {
		p := e.Params
		if e.Type == start && (p.Initiator == origin || p.IsolateKey == site || strings.HasPrefix(p.IsolateKey, site+" ")) {
			urls = append(urls, p.URL)
		}
	}
	return urls
}

// The colours of html.tmpl's --ready and --refused.
var (
	readyGreen = [3]uint8{0x4d, 0x9f, 0x6f}
	refusedRed = [3]uint8{0xd1, 0x24, 0x2f}
)

type stats struct {
	width, height, notWhite, colours int
	exact                            map[[3]uint8]int
}

func pixelStats(img image.Image) stats {
	b := img.Bounds()
	st := stats{width: b.Dx(), height: b.Dy(), exact: map[[3]uint8]int{}}
	seen := map[[3]uint8]bool{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}
			seen[c] = true
			if c != [3]uint8{0xff, 0xff, 0xff} {
				st.notWhite++
			}
			if c == readyGreen || c == refusedRed {
				st.exact[c]++
			}
		}
	}
	st.colours = len(seen)
	return st
}

// TestHTMLDisruption checks the action lane and the disruption lines of a
// run with an outage, a drain, a rollback, back-offs and evictions.
func TestHTMLDisruption(t *testing.T) {
	r := results()
	run := &r.Scenarios[0].Runs[0]
	rolledBack, recovered := 9000.0, 400.0
	run.Outage = &scenario.Outage{Mode: "blackhole", StartMS: 0, EndMS: 3000}
	run.RecoverMS = &recovered
	run.Drain = &scenario.DrainOutcome{Node: "node-1", EndMS: 8000, TimeoutMS: 8000}
	run.RolledBackMS = &rolledBack
	run.Capacity = &scenario.Capacity{MinReady: 1, Replicas: 3, AtMS: 2500}
	run.Evictions = &scenario.Evictions{Refused: 2}
	run.BackOffs = []scenario.BackOff{{AtMS: 1000, Pod: "app-7d9-new", DelayMS: 10000}}
	run.Timeline = append(run.Timeline,
		scenario.Entry{AtMS: 1000, Source: "cluster", Kind: "back_off", Pod: "app-7d9-new", Detail: map[string]string{"delay": "10s"}},
		scenario.Entry{AtMS: 1500, Source: "cluster", Kind: "eviction_refused", Pod: "app-6c75f686b4-p9gcg", Detail: map[string]string{"budget": "app"}},
		scenario.Entry{AtMS: 8500, Source: "cluster", Kind: "progress_deadline_exceeded", Detail: map[string]string{"deadline": "8s"}},
	)
	page := html.UnescapeString(renderHTML(t, r))
	for _, want := range []string{
		`>action</text>`,
		`dependency outage (blackhole) from +0.000 s to +3.000 s`,
		`recovering from +3.000 s to +3.400 s`,
		`drain of node-1 from +0.000 s to +8.000 s: blocked, given up`,
		`rolled back at +9.000 s`,
		`progress_deadline_exceeded at +8.500 s: deadline=8s`,
		`ready pods fell to 1 of 3 at +2.500 s`,
		`app-7d9-new: back_off at +1.000 s: delay=10s`,
		`app-6c75f686b4-p9gcg: eviction_refused at +1.500 s: budget=app`,
		`<td class="bad">1/3</td>`,
		`<li>evictions: 0 accepted, 2 refused (429) by a PodDisruptionBudget</li>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestHTMLRunnerSteps checks that the action lane draws the runner's
// steps once: the variables applied as a tick of their own, the outage,
// drain and rollback from their figures, not again from their entries.
func TestHTMLRunnerSteps(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, disruptions()))
	for _, want := range []string{
		`>env applied</text>`, `env_applied at +0.001 s: CT_CRASH_CODE=1`,
		`dependency outage (blackhole) from +0.000 s to +30.000 s`, `drain of node-1 from +0.000 s to +12.001 s: blocked, given up`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, `>rolled back</text>`); n != 1 {
		t.Errorf("the page has %d rollback ticks, want 1", n)
	}
	for _, unwanted := range []string{"outage started", "outage ended", "drain started", "drain ended", "rolled_back at"} {
		if strings.Contains(page, unwanted) {
			t.Errorf("the page draws the runner's step %q again", unwanted)
		}
	}
}
