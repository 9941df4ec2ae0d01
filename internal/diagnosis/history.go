package diagnosis

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// supervisordKinds are the kinds of the timeline entries of supervisord's
// own log lines (scenario's supervisordEvent).
var supervisordKinds = map[string]bool{"supervisord_signal": true, "programs_stopping": true, "program_stopped": true, "program_started": true}

// never is the time of what did not happen.
var never = math.Inf(1)

// snapshot is a pod's state from one moment of the timeline to the next
// change.
type snapshot struct {
	at float64
	results.PodState
	terminating bool // its termination began (or it was deleted)
	signalled   bool // the stop signal went to it
	running     bool // a container instance runs
}

// exit is one end of a pod's container instance.
type exit struct {
	// at is when the server ended, as near as the timeline tells (its
	// own last log line, if it logged one, else stamp); stamp is when the
	// cluster reported it, when the pod's state changed.
	at, stamp float64
	code      int
	// killed: SIGKILL at the end of the grace period ended it.
	killed bool
	// liveness: the kubelet killed it on a failed liveness probe.
	liveness bool
	// terminating: the pod's termination had begun.
	terminating bool
	// killedAt is when the liveness kill that ends it was decided; never
	// for other exits.
	killedAt float64
}

// podHistory is what the timeline shows of one pod.
type podHistory struct {
	name  string
	steps []snapshot
	exits []exit
	// signal is the stop signal's name, as the cluster reported it; empty
	// if it did not.
	signal string
	// signalAt and terminatingAt are when the stop signal went and the
	// termination began; never if they did not happen.
	signalAt, terminatingAt float64
	// signalInferred: the cluster reports no signal and the pod logged
	// none, so signalAt is its termination's start, an upper bound on
	// nothing: what came after it does not show a listener's state.
	signalInferred bool
	// grace is the grace period, in milliseconds, from pod_terminating;
	// 0 if unknown.
	grace float64
	// logs: the server writes closingtime serve's log events, so its
	// silence says something (no sigterm event: it ignored the signal).
	logs bool
	// sigtermLogged: the server logged receiving SIGTERM.
	sigtermLogged bool
	// wrapper names the wrapper the server's log says it ran under
	// (npm, sh); empty if none.
	wrapper string
	// refusedAfterSignal: a new connection made after the signal, while
	// its container ran, was refused: its listener had closed.
	refusedAfterSignal bool
	// pid1: its container's process ran in a PID namespace of its own,
	// as the container's first process.
	pid1 bool
	// exiting is when the server logged its exit (closingtime serve's
	// exiting event) and its container's exit has not come yet; never
	// otherwise.
	exiting float64
	// drainDeadline is when the server logged that its drain deadline
	// closed what was left (closingtime serve's drained event, outcome
	// deadline); never otherwise.
	drainDeadline float64
	// supervised: the container's first process is supervisord, which
	// logged receiving SIGTERM.
	supervised bool
}

// at returns the pod's state at t: that of the last step at or before t;
// pending before its first.
func (h *podHistory) at(t float64) snapshot {
	i := sort.Search(len(h.steps), func(i int) bool { return h.steps[i].at > t })
	if i == 0 {
		return snapshot{at: t, PodState: results.PodState{State: "pending", SinceMS: t}}
	}
	return h.steps[i-1]
}

// exitNear returns the first exit of h in [from, to]; false if none.
func (h *podHistory) exitNear(from, to float64) (exit, bool) {
	for _, x := range h.exits {
		if x.at >= from && x.at <= to {
			return x, true
		}
	}
	return exit{}, false
}

// lastExitBefore returns the last exit of h that the cluster reported at
// or before t; false if none.
func (h *podHistory) lastExitBefore(t float64) (exit, bool) {
	for i := len(h.exits) - 1; i >= 0; i-- {
		if h.exits[i].stamp <= t {
			return h.exits[i], true
		}
	}
	return exit{}, false
}

