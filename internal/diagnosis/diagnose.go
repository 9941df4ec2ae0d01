package diagnosis

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// The windows that tie a failure to what a pod did, in milliseconds. A
// request cut by its server's exit fails the moment the kernel closes the
// socket; the backend stamps the exit when it learns of it, a little
// before or after the client does.
const (
	// exitBefore and exitAfter bound how long before a failure, and
	// after it, the exit that cut it can be stamped.
	exitBefore = 1000
	exitAfter  = 500
	// convergedWithin is how close to the stop signal a pod's last request
	// on a new connection must come for the routing to be found not yet
	// converged where no routing view shows it (a real cluster).
	convergedWithin = 1000
	// closedBeforeExit is how long before its server's exit a request on
	// a kept-alive connection must fail for the server to have closed
	// the connection itself, draining, rather than its exit to have cut
	// it: an exit closes the sockets at once.
	closedBeforeExit = 50
	// outageAfter is how long after a dependency outage's end a 5xx or a
	// response timeout is still its: requests sent just before the end
	// are answered after it.
	outageAfter = 1000
)

// Diagnose joins requests, the failed and absorbed requests of run with
// the client's evidence (their Pod set only from a response's X-Pod-Name),
// to run's timeline, and gives each its cause. The requests are copied;
// any join and cause they had is replaced, so a run read back from a file
// is diagnosed by the rules of this version. It returns nil when there
// is nothing to tell: no request and no finding.
func Diagnose(run *results.Run, requests []results.Request) *results.Diagnosis {
	h := newHistory(run)
	d := &results.Diagnosis{Requests: make([]results.Request, len(requests))}
	viaService := false
	// What the requests show of their pods' listeners after the signal
	// (observe) is evidence for the causes of all of them: join them all
	// first.
	for i, r := range requests {
		r = joined(h, r)
		if r.PodInferred || (r.Addr != "" && r.Pod == "" && !h.formerPod(r.Addr)) {
			viaService = true
		}
		d.Requests[i] = r
		h.observe(&r)
	}
	for i := range d.Requests {
		d.Requests[i].Cause = cause(h, &d.Requests[i])
	}
	d.Causes = count(d.Requests)
	d.Findings = append(findings(h, run.OldPods, d.Requests), pinned(h, run)...)
	if !h.signals && h.terminated() && len(requests) > 0 {
		d.Limits = append(d.Limits, "the cluster does not report the stop signal: a pod's own log tells when it got SIGTERM, if it logs it, its termination's start if not, and a terminating pod that refused a connection is taken to have had it")
	}
	if len(h.nodes) == 0 && len(requests) > 0 {
		d.Limits = append(d.Limits, "the cluster shows no node's routing view: a routing race is told from the EndpointSlices' changes, not from the rules each node had applied")
	}
	if viaService {
		d.Limits = append(d.Limits, "connections went to the Service's address: the pod behind a failed connection is inferred from the pods that stopped or were listed then, not seen")
	}
	if len(d.Requests) == 0 && len(d.Findings) == 0 {
		return nil
	}
	return d
}

// joined returns r with the pod it reached and what the timeline says of
// it.
func joined(h *history, r results.Request) results.Request {
	if r.Class != load.HTTP5xx || r.PodInferred {
		// Only a response names its pod; the rest is this join's.
		r.Pod = ""
	}
	r.AtConnect, r.AtFailure, r.Published, r.RoutedBy, r.PodInferred = results.PodState{}, results.PodState{}, nil, nil, false
	made := r.MadeMS()
	if r.Pod == "" && r.Upstreams != "" {
		r.Pod = h.ingressPod(&r)
	}
	addr, err := netip.ParseAddrPort(r.Addr)
	if r.Pod == "" && err == nil && r.Upstreams == "" {
		r.Pod = h.podAt(addr.Addr(), made)
	}
	r.ReadyEndpoints = h.readyEndpoints(r.ConnectMS)
	if r.Pod == "" && err == nil {
		// Through a Service's address: a pod that stopped then, or the
		// one the endpoints listed.
		r.Pod = h.infer(&r)
		r.PodInferred = r.Pod != ""
	}
	ph := h.pods[r.Pod]
	if ph == nil {
		return r
	}
	r.AtConnect, r.AtFailure = ph.at(made).PodState, ph.at(r.FailedMS).PodState
	if ip := h.ipOf(r.Pod); ip != "" {
		r.Published = h.publishedReady(ip, made)
		r.RoutedBy = h.routedBy(ip, made)
	}
	return r
}

