package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// The timeline's geometry, in SVG user units: the chart scales to the
// page's width.
const (
	chartWidth   = 1200.0
	plotLeft     = 196.0 // the lanes' labels are left of it
	plotRight    = 1184.0
	laneHeight   = 30.0
	routeHeight  = 22.0
	failHeight   = 84.0
	axisHeight   = 26.0
	bucketMS     = 100.0
	maxTimeTicks = 16
)

// timelineChart is one run's SVG.
type timelineChart struct {
	Width, Height       float64
	PlotLeft, PlotRight float64
	Grid                []gridLine
	Ticks               []axisTick
	AxisY               float64
	Zero                gridLine
	Sections            []chartSection
	Lanes               []chartLane
	Fail                failChart
}

// chartSection is a heading row above a group of lanes, from Y, Height
// high: the heading, and the group's legend right of it.
type chartSection struct {
	Y, Height float64
	Label     string
	Legend    []legendItem
}

// gridLine is a vertical line at X from Y1 to Y2.
type gridLine struct {
	X, Y1, Y2 float64
}

// axisTick is a labelled second of the time axis.
type axisTick struct {
	X     float64
	Label string
}

// chartLane is one row: a pod, or a routing view.
type chartLane struct {
	Y, Height float64
	Label     string
	Title     string
	Bars      []chartBar
	Marks     []chartMark
}

// chartBar is a rectangle with a hover title. Class names a colour of
// html.tmpl's style sheet.
type chartBar struct {
	X, Y, W, H float64
	Class      string
	Title      string
	Label      string
	LabelX     float64
	// Story is the id of the story the bar links to; empty for none.
	Story string
}

// chartMark is a point event: Shape is tick (a line from Y to Y2), cross,
// diamond, dot or label, centred on X and Y.
type chartMark struct {
	X, Y  float64
	Y2    float64
	Shape string
	Class string
	Title string
	Label string
}

// failChart is the stacked bars of the failed requests, Height high
// from Y; Max labels the highest bucket, Unit the axis (per bucket), None
// says there were none.
type failChart struct {
	Y, Height float64
	Bars      []chartBar
	Max, Unit string
	None      bool
}

// timeScale maps offsets from the action's start (ms) to x.
type timeScale struct {
	fromMS, toMS float64
}

