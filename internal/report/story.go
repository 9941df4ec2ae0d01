package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// A run with a diagnosis (results.Run.Diagnosis) has its failure chart
// coloured by cause: each failed request of its timeline, joined by its
// id to the diagnosis, and each request a retry absorbed, hollow, is
// drawn in the colour of its cause, and its segment of the bar links to
// its story, the evidence of the diagnosis in sentences. Requests whose
// evidence reads the same (cause, class, pod, the pod's states, the
// routing, the re-probe: all but the times) share one story, so that a
// run with thousands of failures has few; beyond maxStories they share
// one per cause and class. The page shows a story when its id is the
// URL's fragment (CSS :target), which selecting a segment sets: no
// script.

// maxStories bounds the stories of a run with distinct evidence.
const maxStories = 100

// failure is a request of a diagnosed run's failure chart.
type failure struct {
	// kind is its class as load spells it, client the client's kind.
	kind, client string
	req          results.Request
	// undiagnosed is a failed request of the timeline that the diagnosis
	// lacks: req holds only what the timeline has of it.
	undiagnosed bool
}

// runFailures returns the failed requests of run's timeline, each with
// its diagnosis, then the requests a retry absorbed.
func runFailures(run results.Run) []failure {
	d := run.Diagnosis
	byID := make(map[string]*results.Request, len(d.Requests))
	for i := range d.Requests {
		byID[d.Requests[i].ID] = &d.Requests[i]
	}
	var out []failure
	for _, e := range run.Timeline {
		if e.Source != results.SourceClient {
			continue
		}
		if r, ok := byID[e.Detail["id"]]; ok && !r.Absorbed {
			out = append(out, failure{kind: e.Kind, client: r.Client.String(), req: *r})
			continue
		}
		r := results.Request{ID: e.Detail["id"], AtMS: e.AtMS, Error: e.Detail["error"], Cause: diagnosis.Unknown}
		out = append(out, failure{kind: e.Kind, client: e.Detail["client"], req: r, undiagnosed: true})
	}
	for _, r := range d.Requests {
		if r.Absorbed {
			out = append(out, failure{kind: r.Class.String(), client: r.Client.String(), req: r})
		}
	}
	return out
}

// storyKey is what the requests of one story share: their cause and
// class, and, in a story of distinct evidence, the evidence but its
// times.
type storyKey struct {
	cause                 results.Cause
	absorbed, undiagnosed bool
	kind                  string
	evidence              string
}

// keyOf returns the key of f's story; a coarse one leaves its evidence
// out.
func keyOf(f failure, coarse bool) storyKey {
	k := storyKey{cause: diagnosis.Describe(f.req.Cause).Cause, absorbed: f.req.Absorbed, undiagnosed: f.undiagnosed, kind: f.kind}
	if !coarse && !f.undiagnosed {
		k.evidence = f.client + "|" + evidence(f.req)
	}
	return k
}

// evidence spells what a story's requests share of r beyond its cause
// and class.
func evidence(r results.Request) string {
	state := func(s results.PodState) string {
		v := fmt.Sprintf("%s/%t/%s", s.State, s.Ready, boolWord(s.Listening, "listening", "not listening"))
		if s.ExitCode != nil {
			v += "/" + strconv.Itoa(*s.ExitCode)
		}
		return v
	}
	probe, endpoints := "", ""
	if p := r.Reprobe; p != nil {
		probe = p.Class.String() + "/" + p.Pod
	}
	if n := r.ReadyEndpoints; n != nil {
		endpoints = strconv.Itoa(*n)
	}
	return strings.Join([]string{r.Pod, strconv.FormatBool(r.PodInferred), strconv.FormatBool(r.ConnRequests > 0),
		state(r.AtConnect), state(r.AtFailure), boolWord(r.Published, "listed", "unlisted"),
		strings.Join(r.RoutedBy, ","), endpoints, probe}, "|")
}

// boolWord spells b: yes if true, no if false, "" if nil.
func boolWord(b *bool, yes, no string) string {
	switch {
	case b == nil:
		return ""
	case *b:
		return yes
	}
	return no
}