// ingressPod returns the pod that an ingress's attempts at request r
// failed on: where its log tells the attempts, that of the first that
// failed at the pod's door (doorFailure), else of the last; where only
// its answer tells them (Upstreams), that of the last, whose failure its
// answer gives. "" if no pod had the address.
func (h *history) ingressPod(r *results.Request) string {
	upstreams := strings.Split(r.Upstreams, ", ")
	addr := upstreams[len(upstreams)-1]
	if a, ok := doorFailure(r.Attempts); ok {
		addr = a.Upstream
	}
	a, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ""
	}
	return h.podAt(a.Addr(), r.MadeMS())
}

// doorFailure returns the first of a proxy's attempts that failed at its
// pod's door, before the pod had any of the request: refused, unreachable,
// a connect that timed out, or one that the client's departure ended.
func doorFailure(attempts []proxy.Attempt) (proxy.Attempt, bool) {
	for _, a := range attempts {
		switch proxy.Reason(a.Outcome) {
		case proxy.UpstreamRefused, proxy.UpstreamUnreachable, proxy.UpstreamConnectTimeout:
			return a, true
		}
		if a.Outcome == "canceled" && !a.Sent {
			return a, true
		}
	}
	return proxy.Attempt{}, false
}

// reusedUpstream reports whether the last of a proxy's attempts, as its
// log tells them, went on a pooled connection: one that had carried a
// request before.
func reusedUpstream(attempts []proxy.Attempt) bool {
	return len(attempts) > 0 && attempts[len(attempts)-1].Cached
}

// ipOf returns pod's address; "" if unknown. A pod keeps its address
// for its life.
func (h *history) ipOf(pod string) string { return h.ips[pod] }

// infer returns the pod that a request through a Service's address most
// likely reached: the only pod whose container exited within the windows
// of a cut of its failure, or, for a refused connection, the only pod
// listed in the EndpointSlices then that could refuse it (signalled, not
// running, or known not to listen); "" if none or several.
func (h *history) infer(r *results.Request) string {
	if r.Class != load.Refused {
		return h.onlyExit(r.FailedMS-exitBefore, r.FailedMS+exitAfter)
	}
	// The pods' states change only at the timeline's entries: the
	// answer holds from one entry to the next.
	step := sort.SearchFloat64s(h.times, math.Nextafter(r.ConnectMS, never))
	if pod, ok := h.refusers[step]; ok {
		return pod
	}
	var found []string
	if listed := latest(h.published, r.ConnectMS); listed != nil {
		for _, name := range h.order {
			ph := h.pods[name]
			s := ph.at(r.ConnectMS)
			refuses := ph.signalAt <= r.ConnectMS || !s.running || (s.Listening != nil && !*s.Listening)
			if refuses && listed.lists(h.ipOf(name)) {
				found = append(found, name)
			}
		}
	}
	pod := ""
	if len(found) == 1 {
		pod = found[0]
	}
	h.refusers[step] = pod
	return pod
}

// onlyExit returns the only pod whose container exited in [from, to];
// "" if none or several.
func (h *history) onlyExit(from, to float64) string {
	i := sort.Search(len(h.exits), func(i int) bool { return h.exits[i].at >= from })
	pod := ""
	for ; i < len(h.exits) && h.exits[i].at <= to; i++ {
		if pod != "" && h.exits[i].pod != pod {
			return ""
		}
		pod = h.exits[i].pod
	}
	return pod
}

// observe notes what request r, joined, shows of its pod's listener
// after the stop signal.
func (h *history) observe(r *results.Request) {
	ph := h.pods[r.Pod]
	if ph == nil || r.PodInferred || r.ConnRequests > 0 || ph.signalInferred || r.ConnectMS < ph.signalAt || !ph.at(r.ConnectMS).running {
		// Only a connection to a running server, after a signal seen,
		// tells of its listener.
		return
	}
	if r.Class == load.Refused {
		ph.refusedAfterSignal = true
	}
}

// terminated reports whether a pod's termination began.
func (h *history) terminated() bool {
	for _, ph := range h.pods {
		if ph.terminatingAt != never {
			return true
		}
	}
	return false
}