// x returns the x of ms, clamped to the scale's span.
func (s timeScale) x(ms float64) float64 {
	ms = min(max(ms, s.fromMS), s.toMS)
	return round1(plotLeft + (ms-s.fromMS)/(s.toMS-s.fromMS)*(plotRight-plotLeft))
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// span returns the bar from fromMS to toMS, at least 0.6 wide so that an
// instant still shows, from y to y+h.
func (s timeScale) span(fromMS, toMS, y, h float64, class, title string) chartBar {
	x0, x1 := s.x(fromMS), s.x(toMS)
	return chartBar{X: x0, Y: y, W: round1(max(x1-x0, 0.6)), H: h, Class: class, Title: title}
}

// newTimeScale spans the run's recording, from its start to its last
// entry or the last old pod gone, on whole ticks of a step that gives at
// most maxTimeTicks ticks. Earlier log events of the pods lie on its left
// edge.
func newTimeScale(run results.Run) (timeScale, float64) {
	lo, hi := recordingStart(run), max(0, run.RolloutMS)
	for _, e := range run.Timeline {
		hi = max(hi, e.AtMS)
	}
	if hi-lo < 1000 {
		hi = lo + 1000
	}
	steps := []float64{100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if math.Ceil(hi/s)-math.Floor(lo/s) <= maxTimeTicks {
			step = s
			break
		}
	}
	return timeScale{fromMS: math.Floor(lo/step) * step, toMS: math.Ceil(hi/step) * step}, step
}

// at spells an offset from the action's start for hover titles.
func at(ms float64) string { return fmt.Sprintf("%+.3f s", ms/1000) }

// newTimelineChart lays out a run's timeline from the top: the action
// lane, the pods, the endpoints, the failed requests as fails stacks them
// and the time axis, each group under a heading with its legend.
func newTimelineChart(run results.Run, fails failPlot) timelineChart {
	scale, step := newTimeScale(run)
	c := timelineChart{Width: chartWidth, PlotLeft: plotLeft, PlotRight: plotRight}
	y := 4.0
	// heading adds a group's heading and the legend of its lanes.
	heading := func(label string, entries []legendGroup, lanes []chartLane) {
		legend, h := newLegend(entries, lanes, y)
		c.Sections = append(c.Sections, chartSection{Y: y, Height: h, Label: label, Legend: legend})
		y += h + 2
	}
	// group adds lanes under a heading.
	group := func(label string, entries []legendGroup, lanes []chartLane) {
		if len(lanes) == 0 {
			return
		}
		heading(label, entries, lanes)
		for i := range lanes {
			lanes[i].place(y)
			y += lanes[i].Height
		}
		c.Lanes = append(c.Lanes, lanes...)
		y += 8
	}
	if l, ok := actionLane(run, scale); ok {
		group("action", actionLegend, []chartLane{l})
	}
	group("pods", podLegend, podLanes(run, scale))
	group("endpoints", endpointLegend, routeLanes(run, scale))
	c.Fail = failBars(fails, scale)
	heading("failed requests", fails.legend, []chartLane{{Bars: c.Fail.Bars}})
	c.Fail.place(y)
	y += c.Fail.Height + 10
	c.AxisY = y
	for i := 0; scale.fromMS+float64(i)*step <= scale.toMS; i++ {
		t := scale.fromMS + float64(i)*step
		x := scale.x(t)
		c.Ticks = append(c.Ticks, axisTick{X: x, Label: strconv.FormatFloat(t/1000, 'f', -1, 64) + " s"})
		c.Grid = append(c.Grid, gridLine{X: x, Y1: 4, Y2: y})
	}
	c.Zero = gridLine{X: scale.x(0), Y1: 4, Y2: y}
	c.Height = y + axisHeight
	return c
}

// place moves a failure chart built at y = 0 to y.
func (f *failChart) place(y float64) {
	f.Y = y
	for i := range f.Bars {
		f.Bars[i].Y = round1(f.Bars[i].Y + y)
	}
}

// place moves a lane built at y = 0 to y.
func (l *chartLane) place(y float64) {
	l.Y = y
	for i := range l.Bars {
		l.Bars[i].Y += y
	}
	for i := range l.Marks {
		l.Marks[i].Y += y
		l.Marks[i].Y2 += y
	}
}

// actionLane draws what the action did beside the pods, when the run
// has it: a dependency outage and the recovery after it, a node's drain,
// a rollback, the set-env variables applied, the cluster-wide events
// (progress_deadline_exceeded, a node cordoned or uncordoned) and the
// moment the ready pods fell to their fewest. The runner's other steps
// on the timeline are those of the outage, drain and rollback figures,
// drawn from the figures.
func actionLane(run results.Run, s timeScale) (chartLane, bool) {
	l := chartLane{Height: routeHeight}
	// A bar shows its label inside when it is wide enough.
	bar := func(from, to float64, class, label, title string) {
		b := s.span(from, to, 4, routeHeight-8, class, title)
		if b.W > 7*float64(len(label)) {
			b.Label, b.LabelX = label, round1(b.X+4)
		}
		l.Bars = append(l.Bars, b)
	}
	// A tick's label ends left of it.
	tick := func(atMS float64, label, title string) {
		l.Marks = append(l.Marks, chartMark{X: s.x(atMS), Y: 2, Y2: routeHeight - 2, Shape: "tick", Class: "step", Label: label, Title: title})
	}
	if d := run.Drain; d != nil {
		outcome := "drained"
		if !d.Drained {
			outcome = "blocked, given up"
		}
		bar(0, d.EndMS, "drain", "drain of "+d.Node+": "+outcome, fmt.Sprintf("drain of %s from %s to %s: %s", d.Node, at(0), at(d.EndMS), outcome))
	}
	if o := run.Outage; o != nil {
		bar(o.StartMS, o.EndMS, "outage", "dependency outage ("+o.Mode+")", fmt.Sprintf("dependency outage (%s) from %s to %s", o.Mode, at(o.StartMS), at(o.EndMS)))
		if r := run.RecoverMS; r != nil {
			bar(o.EndMS, o.EndMS+*r, "recovering", "recovering", fmt.Sprintf("recovering from %s to %s: then every pod ready and no request failing", at(o.EndMS), at(o.EndMS+*r)))
		}
	}
	if r := run.RolledBackMS; r != nil {
		tick(*r, "rolled back", "rolled back at "+at(*r))
	}
	if c := run.Capacity; c != nil && c.MinReady < c.Replicas {
		class, title := "capacity", fmt.Sprintf("ready pods fell to %d of %d at %s", c.MinReady, c.Replicas, at(c.AtMS))
		switch {
		case c.Allowed == nil:
			class = "capacity unknown"
		case belowAllowed(c):
			class = "capacity below"
			title += fmt.Sprintf(", below the %d the rollout strategy allows", *c.Allowed)
		default:
			title += fmt.Sprintf(", as the rollout strategy allows (%d)", *c.Allowed)
		}
		l.Marks = append(l.Marks, chartMark{X: s.x(c.AtMS), Y: routeHeight / 2, Shape: "diamond", Class: class, Title: title})
	}
	for _, e := range run.Timeline {
		switch k := cluster.EventKind(e.Kind); {
		case e.Source == results.SourceCluster && (k == cluster.ProgressDeadlineExceeded || k == cluster.NodeCordoned || k == cluster.NodeUncordoned):
		case e.Source == results.SourceRunner && e.Kind == results.RunnerEnvApplied:
		default:
			continue
		}
		title := fmt.Sprintf("%s at %s", e.Kind, at(e.AtMS))
		if e.Node != "" {
			title += " on " + e.Node
		}
		if d := details(e.Detail); d != "" {
			title += ": " + d
		}
		tick(e.AtMS, strings.ReplaceAll(e.Kind, "_", " "), title)
	}
	return l, len(l.Bars) > 0 || len(l.Marks) > 0
}

// The pod phases of a pod lane, each a class of html.tmpl.
const (
	phaseStarting = "starting"
	phaseReady    = "ready"
	phaseUnready  = "unready"
	phaseStopping = "terminating"
	phasePreStop  = "prestop"
	phaseSigterm  = "sigterm"
	phaseDown     = "down"
)

var phaseNames = map[string]string{
	phaseStarting: "starting (not ready)",
	phaseReady:    "ready",
	phaseUnready:  "not ready",
	phaseStopping: "terminating, before SIGTERM",
	phasePreStop:  "terminating, preStop hook",
	phaseSigterm:  "after SIGTERM",
	phaseDown:     "container exited, waiting for restart",
}

// podTrack follows one pod along the timeline.
type podTrack struct {
	name, node string
	created    bool
	// listed is a pod of the run's Running; readyAtStart one ready, and
	// so routed to, when the recording began.
	listed, readyAtStart bool
	phase                string
	since                float64
	ended                bool
	bars                 []chartBar
	marks                []chartMark
	listening            bool // since listenAt
	listenAt             float64
	listenBars           []chartBar
	terminate            float64
	terminated           bool
	// running are the pod's app containers that run, by name, as far as
	// entries name them: not its init containers nor its sidecars;
	// sidecars counts the sidecars that run.
	running  map[string]bool
	sidecars int
}

// Lane rows, relative to the lane's top.
const (
	phaseY, phaseH     = 3.0, 13.0
	routedY, routedH   = 19.0, 3.5
	processY, processH = 24.0, 3.5
)

// enter ends the current phase at atMS and starts phase.
func (p *podTrack) enter(phase string, atMS float64, s timeScale) {
	p.close(atMS, s)
	p.phase, p.since = phase, atMS
}

// close ends the current phase, if any, at atMS: its bar is drawn.
func (p *podTrack) close(atMS float64, s timeScale) {
	if p.phase == "" {
		return
	}
	p.bars = append(p.bars, s.span(p.since, atMS, phaseY, phaseH, p.phase,
		fmt.Sprintf("%s: %s from %s to %s (%.3f s)", p.name, phaseNames[p.phase], at(p.since), at(atMS), (atMS-p.since)/1000)))
	p.phase = ""
}

// mark adds a mark at y; a tick runs from y to y+h.
func (p *podTrack) mark(shape, class string, atMS, y, h float64, s timeScale, title, label string) {
	p.marks = append(p.marks, chartMark{X: s.x(atMS), Y: y, Y2: y + h, Shape: shape, Class: class, Title: title, Label: label})
}

// stopListening ends the listening span, if any, at atMS.
func (p *podTrack) stopListening(atMS float64, s timeScale) {
	if !p.listening {
		return
	}
	p.listenBars = append(p.listenBars, s.span(p.listenAt, atMS, processY, processH, "listening",
		fmt.Sprintf("%s: process listening from %s to %s", p.name, at(p.listenAt), at(atMS))))
	p.listening = false
}

// details spells an entry's detail fields, sorted by name.
func details(d map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, k+"="+d[k])
	}
	return strings.Join(parts, " ")
}

