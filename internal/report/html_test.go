package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// labResults holds real timelines of `closingtime lab --quick`:
// 1-plain, 3-graceful and B-no-handler of one run, crashloop of another.
// They have refused requests, preStop hooks, keep-alive connections, pods
// killed at the end of their grace period, a container crashing through
// its back-offs and a rollback.
const labResults = "testdata/lab.html.json"

func readLabResults(t *testing.T) *results.Results { return readResults(t, labResults) }

func readResults(t *testing.T, path string) *results.Results {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := results.Read(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

func renderHTML(t *testing.T, r *results.Results) string {
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
		results func(*testing.T) *results.Results
	}{
		{name: "lab.html", results: readLabResults},
		{name: "table.html", results: func(*testing.T) *results.Results { return twoScenarios() }},
		{name: "diagnosis.html", results: func(t *testing.T) *results.Results { return readResults(t, labDiagnosis) }},
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
// exit codes, and the failures of 1-plain on an axis with its unit.
func TestHTMLContent(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, readLabResults(t)))
	for _, want := range []string{
		`<a href="#s1" title="No readiness probe: new pods count as ready before they listen`, `>1-plain</a>`, `<h2 id="s3">B-no-handler</h2>`,
		`>per 100 ms</text>`,
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

// TestHTMLNamesTheTraffic: a scenario's section says where its traffic
// went and what it spoke.
func TestHTMLNamesTheTraffic(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, twoScenarios()))
	if want := "traffic to <code>grpc://app.default:50051/grpc.health.v1.Health/Check</code>, gRPC calls of grpc.health.v1.Health/Check"; !strings.Contains(page, want) {
		t.Errorf("the page lacks %q", want)
	}
}

// TestHTMLEscapes renders names that are markup, and checks that they
// show as text: html/template escapes them for their context (element
// text, attribute, SVG title).
func TestHTMLEscapes(t *testing.T) {
	r := twoScenarios()
	evil := `<script>alert(1)</script>`
	r.Scenarios[0].Name = evil
	r.Scenarios[0].Description = `"><img src=x onerror=alert(2)>`
	r.Scenarios[0].Deployment = `default/</code><u>`
	run := &r.Scenarios[0].Runs[0]
	run.OldPods[0].Name = `pod"><svg onload=alert(3)>`
	run.Timeline = append(run.Timeline,
		results.Entry{AtMS: 7, Source: results.SourceCluster, Kind: "container_exited", Pod: `pod"><svg onload=alert(3)>`,
			Detail: map[string]string{"code": `</title><script>alert(4)</script>`}},
		results.Entry{AtMS: 8, Source: results.SourceCluster, Kind: "endpoints_applied", Node: `node-<em>`,
			Detail:    map[string]string{"object": `Service/'";alert(5)//`},
			Endpoints: cluster.Endpoints{List: []cluster.Endpoint{{Address: "127.0.0.1", Ready: true, Serving: true}}}},
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
// test (fails it when CLOSINGTIME_REQUIRE_CHROMIUM=1); under -short it
// skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: renders pages in headless Chromium")
	}
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

// TestHTMLChromium loads pages in headless Chromium, from a loopback
// server, and checks that they draw, that they fetch nothing, and that
// red on them means failures.
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
// Drawing. The lab's page must not be blank: at least 5% of its pixels
// not white and 64 colours. It must show the timelines' colours in whole
// areas: the ready pods' green and 1-plain's refused requests' red. The
// page of runs without a failed request, whole in the screenshot, must
// have no pixel of a failure class's colour (the error class's grey
// aside, a shade that text edges can take) and none of any red.
func TestHTMLChromium(t *testing.T) {
	bin := chromium(t)
	t.Run("lab", func(t *testing.T) {
		st := pixelStats(screenshot(t, bin, renderHTML(t, readLabResults(t)), 2000, ""))
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
		if st.red < st.exact[refusedRed]/2 {
			t.Errorf("%d red pixels, not half the %d of the refused requests' red: the test's idea of red is wrong", st.red, st.exact[refusedRed])
		}
	})
	t.Run("no failures", func(t *testing.T) {
		img := screenshot(t, bin, renderHTML(t, readResults(t, noFailures)), 9000, "")
		st := pixelStats(img)
		t.Logf("%d×%d: %d pixels not white, %d ready green, %d red", st.width, st.height, st.notWhite, st.exact[readyGreen], st.red)
		if st.exact[readyGreen] < 5000 {
			t.Errorf("%d pixels of the ready pods' green, want ≥ 5000: the pod lanes did not draw", st.exact[readyGreen])
		}
		if !whiteBelow(img, img.Bounds().Max.Y-100) {
			t.Fatal("the page runs past the screenshot: its end is not white")
		}
		for _, c := range failureColours {
			if n := st.exact[c]; n > 0 {
				t.Errorf("%d pixels of the failure colour #%02x%02x%02x on a page without failures", n, c[0], c[1], c[2])
			}
		}
		if st.red > 0 {
			t.Errorf("%d red pixels on a page without failures", st.red)
		}
	})
	t.Run("diagnosis", func(t *testing.T) {
		page := renderHTML(t, readResults(t, labDiagnosis))
		closed := pixelStats(screenshot(t, bin, page, 6000, ""))
		t.Logf("%d×%d: %d pixels of routing-race purple, %d exit-without-drain orange, %d keep-alive-hostage navy",
			closed.width, closed.height, closed.exact[racePurple], closed.exact[exitOrange], closed.exact[hostageNavy])
		for c, name := range map[[3]uint8]string{racePurple: "routing-race purple", exitOrange: "exit-without-drain orange", hostageNavy: "keep-alive-hostage navy"} {
			if closed.exact[c] < 300 {
				t.Errorf("%d pixels of %s, want ≥ 300: the failures are not drawn in their causes' colours", closed.exact[c], name)
			}
		}
		// s1r1-4 is the story of requests of 2-readiness cut by an exit
		// without drain: selected, it shows, in its cause's colour.
		open := pixelStats(screenshot(t, bin, page, 6000, "#s1r1-4"))
		t.Logf("the story selected: %d pixels of exit-without-drain orange", open.exact[exitOrange])
		if d := open.exact[exitOrange] - closed.exact[exitOrange]; d < 500 {
			t.Errorf("the selected story adds %d pixels of its cause's orange, want ≥ 500: it does not show", d)
		}
	})
}

// screenshot loads page in headless Chromium, in a window 1400 wide and
// height high, at the fragment fragment ("" for none), checks what it
// fetched and logged, and returns its screenshot.
func screenshot(t *testing.T, bin, page string, height int, fragment string) image.Image {
	t.Helper()
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
		"--proxy-server="+srv.URL, "--log-net-log="+netLog, "--enable-logging=stderr", "--v=0",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, fmt.Sprintf("--window-size=1400,%d", height),
		srv.URL+"/"+fragment)
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
	if got, want := pageRequests(t, netLog, srv.URL), []string{srv.URL + "/" + fragment}; !cmp.Equal(got, want) {
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
	return img
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

// The colours of html.tmpl's causes routing-race, exit-without-drain
// and sigkill-keepalive-hostage.
var (
	racePurple  = [3]uint8{0x82, 0x50, 0xdf}
	exitOrange  = [3]uint8{0xe1, 0x6f, 0x24}
	hostageNavy = [3]uint8{0x0a, 0x30, 0x69}
)

// failureColours are html.tmpl's --refused, --reset, --closed, --timeout
// and --http5xx, and the colours of the causes but unknown's grey.
var failureColours = [][3]uint8{refusedRed, racePurple, {0xbc, 0x4c, 0x00}, {0x9a, 0x67, 0x00}, {0xbf, 0x39, 0x89},
	{0xff, 0x81, 0x82}, exitOrange, {0x95, 0x38, 0x00}, {0x24, 0x29, 0x2f}, hostageNavy, {0x54, 0xae, 0xff},
	{0xd4, 0xa7, 0x2c}, {0x1b, 0x7c, 0x83}, {0x7a, 0x7a, 0x10}}

type stats struct {
	width, height, notWhite, colours int
	// red counts the pixels of a red hue, however light or dark, in
	// squares of 2×2 such pixels: a red shape has them, and a pixel where
	// anti-aliasing blends two colours into a reddish one does not.
	red   int
	exact map[[3]uint8]int
}

func pixelStats(img image.Image) stats {
	b := img.Bounds()
	st := stats{width: b.Dx(), height: b.Dy(), exact: map[[3]uint8]int{}}
	counted := map[[3]uint8]bool{readyGreen: true}
	for _, c := range failureColours {
		counted[c] = true
	}
	seen := map[[3]uint8]bool{}
	red := map[image.Point]bool{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}
			seen[c] = true
			if c != [3]uint8{0xff, 0xff, 0xff} {
				st.notWhite++
			}
			if counted[c] {
				st.exact[c]++
			}
			if isRed(c) {
				red[image.Pt(x, y)] = true
			}
		}
	}
	for p := range red {
		if red[p.Add(image.Pt(1, 0))] && red[p.Add(image.Pt(0, 1))] && red[p.Add(image.Pt(1, 1))] {
			st.red++
		}
	}
	st.colours = len(seen)
	return st
}

// isRed reports whether c is of a red hue, within 15° of pure red, and
// clearly coloured: its red at least 40 above its green and blue. The
// pale pinks of a washed-out red count; the pod lanes' orange (hue 22°)
// and the failure chart's brown do not.
func isRed(c [3]uint8) bool {
	r, g, b := float64(c[0]), float64(c[1]), float64(c[2])
	if r-max(g, b) < 40 {
		return false
	}
	// With red the largest, the hue is 60° × (g − b) / (r − min).
	hue := 60 * (g - b) / (r - min(g, b))
	return hue > -15 && hue < 15
}

// whiteBelow reports whether every pixel of img from row y down is white.
func whiteBelow(img image.Image, y int) bool {
	b := img.Bounds()
	for ; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 != 0xff || g>>8 != 0xff || bl>>8 != 0xff {
				return false
			}
		}
	}
	return true
}