// ignored reports whether pod ph ignored its stop signal: it was killed
// at the end of the grace period, and its server, which logs
// closingtime serve's events and so its SIGTERM, did not log it. Of a
// server that logs nothing the run cannot tell: one that goes on
// accepting after SIGTERM may be draining with its listener open.
func (ph *podHistory) ignored() bool {
	killed := slices.ContainsFunc(ph.exits, func(x exit) bool { return x.killed })
	return killed && ph.signalAt != never && ph.logs && !ph.sigtermLogged
}

// reacted reports whether pod ph showed that it got its stop signal: its
// server logged it, or a new connection made after it was refused (the
// listener closed).
func (ph *podHistory) reacted() bool { return ph.sigtermLogged || ph.refusedAfterSignal }

// cause gives joined request r its cause.
// resentPrefix begins the error of an attempt that its client resent by
// itself: load.ErrTransparentRetry's text, and that of the results
// written before it ("retried transparently by grpc-go: …").
const resentPrefix = "retried transparently"

func cause(h *history, r *results.Request) results.Cause {
	if r.Class == load.ConnectTimeout && strings.HasPrefix(r.Error, load.ErrNoFreeConnection.Error()) {
		return NoFreeConnection
	}
	if strings.HasPrefix(r.Error, resentPrefix) {
		return GoawayResend
	}
	if r.Class == load.HTTP5xx || r.Class == load.ResponseTimeout {
		if o := h.outage; o != nil && r.AtMS >= o.StartMS && r.AtMS <= o.EndMS+outageAfter {
			return DependencyDown
		}
	}
	if h.resolves[r.Client] && r.ConnRequests == 0 && r.Published != nil && !*r.Published &&
		(r.Class == load.Refused || r.Class == load.ConnectTimeout || r.Class == load.Error) {
		// The client chose the address itself, from its own lookup,
		// not the routing: a connect to a pod no longer listed.
		return StaleResolution
	}
	ph := h.pods[r.Pod]
	switch {
	case r.Class == load.Refused && ph == nil:
		none := (r.ReadyEndpoints != nil && *r.ReadyEndpoints == 0) || h.unroutable(r.MadeMS())
		if (r.Addr == "" || none) && h.livenessDown(r.ConnectMS) {
			return LivenessRestart
		}
		if r.Addr == "" || none {
			return NoEndpoint
		}
		return Unknown
	case r.Class == load.Refused:
		return h.refused(ph, ph.at(r.ConnectMS), r)
	case r.Class == load.ConnectTimeout && ph != nil && !r.PodInferred:
		return h.unanswered(ph, r)
	case r.Class == load.ConnectTimeout && ph == nil:
		// A pod gone before the run, reached through the connection
		// tracking entry that an earlier connect of the same ports left
		// when it met the pod gone, as unanswered says.
		if h.formerPod(r.Addr) {
			return RoutingRace
		}
		// The REJECT's answer is an ICMP error, which the kernel sends a
		// client at most about once a second: past that, the connect to a
		// Service without endpoints times out.
		if n := r.ReadyEndpoints; (n == nil || *n != 0) && !h.unroutable(r.MadeMS()) {
			return Unknown
		}
		if h.livenessDown(r.MadeMS()) {
			return LivenessRestart
		}
		return NoEndpoint
	case r.Class == load.HTTP5xx && ph != nil && r.Upstreams != "" &&
		(r.Proxy == proxy.UpstreamRefused || r.Proxy == proxy.UpstreamUnreachable || r.Proxy == proxy.UpstreamConnectTimeout || r.Proxy == proxy.UpstreamError):
		return ingressRouted(ph, r)
	case r.Class == load.HTTP5xx && ph != nil && r.Upstreams != "" && r.Proxy == proxy.UpstreamReset:
		if ph.at(r.AtMS).terminating {
			// Sent on in the termination: the ingress's routing.
			return IngressRoutingRace
		}
		// The ingress's connection to the pod broke under a request the
		// pod had before: its server's cut, of a connection the
		// ingress's log says was pooled or new (new, without the log).
		return cut(ph, upstreamRequest(r))
	case (r.Class == load.Closed || r.Class == load.Reset) && ph != nil && r.Upstreams != "":
		// Through an ingress, whose connection to the pod broke: the
		// client's own connection was the ingress's.
		return cut(ph, upstreamRequest(r))
	case r.Class == load.HTTP5xx && ph != nil && r.Proxy == proxy.UpstreamRefused:
		return proxyRefused(ph, ph.at(r.FailedMS))
	case r.Class == load.HTTP5xx && ph != nil && r.Proxy == proxy.UpstreamReset:
		return proxyReset(ph, r)
	case r.Class == load.ResponseTimeout && ph != nil && r.Upstreams != "":
		// The client gave up while the ingress, as its log tells, still
		// tried to reach the pod: a connect to a gone pod's address,
		// say. Attempts that the pods all had were slow pods, not the
		// routing.
		if _, ok := doorFailure(r.Attempts); !ok {
			return Unknown
		}
		return ingressRouted(ph, r)
	case ph == nil || r.Class == load.ConnectTimeout || r.Class == load.ResponseTimeout || r.Class == load.HTTP5xx:
		// A 5xx is an answer, and a response that never came tells
		// nothing of a cut.
		return Unknown
	}
	return cut(ph, r)
}