// podLanes follows every pod of the timeline: cluster events set its
// phases and marks, its log events the process's listening span.
func podLanes(run results.Run, s timeScale) []chartLane {
	tracks := map[string]*podTrack{}
	var order []*podTrack
	track := func(e results.Entry) *podTrack {
		p := tracks[e.Pod]
		if p == nil {
			p = &podTrack{name: e.Pod}
			tracks[e.Pod] = p
			order = append(order, p)
		}
		if e.Node != "" {
			p.node = e.Node
		}
		return p
	}
	// A pod whose creation the run did not see already ran when the
	// recording began: in the state that the run's Running gives it, or,
	// if Running lacks it, ready; unless the first cluster event of it is
	// one of its start.
	decided := map[string]bool{}
	for _, rp := range run.Running {
		p := track(results.Entry{Pod: rp.Name, Node: rp.Node})
		p.listed, p.readyAtStart = true, rp.Ready
		decided[p.name] = true
	}
	for _, e := range run.Timeline {
		if e.Pod == "" || (e.Source != results.SourceCluster && e.Source != results.SourcePod) {
			continue
		}
		p := track(e)
		if e.Source != results.SourceCluster || decided[p.name] {
			continue
		}
		decided[p.name] = true
		switch cluster.EventKind(e.Kind) {
		case cluster.PodCreated, cluster.PodScheduled, cluster.PodStarted, cluster.ContainerStarted, cluster.PodReady:
			p.created = true
		}
	}
	recorded := recordingStart(run)
	for _, p := range order {
		if p.created {
			continue
		}
		p.readyAtStart = p.readyAtStart || !p.listed
		p.phase, p.since = phaseUnready, recorded
		if p.readyAtStart {
			p.phase = phaseReady
		}
	}
	for _, e := range run.Timeline {
		if e.Pod == "" || (e.Source != results.SourceCluster && e.Source != results.SourcePod) {
			continue
		}
		p := tracks[e.Pod]
		if p.ended {
			continue
		}
		what := fmt.Sprintf("%s at %s", e.Kind, at(e.AtMS))
		if e.Container != "" {
			what = fmt.Sprintf("%s of container %s at %s", e.Kind, e.Container, at(e.AtMS))
		}
		if d := details(e.Detail); d != "" {
			what += ": " + d
		}
		if e.Source == results.SourcePod {
			switch e.Kind {
			case "listening":
				if !p.listening {
					p.listening, p.listenAt = true, e.AtMS
				}
				p.mark("tick", "listen", e.AtMS, processY-1.5, processH+3, s, p.name+" (log): "+what, "")
			case "drained":
				p.mark("dot", "drained", e.AtMS, processY+processH/2, 0, s, p.name+" (log): "+what, "")
			}
			continue
		}
		switch cluster.EventKind(e.Kind) {
		case cluster.PodCreated, cluster.PodScheduled:
			if p.phase == "" {
				p.enter(phaseStarting, e.AtMS, s)
			}
		case cluster.PodStarted:
			if p.phase == "" {
				p.enter(phaseStarting, e.AtMS, s)
			}
		case cluster.ContainerStarted:
			switch {
			case e.Container == "" || e.Detail["init"] != "":
			case cluster.OfSidecar(e.Detail):
				p.sidecars++
			default:
				if p.running == nil {
					p.running = map[string]bool{}
				}
				p.running[e.Container] = true
			}
			if p.phase == "" || p.phase == phaseDown {
				p.enter(phaseStarting, e.AtMS, s)
			}
		case cluster.PodReady:
			if p.phase == "" || p.phase == phaseStarting || p.phase == phaseUnready {
				p.enter(phaseReady, e.AtMS, s)
			}
		case cluster.PodUnready:
			if p.phase == phaseReady {
				p.enter(phaseUnready, e.AtMS, s)
			}
		case cluster.PodTerminating:
			p.terminate, p.terminated = e.AtMS, true
			p.enter(phaseStopping, e.AtMS, s)
		case cluster.PreStopStarted:
			if p.phase == phaseStopping {
				p.enter(phasePreStop, e.AtMS, s)
			}
			p.mark("tick", "hook", e.AtMS, phaseY, phaseH, s, p.name+": "+what, "")
		case cluster.PreStopFinished:
			p.mark("tick", "hook", e.AtMS, phaseY, phaseH, s, p.name+": "+what, "")
		case cluster.SignalSent:
			if p.phase == phaseStopping || p.phase == phasePreStop {
				p.enter(phaseSigterm, e.AtMS, s)
			}
			p.mark("tick", "signal", e.AtMS, phaseY-2, phaseH+4, s, p.name+": "+what, "")
		case cluster.Killed:
			p.mark("cross", "killed", e.AtMS, phaseY+phaseH/2, 0, s, p.name+": SIGKILL at "+at(e.AtMS)+" (the grace period ended)", "")
		case cluster.LivenessKill:
			p.mark("cross", "killed", e.AtMS, phaseY+phaseH/2, 0, s, p.name+": "+what, "")
		case cluster.ContainerExited:
			if cluster.InitDone(cluster.EventKind(e.Kind), e.Detail) {
				continue
			}
			if cluster.OfSidecar(e.Detail) {
				p.sidecars--
			}
			delete(p.running, e.Container)
			if cluster.OfSidecar(e.Detail) || len(p.running) > 0 {
				// A sidecar, or one app container of several: the
				// pod's server runs on, or is already gone.
				p.mark("label", "exit", e.AtMS, phaseY+phaseH-2.5, 0, s, p.name+": "+what, e.Detail["code"])
				continue
			}
			p.stopListening(e.AtMS, s)
			if p.terminated && p.sidecars > 0 {
				// The sidecars stop after the app (C3): the lane goes on
				// to the pod's end.
				p.mark("label", "exit", e.AtMS, phaseY+phaseH-2.5, 0, s, p.name+": "+what, e.Detail["code"])
				continue
			}
			if p.terminated {
				p.close(e.AtMS, s)
				p.ended = true
			} else {
				p.enter(phaseDown, e.AtMS, s)
			}
			p.mark("label", "exit", e.AtMS, phaseY+phaseH-2.5, 0, s, p.name+": "+what, e.Detail["code"])
		case cluster.PodTerminated:
			p.stopListening(e.AtMS, s)
			p.close(e.AtMS, s)
			p.ended = true
		case cluster.BackOff:
			p.mark("dot", "backoff", e.AtMS, phaseY+phaseH/2, 0, s, p.name+": "+what, "")
		case cluster.PodEvicted, cluster.EvictionRefused:
			p.mark("diamond", "evict", e.AtMS, phaseY+phaseH/2, 0, s, p.name+": "+what, "")
		}
	}
	end := s.toMS
	// Old pods first, in the order their termination began; then the
	// others in the order they appeared.
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.terminated != b.terminated {
			return a.terminated
		}
		if a.terminated {
			return a.terminate < b.terminate
		}
		return false
	})
	routed := routedSpans(run, order, s)
	logged := listenLogged(run)
	lastRequest := map[string]float64{}
	for _, op := range run.OldPods {
		if op.LastRequestMS != nil {
			lastRequest[op.Name] = *op.LastRequestMS
		}
	}
	var lanes []chartLane
	for _, p := range order {
		p.stopListening(end, s)
		p.close(end, s)
		if t, ok := lastRequest[p.name]; ok {
			p.mark("diamond", "last", t, routedY+routedH/2, 0, s, p.name+": last request answered reached it at "+at(t), "")
		}
		label := p.name
		title := p.name
		if p.node != "" {
			title += " on " + p.node
		}
		title += ": the bar is its phase, the upper thin line when the nodes route new connections to it"
		if logged {
			title += ", the lower one when its process listens"
		}
		l := chartLane{Height: laneHeight, Label: label, Title: title}
		l.Bars = append(l.Bars, p.bars...)
		l.Bars = append(l.Bars, routed[p.name]...)
		l.Bars = append(l.Bars, p.listenBars...)
		l.Marks = p.marks
		lanes = append(lanes, l)
	}
	return lanes
}