// htmlStory is a story: what one or more requests went through.
type htmlStory struct {
	ID string
	// Class is its cause's class, and absorbed for absorbed requests.
	Class string
	// Heading says how many requests it tells, and when they were sent.
	Heading string
	// Lines are the evidence of the first of them, in sentences.
	Lines []string
	// Cause, Fix, Rule and Docs describe its cause.
	Cause, Fix, Rule, Docs string
	// Prev and Next are the ids of the run's stories before and after
	// it, Close the place under the chart that closing it goes to.
	Prev, Next, Close string

	key      storyKey
	requests []failure
}

// htmlCause is a cause of a run as the page lists it under its chart.
type htmlCause struct {
	// Class is its colour's class, and absorbed when a retry absorbed
	// all its requests.
	Class string
	// Count and Seconds are its requests and their seconds as the text
	// output spells them.
	Count, Seconds   string
	Title, Fix, Rule string
	Docs             string
	// Story is the id of its first story.
	Story string
}

// causeClass returns the class that gives cause c its colour: cause-
// and its name, that of Unknown for a cause this version does not know.
func causeClass(c results.Cause) string {
	return "cause-" + string(diagnosis.Describe(c).Cause)
}

// causeRank orders causes as diagnosis.Causes does.
func causeRank(c results.Cause) int {
	return slices.IndexFunc(diagnosis.Causes(), func(i diagnosis.Info) bool { return i.Cause == diagnosis.Describe(c).Cause })
}

// newStories tells the failed and absorbed requests of a diagnosed run
// in stories whose ids start with anchor and which close to the element
// of id closed. It returns the stories, in the order the failure chart
// stacks them (failed before absorbed, then by cause, class and first
// request, the first sent or, sent at the same time, of the lower id),
// and the chart's plot; the same run gives the same stories, whatever the
// order of its requests.
func newStories(closed, anchor string, run results.Run) ([]htmlStory, failPlot) {
	fails := runFailures(run)
	group := func(coarse bool) map[storyKey]*htmlStory {
		by := map[storyKey]*htmlStory{}
		for _, f := range fails {
			k := keyOf(f, coarse)
			s := by[k]
			if s == nil {
				s = &htmlStory{key: k}
				by[k] = s
			}
			s.requests = append(s.requests, f)
		}
		return by
	}
	by := group(false)
	coarse := len(by) > maxStories
	if coarse {
		by = group(true)
	}
	stories := make([]htmlStory, 0, len(by))
	for _, s := range by {
		slices.SortFunc(s.requests, sentFirst)
		stories = append(stories, *s)
	}
	// The map gives the stories in any order; the keys after the first
	// request tell apart any two stories, so that the page comes out the
	// same every time.
	slices.SortFunc(stories, func(a, b htmlStory) int {
		ka, kb := a.key, b.key
		return cmp.Or(boolRank(ka.absorbed, kb.absorbed), cmp.Compare(causeRank(ka.cause), causeRank(kb.cause)),
			cmp.Compare(failClassOf(ka.kind), failClassOf(kb.kind)), sentFirst(a.requests[0], b.requests[0]),
			boolRank(ka.undiagnosed, kb.undiagnosed), cmp.Compare(ka.kind, kb.kind), cmp.Compare(ka.evidence, kb.evidence))
	})
	index := map[storyKey]int{}
	p := failPlot{}
	for i := range stories {
		s := &stories[i]
		index[s.key] = i
		s.ID = anchor + "-" + strconv.Itoa(i+1)
		s.Close = closed
		if i > 0 {
			s.Prev = stories[i-1].ID
			stories[i-1].Next = s.ID
		}
		tell(s, run, coarse)
		p.segs = append(p.segs, failSeg{class: segClass(s.key), label: segLabel(s.key), story: s.ID})
	}
	for _, f := range fails {
		p.marks = append(p.marks, failMark{atMS: f.req.AtMS, seg: index[keyOf(f, coarse)]})
	}
	p.legend = causeLegend(p.segs, stories)
	return stories, p
}

// sentFirst orders failures by their send time, those sent at the same
// time by their request's id.
func sentFirst(a, b failure) int {
	return cmp.Or(cmp.Compare(a.req.AtMS, b.req.AtMS), cmp.Compare(a.req.ID, b.req.ID))
}

