package scenario

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	// Action is the action's kind (docs/scenario.md).
	Action string `json:"action,omitempty"`
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

// Run is one repetition: its figures (docs/lab.md, results.json) and its
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
	// Capacity is the fewest ready pods of the Deployment from the
	// action's start to the run's end.
	Capacity *Capacity `json:"capacity,omitempty"`
	// BackOffs are the CrashLoopBackOff waits that began after the
	// action's start, in order.
	BackOffs []BackOff `json:"backOffs,omitempty"`
	// Evictions counts the eviction API's answers after the action's
	// start; absent when it was not called.
	Evictions *Evictions `json:"evictions,omitempty"`
	// Drain is a drain action's outcome.
	Drain *DrainOutcome `json:"drain,omitempty"`
	// Outage is an outage action's span.
	Outage *Outage `json:"outage,omitempty"`
	// RecoverMS is, after an outage, from its end to the moment from which
	// every request succeeded and every pod of the Deployment was ready;
	// absent when that moment did not come within the run.
	RecoverMS *float64 `json:"recoverMs,omitempty"`
	// RolledBackMS is when a set-env rollout that had not completed within
	// the action's timeout was rolled back; absent if it was not.
	RolledBackMS *float64 `json:"rolledBackMs,omitempty"`
	// Running are the Deployment's pods that ran when the run's recording
	// began, in the order they started, as the cluster's events before
	// it left them: the timeline holds none of their start. Absent when
	// the recording saw none start (a Deployment that ran before
	// `rollout --kube` has its pods listed without events) and in results
	// files written before the field existed.
	Running []RunningPod `json:"running,omitempty"`
	// Timeline is every cluster event, pod log event, failed request and
	// step of the runner's action of the run, in order.
	Timeline []Entry `json:"timeline"`
}

// RunningPod is a pod that ran when a run's recording began.
type RunningPod struct {
	Name string `json:"name"`
	Node string `json:"node,omitempty"`
	// IP is its address, from its pod_started event: the endpoints
	// events of the timeline name it by it.
	IP string `json:"ip,omitempty"`
	// Ready is its Ready condition then.
	Ready bool `json:"ready"`
}

// Capacity is the fewest ready pods of a Deployment during a run, against
// its spec.replicas. A pod counts from its pod_ready event until it is
// unready, terminating or deleted: a terminating pod never counts, even if
// it still answers.
type Capacity struct {
	MinReady int `json:"minReady"`
	Replicas int `json:"replicas"`
	// Allowed is, when the action is a rollout (rollout-restart, set-env),
	// the fewest ready pods the Deployment's strategy lets it leave:
	// spec.replicas less maxUnavailable as the deployment controller
	// resolves it ([cluster.ResolveFenceposts]), 0 for a Recreate
	// strategy. A MinReady below it is worse than the strategy promises.
	// Absent for the other actions, which the strategy does not govern,
	// and in results files written before the field existed.
	Allowed *int `json:"allowed,omitempty"`
	// AtMS is when the count first fell to MinReady; 0 when it was there
	// at the action's start.
	AtMS float64 `json:"atMs"`
}

// BackOff is one CrashLoopBackOff wait of a container.
type BackOff struct {
	AtMS float64 `json:"atMs"`
	Pod  string  `json:"pod"`
	// DelayMS is the wait before the restart, as the kubelet computed it:
	// the back-off (10 s, 20 s, 40 s … by Kubernetes' rule) less the time
	// since the exit.
	DelayMS float64 `json:"delayMs"`
}

// Evictions counts the eviction API's answers.
type Evictions struct {
	// Accepted counts pods evicted; Refused, evictions refused (429) by a
	// PodDisruptionBudget, each retry of a drain included.
	Accepted int `json:"accepted"`
	Refused  int `json:"refused"`
}

// DrainOutcome is how a drain ended.
type DrainOutcome struct {
	Node string `json:"node"`
	// Drained reports whether every pod of the node was gone before the
	// timeout; if not, the drain was blocked and given up.
	Drained bool `json:"drained"`
	// EndMS is when the drain ended, drained or given up.
	EndMS float64 `json:"endMs"`
	// TimeoutMS is the drain's timeout; 0 for none.
	TimeoutMS float64 `json:"timeoutMs"`
}