// unloggedNote says why a run's pod lanes draw no listening line.
const unloggedNote = "when each pod's process listened is not drawn: no pod of this run logged a listening event, as closingtime serve does in its JSON log"

// listenLogged reports whether a pod of the run logged a listening event,
// from which its lane draws when its process listens.
func listenLogged(run results.Run) bool {
	return slices.ContainsFunc(run.Timeline, func(e results.Entry) bool { return e.Source == results.SourcePod && e.Kind == "listening" })
}

// recordingStart returns when the run's recording began, as an offset
// from the action's start: the first second of the clients' traffic, or
// the first cluster event or failed request if earlier. The run records
// cluster events and requests from the start of its traffic; the pods'
// log events go back further.
func recordingStart(run results.Run) float64 {
	start := 0.0
	for _, c := range run.Clients {
		if len(c.Seconds) > 0 {
			start = min(start, float64(c.Seconds[0].Time.Sub(run.Start).Microseconds())/1000)
		}
	}
	for _, e := range run.Timeline {
		if e.Source == results.SourceCluster || e.Source == results.SourceClient {
			return min(start, e.AtMS)
		}
	}
	return start
}

// podIPs maps the pods' IPs to their names, from the run's Running, its
// pod_started events and the pods' listening log events.
func podIPs(run results.Run) map[string]string {
	names := map[string]string{}
	for _, p := range run.Running {
		if p.IP != "" {
			names[p.IP] = p.Name
		}
	}
	for _, e := range run.Timeline {
		ip := ""
		switch {
		case e.Source == results.SourceCluster && e.Kind == string(cluster.PodStarted):
			ip = e.Detail["ip"]
		case e.Source == results.SourcePod && e.Kind == "listening":
			ip, _, _ = strings.Cut(e.Detail["address"], ":")
		}
		if ip != "" && e.Pod != "" {
			names[ip] = e.Pod
		}
	}
	return names
}