// noFailures holds real results of `closingtime lab --quick` whose runs
// had no failed request, but everything else that a report might be
// tempted to draw in red: old pods killed at the end of their grace period
// (exit 137) that answered requests after SIGTERM, a release that crashes
// through its back-offs, capacity down to 2 of 3 in rollouts whose
// strategy allows it, a deleted pod and a drained node (0 of 1 ready).
const noFailures = "testdata/lab-no-failures.html.json"

// TestHTMLLegends checks each timeline's legends against what it draws:
// every class of bar and mark has its legend entry, and every entry is of
// a class the chart draws (a tick labelled in place needs none). The
// entries of a row do not overlap and stay in the plot.
func TestHTMLLegends(t *testing.T) {
	for _, r := range []*results.Results{readLabResults(t), readResults(t, noFailures), twoScenarios(), disruptions(), userApp(), readResults(t, labDiagnosis), one(diagnosedRun())} {
		for _, s := range r.Scenarios {
			for _, run := range s.Runs {
				c := newHTMLRun(run, "r").Chart
				drawn := map[string]bool{}
				for _, l := range append(c.Lanes, chartLane{Bars: c.Fail.Bars}) {
					for _, b := range l.Bars {
						drawn[b.Class] = true
					}
					for _, m := range l.Marks {
						if m.Shape != "tick" || m.Label == "" {
							drawn[m.Class] = true
						}
					}
				}
				explained := map[string]bool{}
				var sections []string
				for _, sec := range c.Sections {
					sections = append(sections, sec.Label)
					end := map[float64]float64{} // row → where its last label ends
					for _, it := range sec.Legend {
						var class string
						var x float64
						switch {
						case it.Bar != nil:
							class, x = it.Bar.Class, it.Bar.X
						case it.Mark != nil:
							class, x = it.Mark.Class, it.Mark.X
						default:
							x = it.LabelX
						}
						if class != "" {
							explained[class] = true
							if !drawn[class] {
								t.Errorf("%s run %d: legend of %s explains %q, which the chart does not draw", s.Name, run.Repetition, sec.Label, class)
							}
						}
						if x < end[it.LabelY] {
							t.Errorf("%s run %d: legend item %q at x %.1f overlaps the one before, which ends at %.1f", s.Name, run.Repetition, it.Label, x, end[it.LabelY])
						}
						end[it.LabelY] = it.LabelX + labelWidth(it.Label)
						if end[it.LabelY] > plotRight {
							t.Errorf("%s run %d: legend item %q ends at %.1f, right of the plot", s.Name, run.Repetition, it.Label, end[it.LabelY])
						}
					}
				}
				for class := range drawn {
					if !explained[class] {
						t.Errorf("%s run %d: the chart draws %q, which no legend explains", s.Name, run.Repetition, class)
					}
				}
				pods := slices.ContainsFunc(run.Timeline, func(e results.Entry) bool { return e.Pod != "" })
				if pods != slices.Contains(sections, "pods") || sections[len(sections)-1] != "failed requests" {
					t.Errorf("%s run %d: sections %q, want pods if its timeline has any, and failed requests last", s.Name, run.Repetition, sections)
				}
			}
		}
	}
}