// unanswered gives the cause of a connect to pod ph that got no answer: a
// terminating pod's, whose address, once its sandbox had gone, had no host
// to answer, while the node still sent new connections there (C6): by its
// rules, or, where no view routed to it any more, by a connection
// tracking entry that an earlier connect of the same ports left when it
// met the pod in the race (the kernel keeps one that got no answer for
// 2 minutes, and a new connect of the same ports follows it).
//
// The pod's termination counts until the connect gave up: a connect whose
// first SYN went unanswered retries it a second later, and a retry that
// meets the pod gone goes unanswered too.
func (h *history) unanswered(ph *podHistory, r *results.Request) results.Cause {
	if !ph.at(r.ConnectMS).terminating {
		return Unknown
	}
	return RoutingRace
}

// unrouted reports whether, where the cluster shows the nodes' views, none
// routed new connections to pod ph when request r connected nor when it
// was sent: a refusal or a silence that is not the routing's doing.
func (h *history) unrouted(ph *podHistory, r *results.Request) bool {
	return r.RoutedBy != nil && len(r.RoutedBy) == 0 && len(h.routedBy(h.ipOf(ph.name), r.AtMS)) == 0
}

// refused gives the cause of a connection to pod ph refused at t, when
// the pod's state was s.
func (h *history) refused(ph *podHistory, s snapshot, r *results.Request) results.Cause {
	t := r.ConnectMS
	if s.terminating {
		if h.unrouted(ph, r) {
			return Unknown
		}
		// Where the cluster does not report the stop signal, a
		// terminating pod that refuses is taken to have had it.
		if s.signalled || !s.running || (s.Listening != nil && !*s.Listening) || !h.signals {
			return RoutingRace
		}
		// In its preStop hook, not signalled: it should listen.
		return Unknown
	}
	x, exited := ph.lastExitBefore(t)
	if (exited && x.liveness && (!s.running || !s.Ready)) || ph.beingKilled(t) {
		// Being killed after a failed liveness probe, or down since,
		// not ready again.
		return LivenessRestart
	}
	switch {
	case !s.running && exited:
		return ContainerExited
	case s.Ready || (r.Published != nil && *r.Published):
		// An endpoint that nothing listened on: one whose start the
		// timeline shows late is still pending in it.
		return NotListening
	}
	return Unknown
}

// proxyRefused gives the cause of a 503 that the proxy of pod ph answered
// when its app refused the proxy's connection, the pod's state then
// (the app's, as the pod's server) being s.
func proxyRefused(ph *podHistory, s snapshot) results.Cause {
	notListening := s.Listening != nil && !*s.Listening
	x, exited := ph.lastExitBefore(s.at)
	switch {
	case s.terminating && (s.signalled || !s.running || notListening):
		return ProxyOutlivedApp
	case s.terminating:
		return Unknown
	case (exited && x.liveness && (!s.running || !s.Ready)) || ph.beingKilled(s.at):
		// The app restarts after a failed liveness probe.
		return LivenessRestart
	case !s.running && exited:
		return ContainerExited
	case !s.running, notListening:
		// Not started, or not listening, yet: the proxy came first.
		return ProxyReadyBeforeApp
	}
	return Unknown
}

// ingressRouted gives the cause of a 502 or 504 that an ingress answered
// for pod ph, where the request's connect was refused or got no answer:
// the ingress's own routing still sent it to the pod in its termination,
// once the pod no longer listened or its address had gone.
func ingressRouted(ph *podHistory, r *results.Request) results.Cause {
	if ph.at(r.AtMS).terminating || ph.at(r.FailedMS).terminating {
		return IngressRoutingRace
	}
	return Unknown
}

