package scenario

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// Results are the results of one or more scenarios: what `closingtime lab`
// and `closingtime rollout` write as results.json (docs/lab.md § results.json).
type Results struct {
	Scenarios []Result `json:"scenarios"`
}

// Result is one scenario's runs and their totals.
type Result struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Seed        string `json:"seed,omitempty"`
	// Deployment is the namespace/name of the Deployment the action
	// concerns.
	Deployment string `json:"deployment"`
	// Totals sums the runs.
	Totals Totals `json:"totals"`
	Runs   []Run  `json:"runs"`
}

// Totals count requests by outcome. Timeout sums the connect and response
// timeouts; Absorbed counts the requests a retry saved, which are also in
// OK.
type Totals struct {
	Requests int64 `json:"requests"`
	OK       int64 `json:"ok"`
	Refused  int64 `json:"refused"`
	Reset    int64 `json:"reset"`
	Closed   int64 `json:"closed"`
	Timeout  int64 `json:"timeout"`
	HTTP5xx  int64 `json:"http5xx"`
	Error    int64 `json:"error"`
	Absorbed int64 `json:"absorbed"`
}

// Failed returns the number of failed requests.
func (t Totals) Failed() int64 { return t.Requests - t.OK }

func (t *Totals) add(o Totals) {
	t.Requests += o.Requests
	t.OK += o.OK
	t.Refused += o.Refused
	t.Reset += o.Reset
	t.Closed += o.Closed
	t.Timeout += o.Timeout
	t.HTTP5xx += o.HTTP5xx
	t.Error += o.Error
	t.Absorbed += o.Absorbed
}

func totalsOf(c load.Counts, absorbed int64) Totals {
	return Totals{
		Requests: c.Total(),
		OK:       c[load.OK],
		Refused:  c[load.Refused],
		Reset:    c[load.Reset],
		Closed:   c[load.Closed],
		Timeout:  c[load.ConnectTimeout] + c[load.ResponseTimeout],
		HTTP5xx:  c[load.HTTP5xx],
		Error:    c[load.Error],
		Absorbed: absorbed,
	}
}

// Run is one repetition: its figures (design.md § Measurement) and its
// timeline. Times are offsets from the action's start, in milliseconds,
// except Start.
type Run struct {
	// Repetition counts from 1.
	Repetition int `json:"repetition"`
	// Start is when the action started.
	Start  time.Time `json:"start"`
	Totals Totals    `json:"totals"`
	// Clients are the load generator's reports, one per client.
	Clients []load.ClientReport `json:"clients"`
	// P99MS is the highest of the clients' 99th latency percentiles.
	P99MS float64 `json:"p99Ms"`
	// FailedSeconds counts the requests of each second that had failures,
	// by the second of their send time after the action's start.
	FailedSeconds []FailedSecond `json:"failedSeconds"`
	// OldPods are the pods that the action ended.
	OldPods []OldPod `json:"oldPods"`
	// RolloutMS is from the action's start to the last old pod gone.
	RolloutMS float64 `json:"rolloutMs"`
	// Restarts counts container restarts during the run's traffic.
	Restarts int `json:"restarts"`
	// Timeline is every cluster event, pod log event and failed request of
	// the run, in order.
	Timeline []Entry `json:"timeline"`
}

// FailedSecond is one second of a run with failures.
type FailedSecond struct {
	// Second is the offset from the action's start: 0 is its first second.
	Second int         `json:"second"`
	Counts load.Counts `json:"counts"`
}

// OldPod is what happened to a pod that the action ended.
type OldPod struct {
	Name string `json:"name"`
	// SigtermMS is when the stop signal was sent; absent if it was not.
	SigtermMS *float64 `json:"sigtermMs,omitempty"`
	// LastRequestMS is when the last request the pod answered reached it
	// (its connection was made); absent if it answered none in the run.
	LastRequestMS *float64 `json:"lastRequestMs,omitempty"`
	// GapMS is SIGTERM's time minus the last request's: positive when the
	// traffic left the pod before the signal.
	GapMS *float64 `json:"gapMs,omitempty"`
	// AfterSigterm counts the requests the pod answered that reached it
	// after SIGTERM.
	AfterSigterm int `json:"afterSigterm"`
	// DrainMS is from the pod's termination start to its last container's
	// exit.
	DrainMS float64 `json:"drainMs"`
	// ExitCode is its container's exit code (128+signal when killed); -1
	// if it never exited during the run.
	ExitCode int `json:"exitCode"`
}