// boolRank orders false before true.
func boolRank(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// segClass is the class of the segments of the requests of k: a failed
// request is filled with its cause's colour, an absorbed one hollow.
func segClass(k storyKey) string {
	if k.absorbed {
		return "absorbed cause " + causeClass(k.cause)
	}
	return "fail cause " + causeClass(k.cause)
}

// segLabel is what a segment's hover title calls the requests of k.
func segLabel(k storyKey) string {
	var what []string
	if c := classWords(k.kind); c != "" {
		what = append(what, c)
	}
	if k.absorbed {
		what = append(what, "absorbed by a retry")
	}
	return strings.Join(what, ", ") + " — " + diagnosis.Describe(k.cause).Title
}

// classWords spells a load class for a sentence; "" for ok, the class
// of an absorbed request whose failed attempt was not recorded.
func classWords(kind string) string {
	switch kind {
	case "ok":
		return ""
	case "http5xx":
		return "5xx"
	}
	return strings.ReplaceAll(kind, "-", " ")
}

// causeLegend returns the failure chart's legend of a diagnosed run: a
// swatch per cause, filled if one of its requests failed, hollow if a
// retry absorbed them all, labelled with its title, in the order of the
// stories; and the hollow swatch's meaning when a request was absorbed.
func causeLegend(segs []failSeg, stories []htmlStory) []legendGroup {
	var g legendGroup
	shown := map[results.Cause]bool{}
	absorbed := ""
	for i, s := range stories {
		if s.key.absorbed && absorbed == "" {
			absorbed = segs[i].class
		}
		if shown[s.key.cause] {
			continue
		}
		shown[s.key.cause] = true
		g = append(g, legendEntry{segs[i].class, "bar", fitLabel(diagnosis.Describe(s.key.cause).Title)})
	}
	if absorbed != "" {
		g = append(g, legendEntry{absorbed, "bar", "hollow: absorbed by a retry"})
	}
	return []legendGroup{g}
}

// fitLabel shortens s, at a word, to fit a legend's row.
func fitLabel(s string) string {
	room := plotRight - plotLeft - legendSwatch - 5
	if labelWidth(s) <= room {
		return s
	}
	words := strings.Fields(s)
	for n := len(words) - 1; n > 0; n-- {
		if t := strings.Join(words[:n], " ") + " …"; labelWidth(t) <= room {
			return t
		}
	}
	return "…"
}

// tell writes story s of run: its heading, the evidence of its first
// request and its cause.
func tell(s *htmlStory, run results.Run, coarse bool) {
	k, first, last := s.key, s.requests[0].req, s.requests[len(s.requests)-1].req
	info := diagnosis.Describe(k.cause)
	s.Class = causeClass(k.cause)
	if k.absorbed {
		s.Class += " absorbed"
	}
	s.Cause, s.Fix, s.Rule, s.Docs = info.Title, info.Fix, info.Rule, diagnosis.DocsLink(info.Cause)
	what := "failed request"
	if k.absorbed {
		what = "absorbed request"
	}
	class := ""
	if c := classWords(k.kind); c != "" {
		class = ", " + c
	}
	switch n := len(s.requests); {
	case n == 1:
		s.Heading = "1 " + what + class
	case coarse || k.undiagnosed:
		s.Heading = fmt.Sprintf("%d %ss%s, of this cause, sent from %s to %s; the first of them:", n, what, class, at(first.AtMS), at(last.AtMS))
	default:
		s.Heading = fmt.Sprintf("%d %ss%s, with the same evidence, sent from %s to %s; the first of them:", n, what, class, at(first.AtMS), at(last.AtMS))
	}
	s.Lines = evidenceLines(first, s.requests[0].client, k, run)
}

// evidenceLines says in sentences what the diagnosis holds of request r,
// sent by a client of kind client, of story key k, in run.
func evidenceLines(r results.Request, client string, k storyKey, run results.Run) []string {
	sent := "Sent at " + at(r.AtMS)
	if client != "" {
		sent += " by the " + client + " client"
	}
	outcome := classWords(k.kind)
	if r.Error != "" {
		outcome = strings.TrimSpace(outcome + " (" + r.Error + ")")
	}
	var lines []string
	switch {
	case k.undiagnosed:
		return []string{sent + "; it failed: " + outcome + ".", "The diagnosis has no record of this request."}
	case k.absorbed && outcome != "":
		lines = append(lines, fmt.Sprintf("%s; an attempt failed at %s, %s, and a retry saved the request.", sent, at(r.FailedMS), outcome))
	case k.absorbed:
		lines = append(lines, fmt.Sprintf("%s; an attempt failed at %s, and a retry saved the request.", sent, at(r.FailedMS)))
	default:
		lines = append(lines, fmt.Sprintf("%s; it failed at %s: %s.", sent, at(r.FailedMS), outcome))
	}
	lines = append(lines, connectionLine(r))
	switch {
	case r.Pod == "":
		lines = append(lines, "The pod it reached is unknown.")
	case r.PodInferred:
		lines = append(lines, "It reached pod "+r.Pod+", inferred, not seen: the connection went to the Service's address, and this is the one pod that the timeline shows stopping, or listed, then.")
	default:
		lines = append(lines, "It reached pod "+r.Pod+".")
	}
	if r.Pod != "" {
		lines = append(lines, fmt.Sprintf("%s, the pod was %s.", connected(r), stateWords(r.AtConnect)))
		if r.FailedMS != r.MadeMS() {
			lines = append(lines, fmt.Sprintf("When the request failed (%s), it was %s.", at(r.FailedMS), stateWords(r.AtFailure)))
		}
	}
	lines = append(lines, routingLine(r, run))
	if p := r.Reprobe; p != nil {
		line := fmt.Sprintf("A probe on a new connection at %s ", at(p.AtMS))
		if p.Class.Failed() {
			line += "failed too: " + classWords(p.Class.String())
		} else {
			line += "succeeded"
			if p.Status != 0 {
				line += " (" + strconv.Itoa(p.Status) + ")"
			}
		}
		if p.Pod != "" {
			line += ", from pod " + p.Pod
		}
		lines = append(lines, line+": "+reprobeMeaning(p.Class.Failed()))
	}
	return lines
}

// reprobeMeaning says what a re-probe's outcome tells.
func reprobeMeaning(failed bool) string {
	if failed {
		return "the Service failed new connections as well."
	}
	return "the Service answered, and the failure was the connection's."
}

// connectionLine says which connection r went out on.
func connectionLine(r results.Request) string {
	to := ""
	if r.Addr != "" {
		to = " to " + r.Addr
	}
	if r.ConnRequests > 0 {
		line := "It went out on a reused keep-alive connection" + to
		if r.ConnAgeMS > 0 {
			line += fmt.Sprintf(", made at %s (%.3f s old)", at(r.MadeMS()), r.ConnAgeMS/1000)
		}
		return line + fmt.Sprintf(", that had carried %d %s before.", r.ConnRequests, nounFor(r.ConnRequests, "request", "requests"))
	}
	if r.Cause == diagnosis.NoFreeConnection {
		return "It waited for a free connection of the client's keep-alive pool and got none: no connection was tried."
	}
	if connectFailed(r) {
		if r.Addr == "" {
			return "It tried a new connection; the address it tried is not recorded."
		}
		return "It tried a new connection" + to + "."
	}
	return "It went out on a new connection" + to + ", ready at " + at(r.ConnectMS) + "."
}

// nounFor returns one for n = 1, many otherwise.
func nounFor(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// stateNames spells the states of a pod (results.PodState) for a
// sentence; a state not here is spelled as it is.
var stateNames = map[string]string{
	"running":     "running, its server not yet listening",
	"unready":     "not ready",
	"terminating": "terminating",
	"prestop":     "terminating, in its preStop hook",
	"signalled":   "signalled (SIGTERM sent)",
	"exited":      "exited",
	"killed":      "killed (SIGKILL)",
	"restarting":  "restarting",
	"deleted":     "deleted",
}

// stateWords spells pod state s: its step and since when, its Ready
// condition where the step does not say it, whether it listened, its
// exit code.
func stateWords(s results.PodState) string {
	if s.State == "" {
		return "not known to the timeline"
	}
	parts := []string{cmp.Or(stateNames[s.State], s.State) + " since " + at(s.SinceMS)}
	if s.State != "ready" && s.State != "unready" {
		parts = append(parts, map[bool]string{true: "still Ready", false: "not Ready"}[s.Ready])
	}
	if l := boolWord(s.Listening, "listening", "not listening"); l != "" {
		parts = append(parts, l)
	}
	if s.ExitCode != nil {
		parts = append(parts, "exit code "+strconv.Itoa(*s.ExitCode))
	}
	return strings.Join(parts, ", ")
}

// routingLine says what the EndpointSlices and the nodes' routing views
// showed of r's pod when its connection was made, and, for a request
// that went through an ingress, where the ingress sent it.
func routingLine(r results.Request, run results.Run) string {
	var parts []string
	if r.Upstreams != "" {
		parts = append(parts, "the ingress sent it to "+r.Upstreams)
	}
	switch {
	case r.Published == nil:
	case *r.Published:
		parts = append(parts, "the EndpointSlices listed the pod as a ready endpoint")
	default:
		parts = append(parts, "the EndpointSlices did not list the pod as a ready endpoint")
	}
	first := slices.IndexFunc(run.Timeline, func(e results.Entry) bool {
		return e.Source == results.SourceCluster && e.Kind == string(cluster.EndpointsApplied)
	})
	switch {
	case len(r.RoutedBy) > 0:
		views := "the routing view of "
		if len(r.RoutedBy) > 1 {
			views = "the routing views of "
		}
		parts = append(parts, views+andList(r.RoutedBy)+" sent new connections to it")
	case r.Pod == "":
	case first < 0:
		parts = append(parts, "the cluster shows no node's routing view")
	case run.Timeline[first].AtMS > r.MadeMS():
		parts = append(parts, "no node's routing view had been recorded yet")
	default:
		parts = append(parts, "no node's routing view sent new connections to it")
	}
	endpoints := ""
	if n := r.ReadyEndpoints; n != nil {
		endpoints = fmt.Sprintf("%d %s could take a new connection", *n, nounFor(*n, "endpoint", "endpoints"))
		if *n == 0 {
			endpoints = "no endpoint could take a new connection"
		}
	}
	// The diagnosis counts the endpoints when the request took its
	// connection, the rest when the connection was made.
	later := ""
	if r.ConnAgeMS > 0 && endpoints != "" {
		later = fmt.Sprintf(" When the request took it (%s), %s.", at(r.ConnectMS), endpoints)
	} else if endpoints != "" {
		parts = append(parts, endpoints)
	}
	if len(parts) == 0 {
		return strings.TrimSpace("No change of the Service's endpoints had been recorded by then." + later)
	}
	return connected(r) + ", " + strings.Join(parts, "; ") + "." + later
}

// connected says when the diagnosis took the state of r's pod and
// routing: when its connection was made or tried, or, for a kept-alive
// one of unknown age, when r took it.
func connected(r results.Request) string {
	switch {
	case r.ConnRequests > 0 && r.ConnAgeMS == 0:
		return "When the request took its kept-alive connection (" + at(r.ConnectMS) + ")"
	case connectFailed(r):
		return "When the connection was tried (" + at(r.ConnectMS) + ")"
	}
	return "When the connection was made (" + at(r.MadeMS()) + ")"
}

// connectFailed reports whether r failed in its connect.
func connectFailed(r results.Request) bool {
	return r.Class == load.Refused || r.Class == load.ConnectTimeout
}

// andList joins words as a sentence lists them: "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// newCauses lists the causes of a diagnosed run, linked to their first
// stories.
func newCauses(d *results.Diagnosis, stories []htmlStory) []htmlCause {
	var out []htmlCause
	for _, c := range d.Causes {
		info := diagnosis.Describe(c.Cause)
		class := causeClass(c.Cause)
		if c.Failed == 0 {
			class += " absorbed"
		}
		hc := htmlCause{Class: class, Count: causeCount(c), Seconds: secondsSpan(c.Seconds), Title: info.Title, Fix: info.Fix, Rule: info.Rule,
			Docs: diagnosis.DocsLink(info.Cause)}
		if i := slices.IndexFunc(stories, func(s htmlStory) bool { return s.key.cause == info.Cause }); i >= 0 {
			hc.Story = stories[i].ID
		}
		out = append(out, hc)
	}
	return out
}