// killPending reports whether a liveness kill of h waits for its exit.
func (h *podHistory) killPending() bool {
	n := len(h.exits)
	return n > 0 && h.exits[n-1].stamp == never
}

// beingKilled reports whether, at t, the kubelet was killing h's
// container after a failed liveness probe, and it had not exited yet.
func (h *podHistory) beingKilled(t float64) bool {
	return slices.ContainsFunc(h.exits, func(x exit) bool { return x.liveness && x.killedAt <= t && t < x.stamp })
}

// endpointsAt is a Service's endpoints from one moment on, as node's
// view routes them (any node's, for the EndpointSlices'). The addresses
// it lists and those a new connection is routed to are indexed when first
// asked for: most of a run's changes are never looked at.
type endpointsAt struct {
	at   float64
	eps  cluster.Endpoints
	node string
	// all holds the addresses listed, each true if ready; routed, those
	// a new connection goes to. Nil until indexed.
	all, routed map[string]bool
}

// index indexes e's addresses, once.
func (e *endpointsAt) index() {
	if e.all != nil {
		return
	}
	e.all, e.routed = make(map[string]bool, len(e.eps.List)), map[string]bool{}
	for _, ep := range e.eps.List {
		e.all[ep.Address] = e.all[ep.Address] || ep.Ready
	}
	to, _ := e.eps.Route(e.node)
	for _, j := range to {
		e.routed[e.eps.List[j].Address] = true
	}
}

// lists reports whether e lists ip, in any condition.
func (e *endpointsAt) lists(ip string) bool {
	e.index()
	_, ok := e.all[ip]
	return ok
}

// ready reports whether e lists ip as ready.
func (e *endpointsAt) ready(ip string) bool {
	e.index()
	return e.all[ip]
}

// routes reports whether e routes a new connection to ip.
func (e *endpointsAt) routes(ip string) bool {
	e.index()
	return e.routed[ip]
}

// routable counts the endpoints e routes a new connection to.
func (e *endpointsAt) routable() int {
	e.index()
	return len(e.routed)
}

// history indexes a run's timeline for the joins.
type history struct {
	pods  map[string]*podHistory
	order []string // the pods, in the order the timeline names them
	// addrs holds, by IP address, the pods that had it, in order; ips,
	// by pod, its address.
	addrs map[netip.Addr][]addrOwner
	ips   map[string]string
	// ports are the ports the pods' servers said they listened on.
	ports map[uint16]bool
	// resolves tells, by client, the clients that resolved the Service's
	// name themselves (load.Resolve) rather than dial it through the
	// routing.
	resolves map[load.Kind]bool
	// published are the EndpointSlices' endpoints; applied, by node, the
	// nodes' routing views.
	published []endpointsAt
	applied   map[string][]endpointsAt
	nodes     []string
	// ingress are the endpoints an ingress in front of the workload
	// routed to, as its log tells them, by the ingress's pod.
	ingress map[string][]endpointsAt
	outage  *results.Outage
	// times are the times of the timeline's entries, in order; exits,
	// every pod's exits in the order of their times.
	times []float64
	exits []podExit
	// refusers caches infer's answers for refused connections, by the
	// index in times of the first entry after the connect.
	refusers map[int]string
	// signals: the cluster reports the stop signal (signal_sent); a real
	// cluster's API does not, and a pod's own log tells it then, if the
	// pod logs it. kills: the cluster reports SIGKILL (killed).
	signals, kills bool
}

// lateKill bounds how long after the exit it caused a liveness kill's
// Event may come, the container restarted meanwhile.
const lateKill = 10_000

// graceSlack is how early before the end of its grace period an exit 137
// of a terminating pod may come, on a cluster that reports no SIGKILL,
// to be taken for the kubelet's SIGKILL at that end: the API stamps the
// pod's status when it sees it.
const graceSlack = 1000

// podExit is an exit of a pod's container.
type podExit struct {
	at  float64
	pod string
}

type addrOwner struct {
	since float64
	pod   string
}