// Outage is when a dependency outage lasted, and how it failed.
type Outage struct {
	// Mode is refuse or blackhole.
	Mode    string  `json:"mode"`
	StartMS float64 `json:"startMs"`
	EndMS   float64 `json:"endMs"`
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
	// On a cluster whose kubelet does not report the signal (a real
	// one), it is when the pod logged receiving it, if it did.
	SigtermMS *float64 `json:"sigtermMs,omitempty"`
	// LastRequestMS is when the last request the pod answered reached it
	// (its connection was made); absent if it answered none in the run,
	// or if the run's requests could not be attributed to pods.
	LastRequestMS *float64 `json:"lastRequestMs,omitempty"`
	// GapMS is SIGTERM's time minus the last request's: positive when the
	// traffic left the pod before the signal.
	GapMS *float64 `json:"gapMs,omitempty"`
	// LastNewConnectionMS is when the last request the pod answered on a
	// new connection reached it, absent as LastRequestMS is or if every
	// request it answered came on a connection kept alive from before. A
	// new connection reaches a terminating pod only while the routing
	// still sends it traffic, so this, unlike LastRequestMS, is the end of
	// the endpoint propagation: kept-alive connections stay on their pod
	// until it closes them.
	LastNewConnectionMS *float64 `json:"lastNewConnectionMs,omitempty"`
	// AfterSigterm counts the requests the pod answered that reached it
	// after SIGTERM; absent (unknown) if the run's answered requests could
	// not be attributed to pods, none of them. A request is the pod's when
	// the response's X-Pod-Name names it or, without the header, when its
	// connection reached the address the pod had then.
	AfterSigterm *int `json:"afterSigterm,omitempty"`
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
	// Source is cluster, pod (a log event of a pod), client (a failed
	// request) or runner (a step of the action, one of the Runner kinds).
	Source string `json:"source"`
	// Kind is the event kind, log event name, failure class or runner
	// step.
	Kind string `json:"kind"`
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
	// Detail holds the event's fields.
	Detail map[string]string `json:"detail,omitempty"`
}

