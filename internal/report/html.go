package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

//go:embed html.tmpl
var htmlSource string

var htmlTemplate = template.Must(template.New("report").Parse(htmlSource))

// WriteHTML writes r as one self-contained HTML page (docs/report.md): the
// comparison table of [WriteTable], then for each run of each scenario a
// timeline drawn in SVG on one time axis (0 is the action's start): a lane
// per pod with its phases (starting, ready, terminating or preStop, after
// SIGTERM) and its SIGTERM, SIGKILL and exit, the Service's endpoints as
// the API published them and as each node's routing view applied them,
// the failed requests per 100 ms stacked by class, each group of lanes
// with a legend of what it draws; and a line per old pod. A run with a
// diagnosis ([results.Run].Diagnosis) stacks its failed requests, and
// hollow those a retry absorbed, by cause instead, each segment a link to
// its story (the request's evidence in sentences, its cause and fix),
// and lists under its chart its causes, the findings of its old pods and
// the limits of its diagnosis.
//
// Red means a failed request, or a capacity below what the rollout's
// strategy allows ([results.Capacity].Allowed); nothing else is drawn
// in red or in a failure class's colour. A cause's colour marks only its
// requests: failed ones, and, hollow, those a retry absorbed.
//
// The page loads nothing: its CSS is inline, it has no script, no font and
// no image by URL, and its Content-Security-Policy forbids every fetch, so
// it reads the same offline and as a CI artifact. Every string from r is
// escaped for its context by html/template. The output depends on r alone,
// so the same results give the same bytes.
func WriteHTML(w io.Writer, r *results.Results) error {
	return htmlTemplate.Execute(w, newHTMLPage(r))
}

// htmlPage is what html.tmpl renders.
type htmlPage struct {
	Rows      []tableRow
	Scenarios []htmlScenario
	// Diagnosed is a page with a story to select.
	Diagnosed bool
}

// tableRow is a scenario's row of the comparison table, spelled as
// WriteTable spells it.
type tableRow struct {
	Name, Anchor, Description                                         string
	Runs                                                              int
	Samples, Failed, Refused, Reset, Closed, Timeout, HTTP5xx, Absorb int64
	P99, Drain, ExitCodes, Rollout, Capacity                          string
	Restarts                                                          int
	// CapacityTitle says what the capacity is measured against.
	CapacityTitle string
	// Below is a capacity below what the rollout's strategy allows.
	Below bool
}

// htmlScenario is a scenario's section.
type htmlScenario struct {
	Name, Anchor, Description, Seed, Deployment, Action string
	// Target is the traffic's URL, and Speaks what its requests speak.
	Target, Speaks string
	Runs           []htmlRun
}

// htmlRun is a run's part of its scenario's section.
type htmlRun struct {
	Heading string
	Clients []string
	// Figures are the run's disruption lines of the text report.
	Figures []string
	Chart   timelineChart
	// Unlogged says why the pods' lanes have no line for their process
	// listening; empty when they have one.
	Unlogged string
	OldPods  []oldPodRow
	// Unattributed says why the old pods' request figures are unknown;
	// empty when they are known.
	Unattributed string
	// Diagnosed is a run with a diagnosis: its Stories, which the
	// segments of its failure chart link to, shown at StoriesAnchor, and
	// its Causes, pod Findings and Limits.
	Diagnosed     bool
	StoriesAnchor string
	Stories       []htmlStory
	Causes        []htmlCause
	Findings      []htmlFinding
	Limits        []string
}

// htmlFinding is what the diagnosis found of one old pod.
type htmlFinding struct {
	Pod   string
	Texts []string
}

// podFindings groups findings by pod, in the order of their first.
func podFindings(findings []results.Finding) []htmlFinding {
	var out []htmlFinding
	for _, f := range findings {
		i := slices.IndexFunc(out, func(h htmlFinding) bool { return h.Pod == f.Pod })
		if i < 0 {
			i = len(out)
			out = append(out, htmlFinding{Pod: f.Pod})
		}
		out[i].Texts = append(out[i].Texts, f.Text)
	}
	return out
}

// oldPodRow is an old pod's row, spelled as WriteText spells it.
type oldPodRow struct {
	Name, Sigterm, LastRequest, Gap, AfterSigterm, Drain, Exit string
	// ServedAfter is a pod that answered requests that reached it after
	// SIGTERM, as a graceful server does: its count is not faint.
	ServedAfter bool
}