// newHistory indexes run's timeline.
func newHistory(run *results.Run) *history {
	h := &history{pods: map[string]*podHistory{}, addrs: map[netip.Addr][]addrOwner{}, ips: map[string]string{}, ports: map[uint16]bool{}, refusers: map[int]string{}, applied: map[string][]endpointsAt{}, outage: run.Outage}
	h.resolves = map[load.Kind]bool{}
	for _, c := range run.Clients {
		h.resolves[c.Kind] = c.ResolveIntervalMS > 0
	}
	for _, p := range run.Running {
		ph := h.pod(p.Name)
		state := "running"
		if p.Ready {
			state = "ready"
		}
		ph.steps = append(ph.steps, snapshot{at: math.Inf(-1), PodState: results.PodState{State: state, SinceMS: math.Inf(-1), Ready: p.Ready}, running: true})
		ph.pid1 = ownPIDNamespace(p.PIDNamespace)
		h.addAddr(p.IP, math.Inf(-1), p.Name)
	}
	for _, e := range run.Timeline {
		// Whether the cluster reports the stop signal and SIGKILL is
		// known before any entry is read.
		h.signals = h.signals || (e.Source == results.SourceCluster && e.Kind == string(cluster.SignalSent))
		h.kills = h.kills || (e.Source == results.SourceCluster && e.Kind == string(cluster.Killed))
	}
	h.times = make([]float64, len(run.Timeline))
	for i := range run.Timeline {
		h.times[i] = run.Timeline[i].AtMS
		h.add(&run.Timeline[i])
	}
	for _, ph := range h.pods {
		if !h.signals && ph.signalAt == never && ph.terminatingAt != never {
			// The cluster does not report the stop signal, and the pod
			// did not log it: it came with the termination's start, as
			// far as the timeline can tell.
			ph.signalAt, ph.signalInferred = ph.terminatingAt, true
		}
		for i := range ph.exits {
			x := &ph.exits[i]
			if x.terminating && !h.kills {
				// A cluster that reports no SIGKILL shows it by the exit
				// code, 128+9, at the end of the grace period.
				x.killed = x.code == 137 && ph.grace > 0 && x.stamp >= ph.terminatingAt+ph.grace-graceSlack
			}
			if x.at != never {
				h.exits = append(h.exits, podExit{x.at, ph.name})
			}
		}
	}
	slices.SortFunc(h.exits, func(a, b podExit) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.pod, b.pod)) })
	slices.Sort(h.nodes)
	for _, ph := range h.pods {
		for i := range ph.steps {
			if math.IsInf(ph.steps[i].SinceMS, -1) {
				ph.steps[i].SinceMS = 0
			}
		}
	}
	return h
}

func (h *history) pod(name string) *podHistory {
	ph := h.pods[name]
	if ph == nil {
		ph = &podHistory{name: name, signalAt: never, terminatingAt: never, exiting: never, drainDeadline: never}
		h.pods[name] = ph
		h.order = append(h.order, name)
	}
	return ph
}

func (h *history) addAddr(ip string, at float64, pod string) {
	if a, err := netip.ParseAddr(ip); err == nil {
		a = a.Unmap()
		h.addrs[a] = append(h.addrs[a], addrOwner{at, pod})
		h.ips[pod] = a.String()
	}
}

// allResolve reports whether the run had clients and each resolved the
// Service's name itself, so that no request went through the routing.
func (h *history) allResolve() bool {
	for _, r := range h.resolves {
		if !r {
			return false
		}
	}
	return len(h.resolves) > 0
}

// podAt returns the pod that had addr's IP address at t, "" if none did.
// An address taken by a new pod at most recordSlack after t, from one
// whose container had exited in its termination, is the new pod's: the
// new pod's start may be stamped after the routing sent it connections,
// as a late recorder's events take the time of the log's latest, while
// an exited pod's address reaches nothing of its own.
func (h *history) podAt(addr netip.Addr, t float64) string {
	owners := h.addrs[addr.Unmap()]
	pod := ""
	for i, o := range owners {
		if o.since > t {
			if o.since > t+recordSlack {
				break
			}
			if prev := h.pods[pod]; pod == "" || (prev != nil && prev.exitedTerminating(t)) {
				pod = owners[i].pod
			}
			break
		}
		pod = o.pod
	}
	return pod
}