// routedSpans returns, per pod, the bars of its routed row: the spans when
// one or more nodes' routing views send new connections to it. Before a
// node's first applied change, its view is taken to route to the pods
// that were ready when the recording started.
func routedSpans(run results.Run, pods []*podTrack, s timeScale) map[string][]chartBar {
	names := podIPs(run)
	views := map[string]map[string]bool{} // node → pod → routed
	var nodes []string
	for _, e := range run.Timeline {
		if e.Source == results.SourceCluster && e.Kind == string(cluster.EndpointsApplied) && views[e.Node] == nil {
			views[e.Node] = map[string]bool{}
			nodes = append(nodes, e.Node)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	sort.Strings(nodes)
	for _, p := range pods {
		if p.readyAtStart {
			for _, n := range nodes {
				views[n][p.name] = true
			}
		}
	}
	type span struct {
		since float64
		by    []string
	}
	open := map[string]*span{}
	out := map[string][]chartBar{}
	flush := func(pod string, atMS float64) {
		sp := open[pod]
		if sp == nil {
			return
		}
		class := "routed"
		if len(sp.by) < len(nodes) {
			class = "routed some"
		}
		out[pod] = append(out[pod], s.span(sp.since, atMS, routedY, routedH, class,
			fmt.Sprintf("%s: new connections routed to it by %s from %s to %s", pod, strings.Join(sp.by, ", "), at(sp.since), at(atMS))))
		delete(open, pod)
	}
	update := func(atMS float64) {
		for _, p := range pods {
			var by []string
			for _, n := range nodes {
				if views[n][p.name] {
					by = append(by, n)
				}
			}
			if sp := open[p.name]; sp != nil && slices.Equal(sp.by, by) {
				continue
			}
			flush(p.name, atMS)
			if len(by) > 0 {
				open[p.name] = &span{since: atMS, by: by}
			}
		}
	}
	update(recordingStart(run))
	for _, e := range run.Timeline {
		if e.Source != results.SourceCluster || e.Kind != string(cluster.EndpointsApplied) {
			continue
		}
		view := map[string]bool{}
		to, _ := e.Endpoints.Route(e.Node)
		for _, i := range to {
			if name, ok := names[e.Endpoints.List[i].Address]; ok {
				view[name] = true
			}
		}
		views[e.Node] = view
		update(e.AtMS)
	}
	for _, p := range pods {
		flush(p.name, s.toMS)
	}
	return out
}

// routeLanes draws the Service's endpoints as the API published them
// (endpoints_published) and as each node's routing view applied them
// (endpoints_applied): a bar per state between two changes, labelled with
// the number of endpoints new connections go to.
func routeLanes(run results.Run, s timeScale) []chartLane {
	names := podIPs(run)
	// A view is the API's (node "") or a node's, of one Service.
	type key struct{ object, node string }
	type view struct {
		label string
		node  string // "" for the API's
		since float64
		eps   cluster.Endpoints
		lane  chartLane
	}
	views := map[key]*view{}
	var keys []key
	objects := map[string]bool{}
	var entries []results.Entry
	for _, e := range run.Timeline {
		if e.Source == results.SourceCluster && (e.Kind == string(cluster.EndpointsApplied) || e.Kind == string(cluster.EndpointsPublished)) {
			objects[e.Detail["object"]] = true
			entries = append(entries, e)
		}
	}
	describe := func(eps cluster.Endpoints) string {
		var parts []string
		for _, ep := range eps.List {
			name := ep.Address
			if n, ok := names[ep.Address]; ok {
				name = n + " (" + ep.Address + ")"
			}
			var state []string
			if ep.Ready {
				state = append(state, "ready")
			}
			if ep.Serving {
				state = append(state, "serving")
			}
			if ep.Terminating {
				state = append(state, "terminating")
			}
			if len(state) == 0 {
				state = append(state, "not ready")
			}
			parts = append(parts, name+" "+strings.Join(state, ", "))
		}
		if len(parts) == 0 {
			return "no endpoints"
		}
		return strings.Join(parts, "; ")
	}
	flush := func(v *view, atMS float64) {
		to, _ := v.eps.Route(v.node)
		n := len(to)
		class := "route"
		if n == 0 {
			class = "route empty"
		}
		b := s.span(v.since, atMS, 4, routeHeight-8, class, fmt.Sprintf("%s from %s to %s: %s", v.label, at(v.since), at(atMS), describe(v.eps)))
		if b.W > 16 {
			b.Label, b.LabelX = strconv.Itoa(n), round1(b.X+3)
		}
		v.lane.Bars = append(v.lane.Bars, b)
	}
	for _, e := range entries {
		k := key{object: e.Detail["object"]}
		if e.Kind == string(cluster.EndpointsApplied) {
			k.node = e.Node
		}
		v := views[k]
		if v == nil {
			label := "EndpointSlice (API)"
			if e.Kind == string(cluster.EndpointsApplied) {
				label = k.node + " routing view"
			}
			if len(objects) > 1 {
				label = strings.TrimPrefix(k.object, "Service/") + " " + label
			}
			v = &view{label: label, node: k.node, lane: chartLane{Height: routeHeight, Label: label, Title: label}}
			views[k] = v
			keys = append(keys, k)
		} else {
			flush(v, e.AtMS)
		}
		v.eps, v.since = e.Endpoints, e.AtMS
		v.lane.Marks = append(v.lane.Marks, chartMark{X: s.x(e.AtMS), Y: 2, Y2: routeHeight - 2, Shape: "tick", Class: "change",
			Title: fmt.Sprintf("%s changed at %s: %s", v.label, at(e.AtMS), describe(v.eps))})
	}
	// Each Service's published view first, then its nodes' by name.
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].object != keys[j].object {
			return keys[i].object < keys[j].object
		}
		return keys[i].node < keys[j].node
	})
	var lanes []chartLane
	for _, k := range keys {
		v := views[k]
		flush(v, s.toMS)
		lanes = append(lanes, v.lane)
	}
	return lanes
}

