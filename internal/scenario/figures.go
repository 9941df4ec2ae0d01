package scenario

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/results"
)

func totalsOf(c load.Counts, absorbed int64) results.Totals {
	return results.Totals{
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

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// figures computes a run's figures from the load report, the results of
// the load's requests, the cluster events and the pods' log lines, all
// recorded between the start of the run's traffic and its end, and addrs,
// the addresses of the pods, those that started before the run included.
//
// A request a pod answered (OK or 5xx) is attributed to it by the
// response's X-Pod-Name header, which `closingtime serve` sets; without
// one, by the address its connection reached (load.Result's Addr), which
// is a pod's when the traffic went through a routing view that picks the
// endpoint (the embedded cluster's, `closingtime cluster`'s) and the
// Service's through a real cluster's kube-proxy. When requests were
// answered and none could be attributed, the old pods' request figures
// are left unknown (nil); when none was answered, they are known zeros.
//
// It returns the failed and absorbed requests, with what the client saw
// of each, for the diagnosis to join to the timeline.
func figures(run *results.Run, report *load.Report, requests []load.Result, events []cluster.Event, addrs podAddresses, logs map[string][]cluster.LogLine, proxies proxyLogs, goneAt time.Time) []results.Request {
	start := run.Start
	at := func(t time.Time) float64 { return ms(t.Sub(start)) }
	ingressCalls, sidecarCalls := proxyCalls{}, proxyCalls{}
	for pod, lines := range proxies.ingress {
		var before *results.Entry // the last endpoints before the timeline's minute
		for _, l := range lines {
			ev, ok := parseProxyEvent(l)
			switch {
			case !ok:
			case ev.Event == "request":
				ingressCalls.add(ev, at)
			case ev.Event == "endpoints":
				e := ev.endpoints(pod, at)
				if l.Time.Before(start.Add(-time.Minute)) {
					before = &e
					continue
				}
				if before != nil {
					// What the ingress routed to when the timeline
					// begins: it logs a change only.
					run.Timeline = append(run.Timeline, *before)
					before = nil
				}
				run.Timeline = append(run.Timeline, e)
			}
		}
		if before != nil {
			run.Timeline = append(run.Timeline, *before)
		}
	}
	for _, lines := range proxies.sidecars {
		for _, l := range lines {
			if ev, ok := parseProxyEvent(l); ok && ev.Event == "request" {
				sidecarCalls.add(ev, at)
			}
		}
	}
	for _, c := range report.Clients {
		run.Totals.Add(totalsOf(c.Totals, c.Absorbed.Total()))
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
	var failed []results.Request
	unattributed := 0 // answered requests that no pod could be given
	for _, r := range requests {
		if f, ok := failedRequest(&r, at); ok {
			if f.Proxy != "" && f.Upstreams == "" {
				// The pod's own proxy answered.
				f.Attempts = sidecarCalls.near(f.ID, f.FailedMS)
			} else if attempts := ingressCalls.near(f.ID, f.FailedMS); len(attempts) > 0 {
				f.Attempts = attempts
				f.Upstreams = cmp.Or(f.Upstreams, proxy.UpstreamAddrs(attempts))
			}
			failed = append(failed, f)
		}
		t := r.Time
		reached := t.Add(r.Connect)
		// A proxy's own 5xx (its upstream refused, reset or was slow) was
		// not served by the pod's server, though the pod's address took it.
		if (r.Class == load.OK || r.Class == load.HTTP5xx) && r.Proxy == "" {
			if pod := cmp.Or(r.Pod, addrs.pod(r.Addr, reached)); pod != "" {
				answered = append(answered, served{reached, pod, r.Reused()})
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
			why := ""
			if r.Err != nil {
				why = r.Err.Error()
			}
			run.Timeline = append(run.Timeline, results.Entry{AtMS: at(t), Source: results.SourceClient, Kind: r.Class.String(),
				Detail: map[string]string{"client": r.Client.String(), "id": r.ID, "error": why}})
		}
	}
	for sec, c := range seconds {
		if c.Failed() > 0 {
			run.FailedSeconds = append(run.FailedSeconds, results.FailedSecond{Second: sec, Counts: *c})
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
		run.Timeline = append(run.Timeline, results.Entry{AtMS: at(e.Time), Source: results.SourceCluster, Kind: string(e.Kind), Pod: e.Pod, Container: e.Container, Node: e.Node, Detail: withObject(e), Endpoints: e.Endpoints})
		if e.Kind == cluster.ContainerStarted {
			if n, _ := strconv.Atoi(e.Fields["restart"]); n > 0 {
				run.Restarts++
			}
		}
		if e.Time.Before(start) {
			continue
		}
		p := pods[e.Pod]
		if cluster.BesideServer(e.Fields) {
			// Not the pod's server.
			continue
		}
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
			if p != nil && !cluster.InitDone(e.Kind, e.Fields) {
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
		old := results.OldPod{Name: name, ExitCode: p.code}
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
		if (len(answered) > 0 || unattributed == 0) && !p.sigterm.IsZero() {
			old.AfterSigterm = &after
		}
		if !p.sigterm.IsZero() {
			old.SigtermMS = ptr.To(at(p.sigterm))
		}
		if !last.IsZero() {
			old.LastRequestMS = ptr.To(at(last))
			if !p.sigterm.IsZero() {
				old.GapMS = ptr.To(ms(p.sigterm.Sub(last)))
			}
		}
		if !lastNew.IsZero() {
			old.LastNewConnectionMS = ptr.To(at(lastNew))
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
	return failed
}

// failedRequest returns what the client saw of request r for the
// diagnosis, if r failed or a retry absorbed its failure: the attempt
// that failed (the last of a failed request, the first of an absorbed
// one), with times as at gives them.
func failedRequest(r *load.Result, at func(time.Time) float64) (results.Request, bool) {
	a, ok := r.FailedAttempt()
	if !ok {
		return results.Request{}, false
	}
	offset := func(d time.Duration) float64 { return at(r.Time.Add(d)) }
	f := results.Request{ID: r.ID, Client: r.Client, AtMS: at(r.Time), Class: a.Class, Proxy: a.Proxy, Upstreams: a.Upstreams, Absorbed: r.Absorbed(),
		FailedMS: offset(a.Total), ConnRequests: a.ConnRequests, ConnAgeMS: ms(a.ConnAge)}
	if a.Err != nil {
		f.Error = a.Err.Error()
	}
	if a.Addr.IsValid() {
		f.Addr = a.Addr.String()
	}
	if a.Class == load.HTTP5xx && !r.Absorbed() {
		// The response that named the pod is the failed one's.
		f.Pod = r.Pod
	}
	// A connect that failed failed when the attempt did, unless the
	// attempt says when it was tried: a gRPC channel fails its calls
	// with its last connect's error, which began when it did, maybe
	// before the call.
	f.ConnectMS = f.FailedMS
	if a.Connect != 0 {
		f.ConnectMS = offset(a.Connect)
	}
	if p := r.Reprobe; p != nil {
		f.Reprobe = &results.Reprobe{Class: p.Class, Pod: p.Pod, Status: p.Status, AtMS: offset(p.At)}
		if p.Addr.IsValid() {
			f.Reprobe.Addr = p.Addr.String()
		}
	}
	return f, true
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

// pod returns the pod that had the IP address of addr at t: the last to
// start with it by then. It returns "" for an address no pod had, such as
// a Service's ClusterIP, or the zero AddrPort.
func (m podAddresses) pod(addr netip.AddrPort, t time.Time) string {
	pod := ""
	for _, pa := range m[addr.Addr().Unmap()] {
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
func logEvent(pod string, l cluster.LogLine, at func(time.Time) float64) (results.Entry, bool) {
	var fields map[string]any
	if json.Unmarshal([]byte(l.Text), &fields) != nil {
		return supervisordEvent(pod, l, at)
	}
	name, _ := fields["event"].(string)
	ts, _ := fields["time"].(string)
	t, err := time.Parse(time.RFC3339Nano, ts)
	if name == "" || err != nil || name == "request" {
		return results.Entry{}, false
	}
	detail := map[string]string{}
	for k, v := range fields {
		if k == "event" || k == "time" || k == "pod" || k == "config" {
			continue
		}
		b, _ := json.Marshal(v)
		detail[k] = string(bytes.Trim(b, `"`))
	}
	return results.Entry{AtMS: at(t), Source: results.SourcePod, Kind: name, Pod: pod, Detail: detail}, true
}

// proxyLogs are the logs of the proxies in the requests' path: of the
// pods of an ingress in front of the workload, and of the sidecars of the
// workload's pods, by pod.
type proxyLogs struct {
	ingress, sidecars map[string][]cluster.LogLine
}

// proxyEvent is one JSON log line of `closingtime proxy` (docs/proxy.md §
// Log events), the fields the figures read.
type proxyEvent struct {
	Event    string
	Time     time.Time
	ID       string
	Service  string
	Ready    []proxy.Endpoint
	Attempts []proxy.Attempt
}

// parseProxyEvent reads l as a proxy's log event.
func parseProxyEvent(l cluster.LogLine) (proxyEvent, bool) {
	var ev proxyEvent
	return ev, json.Unmarshal([]byte(l.Text), &ev) == nil && ev.Event != ""
}

// endpoints returns an "endpoints" event of the ingress's pod as a
// timeline entry, at the time it says, with the Ready endpoints its
// balancer took.
func (ev proxyEvent) endpoints(pod string, at func(time.Time) float64) results.Entry {
	e := results.Entry{AtMS: at(ev.Time), Source: results.SourceIngress, Kind: ev.Event, Pod: pod,
		Detail: map[string]string{"service": ev.Service}, Endpoints: cluster.Endpoints{List: []cluster.Endpoint{}}}
	for _, ep := range ev.Ready {
		if a, err := netip.ParseAddrPort(ep.Addr); err == nil {
			e.Endpoints.List = append(e.Endpoints.List, cluster.Endpoint{Address: a.Addr().String(), Ready: true, Serving: true})
		}
	}
	return e
}

// proxyCalls are the requests a proxy logged, by their id: a client's
// retries send one id more than once.
type proxyCalls map[string][]proxyCall

// proxyCall is one request event: when it was logged, and its attempts.
type proxyCall struct {
	atMS     float64
	attempts []proxy.Attempt
}

// add takes a "request" event.
func (pc proxyCalls) add(ev proxyEvent, at func(time.Time) float64) {
	if ev.ID != "" && len(ev.Attempts) > 0 {
		pc[ev.ID] = append(pc[ev.ID], proxyCall{at(ev.Time), ev.Attempts})
	}
}

// near returns the attempts of the request id that a proxy logged nearest
// failedMS, when the client saw its attempt fail; nil if none.
func (pc proxyCalls) near(id string, failedMS float64) []proxy.Attempt {
	var best *proxyCall
	for i, c := range pc[id] {
		if best == nil || math.Abs(c.atMS-failedMS) < math.Abs(best.atMS-failedMS) {
			best = &pc[id][i]
		}
	}
	if best == nil {
		return nil
	}
	return best.attempts
}

// supervisordLine matches a line of supervisord's own log: its time, level
// and message.
var supervisordLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ (.*)$`)

// supervisordEvent reads a line of supervisord's log
// (docs/local-cluster.md § supervisord) into a timeline entry, at the time the kubelet read it:
// supervisord writes its local time without a zone. The steps of a stop
// are "received SIGTERM" (supervisord_signal), "waiting for a, b to die"
// (programs_stopping), "stopped: NAME (exit status N)" or "(terminated by
// SIGKILL)" (program_stopped), and "spawned: 'NAME'" (program_started).
func supervisordEvent(pod string, l cluster.LogLine, at func(time.Time) float64) (results.Entry, bool) {
	m := supervisordLine.FindStringSubmatch(l.Text)
	if m == nil {
		return results.Entry{}, false
	}
	e := results.Entry{AtMS: at(l.Time), Source: results.SourcePod, Pod: pod}
	msg := m[1]
	switch {
	case strings.HasPrefix(msg, "received SIG"):
		sig, _, _ := strings.Cut(strings.TrimPrefix(msg, "received "), " ")
		e.Kind, e.Detail = "supervisord_signal", map[string]string{"signal": sig}
	case strings.HasPrefix(msg, "waiting for ") && strings.HasSuffix(msg, " to die"):
		names := strings.TrimSuffix(strings.TrimPrefix(msg, "waiting for "), " to die")
		e.Kind, e.Detail = "programs_stopping", map[string]string{"programs": strings.ReplaceAll(names, " ", "")}
	case strings.HasPrefix(msg, "stopped: "):
		name, how, _ := strings.Cut(strings.TrimPrefix(msg, "stopped: "), " ")
		e.Kind, e.Detail = "program_stopped", map[string]string{"program": name, "how": strings.Trim(how, "()")}
	case strings.HasPrefix(msg, "spawned: '"):
		name, _, _ := strings.Cut(strings.TrimPrefix(msg, "spawned: '"), "'")
		e.Kind, e.Detail = "program_started", map[string]string{"program": name}
	default:
		return results.Entry{}, false
	}
	return e, true
}

// loggedSigterm returns when a pod's log, lines, says that it received
// SIGTERM (a "sigterm" event of `closingtime serve`, or "wrapper_signal"
// of its wrapper, or supervisord's "received SIGTERM": each, as the
// container's first process, gets the signal)
// at or after start; zero if it does not.
func loggedSigterm(lines []cluster.LogLine, start time.Time) time.Time {
	for _, l := range lines {
		var logged time.Time // the time the line says
		at := func(t time.Time) float64 { logged = t; return 0 }
		if e, ok := logEvent("", l, at); ok && (e.Kind == "sigterm" || e.Kind == "wrapper_signal" || e.Kind == "supervisord_signal" && e.Detail["signal"] == "SIGTERM") &&
			!logged.Before(start) {
			return logged
		}
	}
	return time.Time{}
}

// disruption computes a run's capacity, back-offs, evictions and, after an
// outage, recovery, from every event of the cluster (those before the run
// give the state at its start) and the run's timeline of failed requests.
// deployment names the Deployment, of replicas pods; allowed is the
// capacity's Allowed, nil for none.
func disruption(run *results.Run, events []cluster.Event, deployment string, replicas int32, allowed *int) {
	start := run.Start
	at := func(t time.Time) float64 { return ms(t.Sub(start)) }
	tr := newReadiness(deployment)
	var capacity *results.Capacity
	var evictions results.Evictions
	var fullSince time.Time // when every pod was last ready again; zero while not
	for _, e := range events {
		after := !e.Time.Before(start)
		if after && capacity == nil {
			capacity = &results.Capacity{MinReady: tr.ready(), Replicas: int(replicas)}
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
				run.BackOffs = append(run.BackOffs, results.BackOff{AtMS: at(e.Time), Pod: e.Pod, DelayMS: ms(d)})
			}
		case cluster.PodEvicted:
			evictions.Accepted++
		case cluster.EvictionRefused:
			evictions.Refused++
		}
	}
	if capacity == nil {
		capacity = &results.Capacity{MinReady: tr.ready(), Replicas: int(replicas)}
	}
	capacity.Allowed = allowed
	run.Capacity = capacity
	if evictions != (results.Evictions{}) || run.Drain != nil {
		run.Evictions = &evictions
	}
	if run.Outage == nil || tr.ready() < int(replicas) {
		return
	}
	recovered := at(fullSince)
	for _, e := range run.Timeline {
		if e.Source == results.SourceClient {
			recovered = max(recovered, e.AtMS)
		}
	}
	run.RecoverMS = ptr.To(max(0, recovered-run.Outage.EndMS))
}

// rolloutAllowed returns the Capacity.Allowed of a run of action on d,
// of replicas pods: nil unless the action is a rollout, or if d's
// strategy does not resolve.
func rolloutAllowed(d *appsv1.Deployment, replicas int32, action string) *int {
	if action != ActionRolloutRestart && action != ActionSetEnv {
		return nil
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return ptr.To(0)
	}
	var surge, unavailable *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		surge, unavailable = ru.MaxSurge, ru.MaxUnavailable
	}
	_, u, err := cluster.ResolveFenceposts(surge, unavailable, replicas)
	if err != nil {
		return nil
	}
	return ptr.To(max(0, int(replicas-u)))
}

// runningOf returns the pods of Deployment d that events, a recording's
// events before a run, leave running: started, not terminating nor gone,
// in the order they started.
func runningOf(events []cluster.Event, d string) []results.RunningPod {
	tr := newReadiness(d)
	var order []string
	started := map[string]results.RunningPod{}
	for _, e := range events {
		tr.add(e)
		switch {
		case e.Kind == cluster.PodStarted && tr.ours[e.Pod]:
			if _, ok := started[e.Pod]; !ok {
				order = append(order, e.Pod)
			}
			started[e.Pod] = results.RunningPod{Name: e.Pod, Node: e.Node, IP: e.Fields["ip"]}
		case e.Kind == cluster.ContainerStarted && tr.ours[e.Pod]:
			if p, ok := started[e.Pod]; ok {
				p.PIDNamespace = e.Fields["pid_namespace"]
				started[e.Pod] = p
			}
		}
	}
	var pods []results.RunningPod
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