// Entry is one line of a run's timeline.
type Entry struct {
	// AtMS is the offset from the action's start.
	AtMS float64 `json:"atMs"`
	// Source is cluster, pod (a log event of a pod) or client (a failed
	// request).
	Source string `json:"source"`
	// Kind is the event kind, log event name or failure class.
	Kind string `json:"kind"`
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
	// Detail holds the event's fields.
	Detail map[string]string `json:"detail,omitempty"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// figures computes a run's figures from the load report, the load's event
// lines, the cluster events and the pods' log lines, all recorded between
// the start of the run's traffic and its end.
func figures(run *Run, report *load.Report, requests []load.Event, events []cluster.Event, logs map[string][]cluster.LogLine, goneAt time.Time) {
	start := run.Start
	at := func(t time.Time) float64 { return ms(t.Sub(start)) }
	for _, c := range report.Clients {
		run.Totals.add(totalsOf(c.Totals, c.Absorbed.Total()))
		run.P99MS = max(run.P99MS, ms(c.Latency.P99))
	}
	run.Clients = report.Clients

	// Failures by second, and on the timeline.
	seconds := map[int]*load.Counts{}
	type served struct {
		at  time.Time
		pod string
	}
	var answered []served
	for _, r := range requests {
		t, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			continue
		}
		if r.Pod != "" {
			answered = append(answered, served{t.Add(time.Duration(r.ConnectMS * float64(time.Millisecond))), r.Pod})
		}
		sec := int(math.Floor(t.Sub(start).Seconds()))
		if seconds[sec] == nil {
			seconds[sec] = &load.Counts{}
		}
		seconds[sec][r.Class]++
		if r.Class.Failed() {
			run.Timeline = append(run.Timeline, Entry{AtMS: at(t), Source: "client", Kind: r.Class.String(),
				Detail: map[string]string{"client": r.Client.String(), "id": r.ID, "error": r.Error}})
		}
	}
	for sec, c := range seconds {
		if c.Failed() > 0 {
			run.FailedSeconds = append(run.FailedSeconds, FailedSecond{Second: sec, Counts: *c})
		}
	}
	sort.Slice(run.FailedSeconds, func(i, j int) bool { return run.FailedSeconds[i].Second < run.FailedSeconds[j].Second })

	// Old pods: those whose termination started after the action did.
	type podTimes struct {
		terminating, sigterm, exited time.Time
		code                         int
	}
	pods := map[string]*podTimes{}
	var names []string
	for _, e := range events {
		run.Timeline = append(run.Timeline, Entry{AtMS: at(e.Time), Source: "cluster", Kind: string(e.Kind), Pod: e.Pod, Node: e.Node, Detail: withObject(e)})
		if e.Kind == cluster.ContainerStarted {
			if n, _ := strconv.Atoi(e.Fields["restart"]); n > 0 {
				run.Restarts++
			}
		}
		if e.Time.Before(start) {
			continue
		}
		p := pods[e.Pod]
		switch e.Kind {
		case cluster.PodTerminating:
			if p == nil {
				p = &podTimes{code: -1}
				pods[e.Pod] = p
				names = append(names, e.Pod)
			}
			p.terminating = e.Time
		case cluster.SignalSent:
			if p != nil && p.sigterm.IsZero() {
				p.sigterm = e.Time
			}
		case cluster.ContainerExited:
			if p != nil {
				p.exited = e.Time
				p.code, _ = strconv.Atoi(e.Fields["code"])
			}
		}
	}
	for _, name := range names {
		p := pods[name]
		old := OldPod{Name: name, ExitCode: p.code}
		if !p.exited.IsZero() {
			old.DrainMS = ms(p.exited.Sub(p.terminating))
		}
		var last time.Time
		for _, a := range answered {
			if a.pod != name {
				continue
			}
			if a.at.After(last) {
				last = a.at
			}
			if !p.sigterm.IsZero() && a.at.After(p.sigterm) {
				old.AfterSigterm++
			}
		}
		if !p.sigterm.IsZero() {
			old.SigtermMS = ptr(at(p.sigterm))
		}
		if !last.IsZero() {
			old.LastRequestMS = ptr(at(last))
			if !p.sigterm.IsZero() {
				old.GapMS = ptr(ms(p.sigterm.Sub(last)))
			}
		}
		run.OldPods = append(run.OldPods, old)
	}
	if !goneAt.IsZero() {
		run.RolloutMS = at(goneAt)
	}

	// The pods' own log events.
	for pod, lines := range logs {
		for _, l := range lines {
			if l.Time.Before(start.Add(-time.Minute)) {
				continue
			}
			if e, ok := logEvent(pod, l, at); ok {
				run.Timeline = append(run.Timeline, e)
			}
		}
	}
	sort.SliceStable(run.Timeline, func(i, j int) bool { return run.Timeline[i].AtMS < run.Timeline[j].AtMS })
}

func withObject(e cluster.Event) map[string]string {
	if e.Object == "" {
		return e.Fields
	}
	d := map[string]string{"object": e.Object}
	for k, v := range e.Fields {
		d[k] = v
	}
	return d
}

// logEvent reads one JSON log line of `closingtime serve` (docs/serve.md §
// Log events) into a timeline entry, at the time the line says.
func logEvent(pod string, l cluster.LogLine, at func(time.Time) float64) (Entry, bool) {
	var fields map[string]any
	if json.Unmarshal([]byte(l.Text), &fields) != nil {
		return Entry{}, false
	}
	name, _ := fields["event"].(string)
	ts, _ := fields["time"].(string)
	t, err := time.Parse(time.RFC3339Nano, ts)
	if name == "" || err != nil || name == "request" {
		return Entry{}, false
	}
	detail := map[string]string{}
	for k, v := range fields {
		if k == "event" || k == "time" || k == "pod" || k == "config" {
			continue
		}
		b, _ := json.Marshal(v)
		detail[k] = string(bytes.Trim(b, `"`))
	}
	return Entry{AtMS: at(t), Source: "pod", Kind: name, Pod: pod, Detail: detail}, true
}

// readEvents decodes the load generator's event lines.
func readEvents(data []byte) ([]load.Event, error) {
	var events []load.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var e load.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("read load events: %w", err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

func ptr[T any](v T) *T { return &v }