// failClass is a class of the failure chart: its html.tmpl class, its
// label and the load classes it sums.
type failClass struct {
	class, label string
	kinds        []string
}

// failClasses are the failure classes of the chart, in stacking order from
// the bottom, with the load classes each sums.
var failClasses = []failClass{
	{"refused", "refused", []string{"refused"}},
	{"reset", "reset", []string{"reset"}},
	{"closed", "closed", []string{"closed"}},
	{"timeout", "timeout", []string{"connect-timeout", "response-timeout"}},
	{"http5xx", "5xx", []string{"http5xx"}},
	{"error", "error", []string{"error"}},
}

// failMark is a request the failure chart stacks: when it was sent, and
// the index of its segment's kind in its failPlot.
type failMark struct {
	atMS float64
	seg  int
}

// failSeg is a kind of segment of the failure chart's bars: its class,
// what its hover title calls it, and the id of the story its segments
// link to; empty for none.
type failSeg struct {
	class, label, story string
}

// failPlot is what the failure chart draws: the requests, the kinds of
// segment in stacking order from the bottom, and the chart's legend.
type failPlot struct {
	marks  []failMark
	segs   []failSeg
	legend []legendGroup
}

// classPlot stacks the failed requests of the run's timeline by class,
// as the chart of a run without a diagnosis does.
func classPlot(run results.Run) failPlot {
	p := failPlot{legend: failLegend()}
	for _, c := range failClasses {
		p.segs = append(p.segs, failSeg{class: "fail " + c.class, label: c.label})
	}
	for _, e := range run.Timeline {
		if e.Source == results.SourceClient {
			p.marks = append(p.marks, failMark{atMS: e.AtMS, seg: failClassOf(e.Kind)})
		}
	}
	return p
}