// newHTMLPage lays out r for html.tmpl.
func newHTMLPage(r *results.Results) htmlPage {
	var p htmlPage
	for i, s := range r.Scenarios {
		anchor := "s" + strconv.Itoa(i+1)
		p.Rows = append(p.Rows, newTableRow(s, anchor))
		hs := htmlScenario{Name: s.Name, Anchor: anchor, Description: s.Description, Seed: s.Seed, Deployment: s.Deployment, Action: s.Action}
		if s.Target != "" {
			hs.Target, hs.Speaks = s.Target, load.DescribeTarget(s.Target)
		}
		for j, run := range s.Runs {
			h := newHTMLRun(run, anchor+"r"+strconv.Itoa(j+1))
			p.Diagnosed = p.Diagnosed || len(h.Stories) > 0
			hs.Runs = append(hs.Runs, h)
		}
		p.Scenarios = append(p.Scenarios, hs)
	}
	return p
}

// newTableRow spells a scenario's row with WriteTable's figures.
func newTableRow(s results.Result, anchor string) tableRow {
	t := s.Totals
	m := summarize(s)
	return tableRow{
		Name: s.Name, Anchor: anchor, Description: s.Description, Runs: len(s.Runs),
		Samples: t.Requests, Failed: t.Failed(), Refused: t.Refused, Reset: t.Reset, Closed: t.Closed,
		Timeout: t.Timeout, HTTP5xx: t.HTTP5xx, Absorb: t.Absorbed,
		P99: millis(m.p99), Drain: seconds(m.drain), ExitCodes: exitCodes(m.codes), Rollout: seconds(m.rollout), Restarts: m.restarts,
		Capacity: capacity(m.capacity), CapacityTitle: capacityTitle(m.capacity), Below: belowAllowed(m.capacity),
	}
}

// capacityTitle says what a capacity's figures are, and what it is judged
// against.
func capacityTitle(c *results.Capacity) string {
	if c == nil {
		return ""
	}
	t := fmt.Sprintf("the fewest ready pods, %d, of the Deployment's %d replicas", c.MinReady, c.Replicas)
	switch {
	case c.Allowed == nil:
		return t
	case belowAllowed(c):
		return fmt.Sprintf("%s: below the %d its rollout strategy allows", t, *c.Allowed)
	}
	return fmt.Sprintf("%s; its rollout strategy allows %d", t, *c.Allowed)
}

// newHTMLRun lays out one run, the ids of whose stories start with
// anchor: with a diagnosis, its failures coloured by cause, their stories
// and its causes; without one, its failures by class.
func newHTMLRun(run results.Run, anchor string) htmlRun {
	h := htmlRun{
		Heading: fmt.Sprintf("run %d · action at %s UTC · %d requests, %d failed",
			run.Repetition, run.Start.UTC().Format("2006-01-02 15:04:05.000"), run.Totals.Requests, run.Totals.Failed()),
	}
	fails := classPlot(run)
	if d := run.Diagnosis; d != nil {
		h.Diagnosed, h.StoriesAnchor = true, anchor+"-stories"
		h.Stories, fails = newStories(h.StoriesAnchor, anchor, run)
		h.Causes, h.Findings, h.Limits = newCauses(d, h.Stories), podFindings(d.Findings), d.Limits
	}
	h.Chart = newTimelineChart(run, fails)
	for _, c := range run.Clients {
		h.Clients = append(h.Clients, clientLine(c))
	}
	var figures strings.Builder
	writeDisruption(&figures, run)
	for _, line := range strings.Split(strings.TrimRight(figures.String(), "\n"), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			h.Figures = append(h.Figures, line)
		}
	}
	for _, p := range run.OldPods {
		h.OldPods = append(h.OldPods, oldPodRow{
			Name: p.Name, Sigterm: offset(p.SigtermMS), LastRequest: offset(p.LastRequestMS),
			Gap: strings.Trim(gap(p.GapMS), " ()"), AfterSigterm: count(p.AfterSigterm), ServedAfter: p.AfterSigterm != nil && *p.AfterSigterm > 0,
			Drain: seconds(p.DrainMS), Exit: exitCodes([]int{p.ExitCode}),
		})
	}
	if unattributed(run) {
		h.Unattributed = unattributedNote
	}
	if !listenLogged(run) {
		h.Unlogged = unloggedNote
	}
	return h
}