// proxyReset gives the cause of a 503 that the proxy of pod ph answered
// when its connection to the app broke before the response: the app's
// cut of a request it had, or, for a request that came after the app's
// exit, the proxy's outliving it.
func proxyReset(ph *podHistory, r *results.Request) results.Cause {
	x, exited := ph.exitNear(r.FailedMS-exitBefore, r.FailedMS+exitAfter)
	if exited && r.AtMS > x.at {
		if x.terminating {
			return ProxyOutlivedApp
		}
		return ContainerExited
	}
	return cut(ph, upstreamRequest(r))
}

// upstreamRequest returns r as its proxy's request to the pod: the
// connection that broke is the proxy's, not the client's, which the
// client may have reused. The proxy's log says whether it was pooled;
// without it, it is taken for a new one.
func upstreamRequest(r *results.Request) *results.Request {
	up := *r
	up.ConnRequests, up.ConnAgeMS = 0, 0
	if reusedUpstream(r.Attempts) {
		up.ConnRequests = 1
	}
	return &up
}

// cut gives the cause of request r, which failed after its connection to
// pod ph was made.
func cut(ph *podHistory, r *results.Request) results.Cause {
	reused := r.ConnRequests > 0
	x, exited := ph.exitNear(r.FailedMS-exitBefore, r.FailedMS+exitAfter)
	if exited && r.AtMS > x.at {
		// Sent after the exit, on a connection the client still held.
		if reused {
			return StaleConnection
		}
		return Unknown
	}
	if exited {
		switch {
		case x.killed && ph.ignored():
			return KilledIgnoredSigterm
		case x.killed && !ph.reacted():
			return KilledStillRunning
		case x.killed && reused && r.MadeMS() < ph.signalAt && r.AtMS >= ph.signalAt:
			// A connection from before the signal, kept busy after it.
			return KilledKeepAliveHostage
		case x.killed:
			return KilledSlowDrain
		case x.liveness:
			return LivenessRestart
		case x.terminating && math.Abs(r.FailedMS-ph.drainDeadline) <= exitBefore:
			return DrainDeadline
		case x.terminating && ph.supervised && ph.logs && !ph.sigtermLogged:
			// The server logs its signal; it logged none.
			return SupervisedUnsignalled
		case x.terminating && ph.wrapper != "":
			return WrapperExit
		case x.terminating && reused && r.AtMS >= ph.signalAt && x.at-r.FailedMS > closedBeforeExit:
			// Sent on a kept-alive connection after the signal, and
			// closed well before the exit: the draining server closed
			// it as idle while the request was on its way.
			return StaleConnection
		case x.terminating:
			return ExitWithoutDrain
		default:
			return ContainerExited
		}
	}
	s := ph.at(r.FailedMS)
	if reused && (s.terminating || r.Class == load.Closed) && (r.Reprobe == nil || !r.Reprobe.Class.Failed()) {
		return StaleConnection
	}
	return Unknown
}

// livenessDown reports whether, at t, a pod was down after a liveness
// kill, not ready again since: the Service lacks endpoints because the
// kubelet restarts its pods.
func (h *history) livenessDown(t float64) bool {
	for _, name := range h.order {
		ph := h.pods[name]
		if x, ok := ph.lastExitBefore(t); (ok && x.liveness && !ph.at(t).Ready) || ph.beingKilled(t) {
			return true
		}
	}
	return false
}

// count sums requests by cause, the most frequent first.
func count(requests []results.Request) []results.CauseCount {
	by := map[results.Cause]*results.CauseCount{}
	for _, r := range requests {
		c := by[r.Cause]
		if c == nil {
			c = &results.CauseCount{Cause: r.Cause, FirstMS: r.AtMS, LastMS: r.AtMS}
			by[r.Cause] = c
		}
		add(c, r)
	}
	return sorted(by)
}

// add counts request r in c.
func add(c *results.CauseCount, r results.Request) {
	if r.Absorbed {
		c.Absorbed++
	} else {
		c.Failed++
	}
	c.FirstMS, c.LastMS = min(c.FirstMS, r.AtMS), max(c.LastMS, r.AtMS)
	sec := int(math.Floor(r.AtMS / 1000))
	if i, found := slices.BinarySearch(c.Seconds, sec); !found {
		c.Seconds = slices.Insert(c.Seconds, i, sec)
	}
	if r.Pod != "" {
		if i, found := slices.BinarySearch(c.Pods, r.Pod); !found {
			c.Pods = slices.Insert(c.Pods, i, r.Pod)
		}
	}
}