// The kinds of the timeline entries of Source "runner": the steps of an
// action that the cluster's events do not show, each at the moment the
// runner took it. The runner sets the figures of a step (Outage, Drain,
// RolledBackMS) from the same entries.
const (
	// RunnerOutageStarted is when the dependency went down; Detail has
	// its mode.
	RunnerOutageStarted = "outage_started"
	// RunnerOutageEnded is when the dependency was up again; Detail has
	// its mode.
	RunnerOutageEnded = "outage_ended"
	// RunnerDrainStarted is when the drain of Node began; Detail has its
	// timeout, if any.
	RunnerDrainStarted = "drain_started"
	// RunnerDrainEnded is when the drain of Node ended; Detail's drained
	// is true if every pod was gone, false if it was given up at its
	// timeout.
	RunnerDrainEnded = "drain_ended"
	// RunnerEnvApplied is when the Deployment with the set-env action's
	// variables was applied; Detail has the variables.
	RunnerEnvApplied = "env_applied"
	// RunnerRolledBack is when the Deployment's previous template was
	// applied again because the set-env rollout had not completed within
	// its timeout; Detail has the timeout.
	RunnerRolledBack = "rolled_back"
)

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// figures computes a run's figures from the load report, the load's event
// lines, the cluster events and the pods' log lines, all recorded between
// the start of the run's traffic and its end, and addrs, the addresses of
// the pods, those that started before the run included.
//
// A request a pod answered (OK or 5xx) is attributed to it by the
// response's X-Pod-Name header, which `closingtime serve` sets; without
// one, by the address its connection reached (load.Event's Addr), which is
// a pod's when the traffic went through a routing view that picks the
// endpoint (the embedded cluster's, `closingtime cluster`'s) and the
// Service's through a real cluster's kube-proxy. When requests were
// answered and none could be attributed, the old pods' request figures
// are left unknown (nil); when none was answered, they are known zeros.
func figures(run *Run, report *load.Report, requests []load.Event, events []cluster.Event, addrs podAddresses, logs map[string][]cluster.LogLine, goneAt time.Time) {
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
		at     time.Time
		pod    string
		reused bool // on a connection that had carried a request before
	}
	var answered []served
	unattributed := 0 // answered requests that no pod could be given
	for _, r := range requests {
		t, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			continue
		}
		reached := t.Add(load.DurationMS(r.ConnectMS))
		if r.Class == load.OK || r.Class == load.HTTP5xx {
			if pod := cmp.Or(r.Pod, addrs.pod(r.Addr, reached)); pod != "" {
				answered = append(answered, served{reached, pod, r.Reused})
			} else {
				unattributed++
			}
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
		if p.sigterm.IsZero() {
			// A real cluster's kubelet reports no signal: the pod's own
			// log says when it received it, if the pod logs that.
			p.sigterm = loggedSigterm(logs[name], start)
		}
		old := OldPod{Name: name, ExitCode: p.code}
		if !p.exited.IsZero() {
			old.DrainMS = ms(p.exited.Sub(p.terminating))
		}
		var last, lastNew time.Time
		after := 0
		for _, a := range answered {
			if a.pod != name {
				continue
			}
			if a.at.After(last) {
				last = a.at
			}
			if !a.reused && a.at.After(lastNew) {
				lastNew = a.at
			}
			if !p.sigterm.IsZero() && a.at.After(p.sigterm) {
				after++
			}
		}
		if len(answered) > 0 || unattributed == 0 {
			old.AfterSigterm = &after
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
		if !lastNew.IsZero() {
			old.LastNewConnectionMS = ptr(at(lastNew))
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

// podAddresses tells which pod had an address when: for each address, the
// pods that started with it, in order. Kubernetes can give a deleted pod's
// address to a new one.
type podAddresses map[netip.Addr][]podAddress

type podAddress struct {
	since time.Time
	pod   string
}

// podAddressesOf reads the pods' addresses from the "ip" field of the
// pod_started events of events, in order.
func podAddressesOf(events []cluster.Event) podAddresses {
	m := podAddresses{}
	for _, e := range events {
		if e.Kind != cluster.PodStarted {
			continue
		}
		ip, err := netip.ParseAddr(e.Fields["ip"])
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		m[ip] = append(m[ip], podAddress{e.Time, e.Pod})
	}
	return m
}

// pod returns the pod that had the host of addr ("host:port") at t: the
// last to start with it by then. It returns "" for an address no pod had,
// such as a Service's ClusterIP.
func (m podAddresses) pod(addr string, t time.Time) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ""
	}
	pod := ""
	for _, pa := range m[ap.Addr().Unmap()] {
		if pa.since.After(t) {
			break
		}
		pod = pa.pod
	}
	return pod
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

// loggedSigterm returns when a pod's log, lines, says that it received
// SIGTERM (a "sigterm" event of `closingtime serve`) at or after start;
// zero if it does not.
func loggedSigterm(lines []cluster.LogLine, start time.Time) time.Time {
	for _, l := range lines {
		var logged time.Time // the time the line says
		at := func(t time.Time) float64 { logged = t; return 0 }
		if e, ok := logEvent("", l, at); ok && e.Kind == "sigterm" && !logged.Before(start) {
			return logged
		}
	}
	return time.Time{}
}

func ptr[T any](v T) *T { return &v }

// disruption computes a run's capacity, back-offs, evictions and, after an
// outage, recovery, from every event of the cluster (those before the run
// give the state at its start) and the run's timeline of failed requests.
// deployment names the Deployment, of replicas pods; allowed is the
// capacity's Allowed, nil for none.
func disruption(run *Run, events []cluster.Event, deployment string, replicas int32, allowed *int) {
	start := run.Start
	at := func(t time.Time) float64 { return ms(t.Sub(start)) }
	tr := newReadiness(deployment)
	var capacity *Capacity
	var evictions Evictions
	var fullSince time.Time // when every pod was last ready again; zero while not
	for _, e := range events {
		after := !e.Time.Before(start)
		if after && capacity == nil {
			capacity = &Capacity{MinReady: tr.ready(), Replicas: int(replicas)}
		}
		tr.add(e)
		n := tr.ready()
		switch {
		case n < int(replicas):
			fullSince = time.Time{}
		case fullSince.IsZero():
			fullSince = e.Time
		}
		if !after {
			continue
		}
		if n < capacity.MinReady {
			capacity.MinReady, capacity.AtMS = n, at(e.Time)
		}
		switch e.Kind {
		case cluster.BackOff:
			d, err := time.ParseDuration(e.Fields["delay"])
			if err == nil {
				run.BackOffs = append(run.BackOffs, BackOff{AtMS: at(e.Time), Pod: e.Pod, DelayMS: ms(d)})
			}
		case cluster.PodEvicted:
			evictions.Accepted++
		case cluster.EvictionRefused:
			evictions.Refused++
		}
	}
	if capacity == nil {
		capacity = &Capacity{MinReady: tr.ready(), Replicas: int(replicas)}
	}
	capacity.Allowed = allowed
	run.Capacity = capacity
	if evictions != (Evictions{}) || run.Drain != nil {
		run.Evictions = &evictions
	}
	if run.Outage == nil || tr.ready() < int(replicas) {
		return
	}
	recovered := at(fullSince)
	for _, e := range run.Timeline {
		if e.Source == "client" {
			recovered = max(recovered, e.AtMS)
		}
	}
	run.RecoverMS = ptr(max(0, recovered-run.Outage.EndMS))
}

// rolloutAllowed returns the Capacity.Allowed of a run of action on d,
// of replicas pods: nil unless the action is a rollout, or if d's
// strategy does not resolve.
func rolloutAllowed(d *appsv1.Deployment, replicas int32, action string) *int {
	if action != ActionRolloutRestart && action != ActionSetEnv {
		return nil
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return ptr(0)
	}
	var surge, unavailable *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		surge, unavailable = ru.MaxSurge, ru.MaxUnavailable
	}
	_, u, err := cluster.ResolveFenceposts(surge, unavailable, replicas)
	if err != nil {
		return nil
	}
	return ptr(max(0, int(replicas-u)))
}

// runningOf returns the pods of Deployment d that events, a recording's
// events before a run, leave running: started, not terminating nor gone,
// in the order they started.
func runningOf(events []cluster.Event, d string) []RunningPod {
	tr := newReadiness(d)
	var order []string
	started := map[string]RunningPod{}
	for _, e := range events {
		tr.add(e)
		if e.Kind == cluster.PodStarted && tr.ours[e.Pod] {
			if _, ok := started[e.Pod]; !ok {
				order = append(order, e.Pod)
			}
			started[e.Pod] = RunningPod{Name: e.Pod, Node: e.Node, IP: e.Fields["ip"]}
		}
	}
	var pods []RunningPod
	for _, name := range order {
		if !tr.ended[name] {
			p := started[name]
			p.Ready = tr.readyNow[name]
			pods = append(pods, p)
		}
	}
	return pods
}

// readiness follows the Ready condition of one Deployment's pods through a
// cluster's events, from its first.
type readiness struct {
	// rs prefixes the Object of the pod_created events of the
	// Deployment's pods: ReplicaSet/NAME-HASH, where HASH, the
	// pod-template-hash, has no dash.
	rs       string
	ours     map[string]bool
	readyNow map[string]bool
	ended    map[string]bool // terminating or deleted: never ready again
}

func newReadiness(deployment string) *readiness {
	return &readiness{rs: "ReplicaSet/" + deployment + "-", ours: map[string]bool{}, readyNow: map[string]bool{}, ended: map[string]bool{}}
}

// add takes the next event.
func (r *readiness) add(e cluster.Event) {
	switch e.Kind {
	case cluster.PodCreated:
		if hash, ok := strings.CutPrefix(e.Object, r.rs); ok && hash != "" && !strings.Contains(hash, "-") {
			r.ours[e.Pod] = true
		}
	case cluster.PodReady:
		if r.ours[e.Pod] && !r.ended[e.Pod] {
			r.readyNow[e.Pod] = true
		}
	case cluster.PodUnready:
		delete(r.readyNow, e.Pod)
	case cluster.PodTerminating, cluster.PodDeleted, cluster.PodTerminated:
		delete(r.readyNow, e.Pod)
		r.ended[e.Pod] = true
	}
}

// ready returns how many of the Deployment's pods are ready and not
// terminating.
func (r *readiness) ready() int { return len(r.readyNow) }