// recordSlack bounds how much later than what it records a backend may
// stamp an event, on a loaded machine: a component that is slow to reach
// the event log gets the latest event's time ([cluster.EventLog]).
const recordSlack = 250

// exitedTerminating reports whether h's container had exited in its
// termination by t.
func (h *podHistory) exitedTerminating(t float64) bool {
	x, ok := h.lastExitBefore(t)
	return ok && x.terminating
}

// add takes the next entry of the timeline.
func (h *history) add(e *results.Entry) {
	switch e.Source {
	case results.SourceCluster:
		switch cluster.EventKind(e.Kind) {
		case cluster.EndpointsPublished:
			h.published = append(h.published, endpointsAt{at: e.AtMS, eps: e.Endpoints})
			return
		case cluster.EndpointsApplied:
			if _, ok := h.applied[e.Node]; !ok {
				h.nodes = append(h.nodes, e.Node)
			}
			h.applied[e.Node] = append(h.applied[e.Node], endpointsAt{at: e.AtMS, eps: e.Endpoints, node: e.Node})
			return
		}
	case results.SourceIngress:
		if e.Kind == "endpoints" {
			if h.ingress == nil {
				h.ingress = map[string][]endpointsAt{}
			}
			h.ingress[e.Pod] = append(h.ingress[e.Pod], endpointsAt{at: e.AtMS, eps: e.Endpoints})
		}
		return
	case results.SourcePod:
	default:
		return
	}
	if e.Pod == "" {
		return
	}
	ph := h.pod(e.Pod)
	var s snapshot
	if n := len(ph.steps); n > 0 {
		s = ph.steps[n-1]
	} else {
		s.PodState = results.PodState{State: "pending", SinceMS: e.AtMS}
	}
	s.at = e.AtMS
	state := func(name string) {
		if s.State != name {
			s.State, s.SinceMS = name, e.AtMS
		}
	}
	if e.Source == results.SourcePod && supervisordKinds[e.Kind] {
		// supervisord's own lines, not the server's.
		ph.supervised = ph.supervised || e.Kind == "supervisord_signal" && e.Detail["signal"] == "SIGTERM"
		return
	}
	if e.Source == results.SourcePod {
		ph.logs = true
		switch e.Kind {
		case "started":
			s.Listening = ptr.To(false)
		case "listening":
			s.Listening = ptr.To(true)
			if a, err := netip.ParseAddrPort(e.Detail["address"]); err == nil {
				h.ports[a.Port()] = true
			}
			if !s.terminating {
				state("listening")
				if s.Ready {
					state("ready")
				}
			}
		case "sigterm", "wrapper_signal":
			// The server, or its wrapper as the container's first
			// process, got the signal.
			if e.Kind == "sigterm" {
				ph.sigtermLogged = true
				state("draining")
			} else {
				ph.wrapper = e.Detail["wrapper"]
			}
			if !s.terminating && !h.signals && !ph.beingKilled(e.AtMS) && !ph.killPending() {
				// A real cluster's watch may show the termination after
				// the server logged its signal: the pod's own word comes
				// first.
				s.terminating, ph.terminatingAt = true, e.AtMS
			}
			if s.terminating && !s.signalled {
				s.signalled = true
				ph.signalAt = e.AtMS
			}
		case "listener_closed":
			// The graceful drain closed the port: new connections are
			// refused from here on.
			s.Listening = ptr.To(false)
		case "drained":
			if e.Detail["outcome"] == "deadline" {
				ph.drainDeadline = e.AtMS
			}
			return
		case "wrapper_started", "wrapper_exiting":
			ph.wrapper = e.Detail["wrapper"]
		case "exiting":
			ph.exiting = e.AtMS
			return
		default:
			return
		}
		ph.steps = append(ph.steps, s)
		return
	}
	if cluster.BesideServer(e.Detail) {
		// The pod's server is its first app container; the start,
		// signal and exit of a sidecar or a proxy beside it are not its.
		return
	}
	switch cluster.EventKind(e.Kind) {
	case cluster.PodCreated, cluster.PodScheduled:
		state("pending")
	case cluster.PodStarted:
		state("starting")
		h.addAddr(e.Detail["ip"], e.AtMS, e.Pod)
	case cluster.ContainerStarted:
		s.running, s.ExitCode = true, nil
		if s.Listening != nil {
			s.Listening = ptr.To(false)
		}
		ph.pid1 = ownPIDNamespace(e.Detail["pid_namespace"])
		state("running")
	case cluster.PodReady:
		s.Ready = true
		if !s.terminating {
			state("ready")
		}
	case cluster.PodUnready:
		s.Ready = false
		if !s.terminating && s.running {
			state("unready")
		}
	case cluster.PodDeleted, cluster.PodTerminating:
		if !s.terminating {
			s.terminating = true
			ph.terminatingAt = e.AtMS
			state("terminating")
		}
		if g, err := timeDetail(e.Detail["grace"]); err == nil && ph.grace == 0 {
			ph.grace = g
		}
	case cluster.PreStopStarted:
		state("prestop")
	case cluster.PreStopFinished:
		if !s.signalled {
			state("terminating")
		}
	case cluster.SignalSent:
		if !s.terminating {
			// The kubelet stops a container a liveness probe failed.
			state("restarting")
			break
		}
		if !s.signalled {
			s.signalled = true
			ph.signalAt, ph.signal = e.AtMS, e.Detail["signal"]
		}
		state("signalled")
	case cluster.Killed:
		if s.terminating {
			state("killed")
		}
	case cluster.LivenessKill:
		n := len(ph.exits)
		switch {
		case n > 0 && ph.exits[n-1].at == never:
			// A probe that fails again during the kill's grace period
			// kills the same instance again: one exit follows.
		case n > 0 && !ph.exits[n-1].terminating && !ph.exits[n-1].liveness && (!s.running || e.AtMS-ph.exits[n-1].stamp < lateKill):
			// The Event of the kill came after the exit it caused, even
			// after the restart, as a real cluster's Events watch may
			// deliver it.
			ph.exits[n-1].liveness, ph.exits[n-1].killedAt = true, min(e.AtMS, ph.exits[n-1].stamp)
		default:
			ph.exits = append(ph.exits, exit{at: never, stamp: never, liveness: true, killedAt: e.AtMS})
		}
		if s.running {
			state("restarting")
		}
	case cluster.ContainerExited:
		if cluster.InitDone(cluster.EventKind(e.Kind), e.Detail) {
			// A step of the pod's start.
			return
		}
		code, _ := strconv.Atoi(e.Detail["code"])
		// A real cluster's API reports no SIGKILL: its exit code, 128+9,
		// does.
		x := exit{at: e.AtMS, stamp: e.AtMS, code: code, killed: s.terminating && s.State == "killed", terminating: s.terminating, killedAt: never}
		if ph.exiting != never && ph.exiting <= x.at && ph.exiting > x.at-exitBefore {
			// The server's own last line is nearer its end than the
			// moment the cluster learnt of it; its clock's milliseconds
			// may put it a little before the signal it follows.
			x.at = ph.exiting
			if s.signalled {
				x.at = max(x.at, ph.signalAt)
			}
		}
		ph.exiting = never
		if n := len(ph.exits); n > 0 && ph.exits[n-1].at == never {
			// The exit of the instance a liveness kill ended.
			x.liveness, x.killedAt = ph.exits[n-1].liveness, ph.exits[n-1].killedAt
			ph.exits = ph.exits[:n-1]
		}
		ph.exits = append(ph.exits, x)
		s.running, s.ExitCode = false, ptr.To(code)
		if s.Listening != nil {
			s.Listening = ptr.To(false)
		}
		switch {
		case x.killed, s.terminating && code == 137:
			state("killed")
		case s.terminating:
			state("exited")
		default:
			state("restarting")
		}
	case cluster.BackOff:
		if !s.terminating {
			state("restarting")
		}
	default:
		return
	}
	ph.steps = append(ph.steps, s)
}