// failClassOf returns the index in failClasses of the class that sums
// the load class kind; error's for a class it does not know.
func failClassOf(kind string) int {
	ci := slices.IndexFunc(failClasses, func(c failClass) bool { return slices.Contains(c.kinds, kind) })
	if ci < 0 {
		return len(failClasses) - 1
	}
	return ci
}

// failBars stacks the marks of each 100 ms by their segment's kind, by
// their send time, from y = 0. A segment with a story links to it.
func failBars(p failPlot, s timeScale) failChart {
	buckets := map[int][]int{}
	var keys []int
	for _, m := range p.marks {
		b := int(math.Floor(m.atMS / bucketMS))
		if buckets[b] == nil {
			buckets[b] = make([]int, len(p.segs))
			keys = append(keys, b)
		}
		buckets[b][m.seg]++
	}
	if len(keys) == 0 {
		return failChart{Height: 16, None: true}
	}
	f := failChart{Height: failHeight - 10, Unit: "per " + strconv.FormatFloat(bucketMS, 'f', -1, 64) + " ms"}
	sort.Ints(keys)
	top := 0
	for _, k := range keys {
		n := 0
		for _, c := range buckets[k] {
			n += c
		}
		top = max(top, n)
	}
	f.Max = strconv.Itoa(top)
	unit := f.Height / float64(top)
	for _, k := range keys {
		from := float64(k) * bucketMS
		x0, x1 := s.x(from), s.x(from+bucketMS)
		base := f.Height
		for si, n := range buckets[k] {
			if n == 0 {
				continue
			}
			h := float64(n) * unit
			base -= h
			seg := p.segs[si]
			f.Bars = append(f.Bars, chartBar{X: x0, Y: round1(base), W: round1(max(x1-x0-0.4, 0.8)), H: round1(h), Class: seg.class,
				Title: fmt.Sprintf("%s to %s: %d %s", at(from), at(from+bucketMS), n, seg.label), Story: seg.story})
		}
	}
	return f
}