// sorted returns the counts of by, the most requests first, then in the
// order of Causes.
func sorted(by map[results.Cause]*results.CauseCount) []results.CauseCount {
	out := make([]results.CauseCount, 0, len(by))
	for _, c := range by {
		info := Describe(c.Cause)
		c.Title, c.Fix, c.Rule, c.Docs = info.Title, info.Fix, info.Rule, DocsLink(c.Cause)
		out = append(out, *c)
	}
	rank := func(c results.Cause) int {
		return slices.IndexFunc(causes, func(i Info) bool { return i.Cause == c })
	}
	slices.SortFunc(out, func(a, b results.CauseCount) int {
		return cmp.Or(cmp.Compare(b.Failed+b.Absorbed, a.Failed+a.Absorbed), cmp.Compare(rank(a.Cause), rank(b.Cause)), cmp.Compare(a.Cause, b.Cause))
	})
	return out
}

// Sum sums the causes of runs, as a scenario's causes over its
// repetitions; seconds and pods are left out, as they differ from run to
// run. Runs without a diagnosis count nothing.
func Sum(runs []results.Run) []results.CauseCount {
	by := map[results.Cause]*results.CauseCount{}
	for _, run := range runs {
		if run.Diagnosis == nil {
			continue
		}
		for _, c := range run.Diagnosis.Causes {
			s := by[c.Cause]
			if s == nil {
				s = &results.CauseCount{Cause: c.Cause, FirstMS: c.FirstMS, LastMS: c.LastMS}
				by[c.Cause] = s
			}
			s.Failed += c.Failed
			s.Absorbed += c.Absorbed
			s.FirstMS, s.LastMS = min(s.FirstMS, c.FirstMS), max(s.LastMS, c.LastMS)
		}
	}
	return sorted(by)
}