// ownPIDNamespace reports whether a container_started event's
// pid_namespace says the process ran in a PID namespace of its own, as
// PID 1: not "none" (the kubelet's namespace) nor "pod" (the pod's
// shared one, whose PID 1 is its pause process).
func ownPIDNamespace(ns string) bool { return ns != "" && ns != "none" && ns != "pod" }

// timeDetail reads a Go duration of an event's detail, in milliseconds.
func timeDetail(s string) (float64, error) {
	d, err := time.ParseDuration(s)
	return float64(d) / float64(time.Millisecond), err
}

// latest returns the last of list at or before t; nil if none.
func latest(list []endpointsAt, t float64) *endpointsAt {
	i := sort.Search(len(list), func(i int) bool { return list[i].at > t })
	if i == 0 {
		return nil
	}
	return &list[i-1]
}

// publishedReady reports whether the EndpointSlices listed ip as ready at
// t; nil if no endpoints event came before t.
func (h *history) publishedReady(ip string, t float64) *bool {
	e := latest(h.published, t)
	if e == nil {
		return nil
	}
	return ptr.To(e.ready(ip))
}

// readyEndpoints counts the endpoints the EndpointSlices would have a new
// connection routed to at t, as kube-proxy picks them; nil if no
// endpoints event came before t.
func (h *history) readyEndpoints(t float64) *int {
	e := latest(h.published, t)
	if e == nil {
		return nil
	}
	return ptr.To(e.routable())
}