// TestHTMLRedMeansFailure renders results without a failed request and
// checks that nothing on the page is styled as a failure: no failure
// class, no cell or mark marked bad. Of the style sheet, only the failure
// classes, the causes' classes, a bad cell and a capacity below what the
// strategy allows may use a failure class's or a cause's colour.
func TestHTMLRedMeansFailure(t *testing.T) {
	page := renderHTML(t, readResults(t, noFailures))
	for _, bad := range []string{`class="fail `, `class="bad"`, `capacity below`} {
		if i := strings.Index(page, bad); i >= 0 {
			t.Errorf("a page without failures has %q: …%s…", bad, page[max(0, i-80):min(len(page), i+80)])
		}
	}
	colours := regexp.MustCompile(`--(refused|reset|closed|timeout|http5xx|error):\s*(#[0-9a-f]{6})`).FindAllStringSubmatch(htmlSource, -1)
	if len(colours) != len(failClasses) {
		t.Fatalf("the style sheet defines %d failure colours, want %d", len(colours), len(failClasses))
	}
	causes := regexp.MustCompile(`\.cause-[a-z-]+ \{ --(c): (#[0-9a-f]{6}); \}`).FindAllStringSubmatch(htmlSource, -1)
	if len(causes) == 0 {
		t.Fatal("the style sheet defines no cause's colour")
	}
	colours = append(colours, causes...)
	allowed := regexp.MustCompile(`^(\.fail\.[a-z0-9]+|\.cause-[a-z-]+|\.absorbed\.cause|\.swatch(\.absorbed)?|\.story|td\.bad|svg \.mark\.capacity\.below)$`)
	for _, rule := range regexp.MustCompile(`(?m)^([^{}\n]+)\{([^}]*)\}`).FindAllStringSubmatch(htmlSource, -1) {
		uses := false
		for _, c := range colours {
			if strings.Contains(rule[2], "var(--"+c[1]+")") || strings.Contains(strings.ToLower(rule[2]), c[2]) {
				uses = true
			}
		}
		if !uses || strings.TrimSpace(rule[1]) == ":root" {
			continue
		}
		for _, sel := range strings.Split(rule[1], ",") {
			if sel = strings.TrimSpace(sel); !allowed.MatchString(sel) {
				t.Errorf("%q is styled in a failure's colour: %s", sel, strings.TrimSpace(rule[0]))
			}
		}
	}
}

// TestHTMLEndpointsWrittenAgain: results read from a file written before
// timeline entries had their Endpoints, written again and read back, give
// the same page.
func TestHTMLEndpointsWrittenAgain(t *testing.T) {
	r := readLabResults(t)
	var b bytes.Buffer
	if err := results.Write(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `"endpoints": "`) {
		t.Error("results written again still hold endpoints as a detail string")
	}
	again, err := results.Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := renderHTML(t, again), renderHTML(t, readLabResults(t)); got != want {
		t.Errorf("the page of the results written again differs:\n%s", cmp.Diff(want, got))
	}
}