// findings tells how each old pod stopped.
func findings(h *history, old []results.OldPod, requests []results.Request) []results.Finding {
	var out []results.Finding
	cuts := map[string]int{}   // by pod, its requests cut by an exit without drain
	raced := map[string]int{}  // by pod, its requests that the routing sent it too late
	failed := map[string]int{} // by pod, its failed and absorbed requests
	for _, r := range requests {
		failed[r.Pod]++
		// The pods of a proxy's other failed attempts failed the request
		// too, though the client's error names one pod.
		also := map[string]bool{r.Pod: true}
		for _, a := range r.Attempts {
			addr, err := netip.ParseAddrPort(a.Upstream)
			if a.Outcome == "ok" || err != nil {
				continue
			}
			if pod := h.podAt(addr.Addr(), r.MadeMS()); pod != "" && !also[pod] {
				also[pod] = true
				failed[pod]++
			}
		}
		switch r.Cause {
		case ExitWithoutDrain:
			cuts[r.Pod]++
		case RoutingRace, IngressRoutingRace:
			raced[r.Pod]++
		}
	}
	for _, o := range old {
		ph := h.pods[o.Name]
		if ph == nil || ph.signalAt == never {
			continue
		}
		add := func(kind, text string) { out = append(out, results.Finding{Pod: o.Name, Kind: kind, Text: text}) }
		// The stop signal, SIGTERM unless lifecycle.stopSignal names
		// another.
		sig := cmp.Or(ph.signal, "SIGTERM")
		var killed, ended *exit
		for i := range ph.exits {
			if x := &ph.exits[i]; x.terminating && ended == nil {
				ended = x
				if x.killed {
					killed = x
				}
			}
		}
		grace := sec(ph.grace)
		switch {
		case killed != nil && ph.ignored():
			who := ""
			if ph.pid1 {
				who = " (PID 1 without a handler)"
			}
			add("ignored-sigterm", fmt.Sprintf("ignored %s%s and lived out its %s grace period, exit %d", sig, who, grace, killed.code))
		case killed != nil && ph.reacted():
			add("killed-at-grace-end", fmt.Sprintf("drain outlasted its budget: still running %s after %s, killed at the end of its %s grace period, exit %d",
				sec(killed.at-ph.signalAt), sig, grace, killed.code))
		case killed != nil:
			add("killed-at-grace-end", fmt.Sprintf("still running %s after %s, killed at the end of its %s grace period, exit %d: it ignored %[2]s or drained too long; no new connection after the signal, nor its log, told which",
				sec(killed.at-ph.signalAt), sig, grace, killed.code))
		case ended != nil && ph.wrapper != "":
			add("wrapper-exit", fmt.Sprintf("its wrapper %s exited %s after %s with code %d, taking the server with it", ph.wrapper, sec(ended.at-ph.signalAt), sig, ended.code))
		case ended != nil:
			if cutN := cuts[o.Name]; cutN > 0 {
				add("exited-without-drain", fmt.Sprintf("exited %s after %s with code %d%s, cutting %d %s in flight",
					sec(ended.at-ph.signalAt), sig, ended.code, exitMeaning(ended.code, ph.pid1), cutN, plural(cutN, "request", "requests")))
			}
		}
		if o.AfterSigterm != nil && *o.AfterSigterm > 0 {
			text := fmt.Sprintf("served %d %s after %s", *o.AfterSigterm, plural(*o.AfterSigterm, "request", "requests"), sig)
			if o.LastNewConnectionMS == nil || *o.LastNewConnectionMS < ph.signalAt {
				text += ", all on keep-alive connections made before it"
			}
			add("served-after-sigterm", text)
		}
		// advice ends a finding that the routing still sent the pod
		// requests at its stop signal: what it did about them, or fix.
		advice := func(fix string) string {
			switch {
			case o.AfterSigterm != nil && *o.AfterSigterm > 0 && cuts[o.Name] == 0 && raced[o.Name] == 0:
				// Its server's own delay did: it went on accepting.
				return "it went on accepting them"
			case failed[o.Name] == 0:
				return "none of its requests failed"
			}
			return fix
		}
		left, viaIngress := h.ingressLeft(h.ipOf(o.Name), ph.signalAt)
		switch nodes := h.routedBy(h.ipOf(o.Name), ph.signalAt); {
		case viaIngress:
			// The client's requests came through the ingress, whose own
			// routing decided where they went.
			after := "until the end of the run"
			if left != never {
				after = "for " + sec(left-ph.signalAt) + " more"
			}
			add("ingress-not-converged", fmt.Sprintf("at %s, the ingress still sent requests to it, %s: %s", sig, after,
				advice("a preStop delay longer than the ingress's update delay would have covered it")))
		case h.allResolve():
			// The clients chose the pods' addresses themselves: the
			// nodes' routing was not theirs.
		case len(nodes) > 0:
			views := "the routing view of " + nodes[0]
			if len(nodes) > 1 {
				views = "the routing views of " + strings.Join(nodes[:len(nodes)-1], ", ") + " and " + nodes[len(nodes)-1]
			}
			add("routing-not-converged", fmt.Sprintf("at %s, %s still sent new connections to it: %s", sig, views,
				advice("a preStop delay would have covered the propagation")))
		case len(h.nodes) == 0 && !ph.signalInferred && o.LastNewConnectionMS != nil && *o.LastNewConnectionMS > ph.signalAt-convergedWithin:
			gap := ph.signalAt - *o.LastNewConnectionMS
			when := sec(gap) + " before " + sig
			if gap < 0 {
				when = sec(-gap) + " after " + sig
			}
			add("routing-not-converged", fmt.Sprintf("its last request on a new connection came %s: the routing had not converged", when))
		}
	}
	return out
}

// exitMeaning returns what an exit code after SIGTERM says of the
// server, in parentheses; "" when it says nothing in particular.
func exitMeaning(code int, pid1 bool) string {
	switch {
	case code == 143:
		return " (128+SIGTERM)"
	case code == 2 && pid1:
		// The Go runtime re-raises a signal nobody handles to die of it;
		// as PID 1 the kernel ignores it, and the runtime exits 2.
		return " (how a Go program without a SIGTERM handler ends as PID 1)"
	}
	return ""
}

// sec renders ms as seconds: "10 s", "0.71 s", "0.00 s" (below a
// second, always with its hundredths).
func sec(ms float64) string {
	if ms >= 1000 && ms == math.Trunc(ms/1000)*1000 {
		return fmt.Sprintf("%.0f s", ms/1000)
	}
	return fmt.Sprintf("%.2f s", ms/1000)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