// unroutable reports whether some node's routing view at t routed new
// connections to no endpoint: a connection through the Service's address
// that no pod answered was refused, or dropped, by that node's rules.
func (h *history) unroutable(t float64) bool {
	for _, node := range h.nodes {
		if e := latest(h.applied[node], t); e != nil && e.routable() == 0 {
			return true
		}
	}
	return false
}

// routedBy returns the nodes whose routing view at t would route a new
// connection from a client on that node to ip, in the order of their
// names: empty if none would, and nil if none would and some node's view
// is not known at t (the timeline holds a view from its first change).
func (h *history) routedBy(ip string, t float64) []string {
	var out []string
	all := len(h.nodes) > 0 // every node had a view applied by t
	for _, node := range h.nodes {
		e := latest(h.applied[node], t)
		all = all && e != nil
		if e != nil && e.routes(ip) {
			out = append(out, node)
		}
	}
	if all && out == nil {
		return []string{}
	}
	return out
}

// ingressLeft returns when the ingress's routing, as its log tells it,
// stopped sending requests to ip, if it routed to ip at t: for each of its
// pods that did, the first endpoints it took after t without ip, and of
// those the last; never if one still routed there at the end. ok is
// false if none routed to ip at t, or no ingress logged its endpoints.
func (h *history) ingressLeft(ip string, t float64) (left float64, ok bool) {
	for _, views := range h.ingress {
		e := latest(views, t)
		if e == nil || !e.routes(ip) {
			continue
		}
		ok = true
		stopped := never
		for i := range views {
			if n := &views[i]; n.at > t && !n.routes(ip) {
				stopped = n.at
				break
			}
		}
		left = max(left, stopped)
	}
	return left, ok
}

// formerPod reports whether addr is the address of a pod that the run
// never saw: an IP that no pod of the timeline had, on a port that its
// pods listened on. The rules had sent a connection there, so it was an
// endpoint, of a pod gone before the run began.
func (h *history) formerPod(addr string) bool {
	a, err := netip.ParseAddrPort(addr)
	return err == nil && h.ports[a.Port()] && len(h.addrs[a.Addr().Unmap()]) == 0
}
