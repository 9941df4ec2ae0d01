package cluster

import (
	"context"
	"sync"
	"time"
)

// EventKind names what happened in an [Event]. The names are stable: reports
// and scenario files refer to them.
type EventKind string

// The kinds of events a backend records. Each names the Kubernetes action it
// stands for; Fields lists the [Event.Fields] it sets.
const (
	// PodCreated: a controller or a manifest created a pod object.
	PodCreated EventKind = "pod_created"
	// PodScheduled: the pod was bound to Node.
	PodScheduled EventKind = "pod_scheduled"
	// PodStarted: the kubelet admitted the pod. Fields: ip.
	PodStarted EventKind = "pod_started"
	// ContainerStarted: a container's main process is running. Fields: pid,
	// restart (the restart count), pid_namespace (how the process was
	// isolated, see the kubelet), init (N/M, for the Nth of a pod's M init
	// containers).
	ContainerStarted EventKind = "container_started"
	// ContainerStartFailed: the container's command could not be started.
	// Fields: error.
	ContainerStartFailed EventKind = "container_start_failed"
	// ProbeFailed: one run of a probe failed, whether or not the run
	// changed the stored result: the kubelet's Warning Event Unhealthy,
	// which it posts at every failed run ("Readiness probe failed:
	// output"). Fields: probe (startup, readiness, liveness), target
	// (what it probes: "GET :8080/healthz", "TCP :8080", "exec CMD…"; see
	// [ProbeFailure]), failures (the failed runs in a row, this one
	// included: the stored result turns to failure when they reach
	// failureThreshold), output.
	ProbeFailed EventKind = "probe_failed"
	// ProbeResult: a probe's stored result changed (a run of identical
	// results reached its threshold); the failed run that changes it
	// comes first as a ProbeFailed. Fields: probe (startup, readiness,
	// liveness), result (success, failure), output.
	ProbeResult EventKind = "probe_result"
	// PodReady and PodUnready: the pod's Ready condition changed.
	PodReady   EventKind = "pod_ready"
	PodUnready EventKind = "pod_unready"
	// PreStopStarted and PreStopFinished: a container's preStop hook ran.
	// Fields of PreStopFinished: error, when the hook failed
	// (FailedPreStopHook).
	PreStopStarted  EventKind = "prestop_started"
	PreStopFinished EventKind = "prestop_finished"
	// SignalSent: the stop signal went to the container's first process.
	// Fields: signal, grace (the time left before SIGKILL, a Go duration).
	SignalSent EventKind = "signal_sent"
	// Killed: SIGKILL went to the container because its grace period ended.
	Killed EventKind = "killed"
	// ContainerExited: a container's main process ended. Fields: code (the
	// exit code, 128+signal for a signal), reason (Completed or Error),
	// init (as ContainerStarted's).
	ContainerExited EventKind = "container_exited"
	// BackOff: a crashed container waits before its restart. Fields: delay
	// (a Go duration).
	BackOff EventKind = "back_off"
	// LivenessKill: a failed liveness or startup probe makes the kubelet
	// kill the container, which will be restarted. Fields: probe.
	LivenessKill EventKind = "liveness_kill"
	// PodTerminating: the kubelet started terminating the pod. Fields: grace
	// (a Go duration).
	PodTerminating EventKind = "pod_terminating"
	// PodTerminated: every container of a terminating pod has stopped.
	// Fields: phase (Succeeded or Failed).
	PodTerminated EventKind = "pod_terminated"
	// PodDeleted: the pod object was deleted (or marked for deletion, for a
	// graceful delete). Fields: grace.
	PodDeleted EventKind = "pod_deleted"
	// PodEvicted and EvictionRefused: the eviction API accepted or refused
	// to evict the pod. Fields of EvictionRefused: budget, status.
	PodEvicted      EventKind = "pod_evicted"
	EvictionRefused EventKind = "eviction_refused"
	// EndpointsPublished: the endpoints of Service Object changed; they
	// are the event's Endpoints.
	EndpointsPublished EventKind = "endpoints_published"
	// EndpointsApplied: Node's routing view applied a change of Service
	// Object's endpoints; Endpoints are the view's, with the Service's
	// internalTrafficPolicy ([Endpoints.NodeLocal]).
	EndpointsApplied EventKind = "endpoints_applied"
	// ReplicaSetScaled: ReplicaSet Object's desired replicas changed.
	// Fields: from, to.
	ReplicaSetScaled EventKind = "replicaset_scaled"
	// ProgressDeadlineExceeded: Deployment Object's rollout made no
	// progress for its progressDeadlineSeconds, and its Progressing
	// condition turned False. Fields: deadline (a Go duration), replicaset
	// (the new ReplicaSet's name).
	ProgressDeadlineExceeded EventKind = "progress_deadline_exceeded"
	// NodeCordoned and NodeUncordoned: Node's schedulability changed.
	NodeCordoned   EventKind = "node_cordoned"
	NodeUncordoned EventKind = "node_uncordoned"
)

// Event is one thing that happened in a cluster: the unit of the timeline
// that runners and reports consume. Every event of a backend carries a time
// from the backend's one clock, so that events of different components
// order correctly.
type Event struct {
	// Time is when it happened, read from the backend's clock.
	Time time.Time
	// Kind says what happened.
	Kind EventKind
	// Namespace, Pod and Container name the pod and container it concerns,
	// when it concerns one.
	Namespace string
	Pod       string
	Container string
	// Node names the node it happened on, when it happened on one.
	Node string
	// Object names another object it concerns, as kind/name (for example
	// Service/web, ReplicaSet/web-6d4cf56db6), when there is one.
	Object string
	// Fields holds the kind's details, as listed with each kind.
	Fields map[string]string
	// Endpoints are the endpoints of EndpointsPublished and
	// EndpointsApplied; zero for the other kinds.
	Endpoints Endpoints
}

// InitDone reports whether an event of kind with fields is an init
// container's successful end (ContainerExited, init set, code 0): a step
// of the pod's start, not the end of its work.
func InitDone(kind EventKind, fields map[string]string) bool {
	return kind == ContainerExited && fields["init"] != "" && fields["code"] == "0"
}

// OfSidecar reports whether an event's fields say it is of a sidecar, an
// init container with restartPolicy Always (sidecar=true): a container
// beside the pod's server, which stops after it.
func OfSidecar(fields map[string]string) bool { return fields["sidecar"] == "true" }

// BesideServer reports whether an event's fields say it is of a container
// beside the pod's server (ServerIndex): a sidecar, or another app
// container (app=N/M), such as a proxy in front of the server.
func BesideServer(fields map[string]string) bool { return OfSidecar(fields) || fields["app"] != "" }

// A Recorder takes events. Implementations must be safe for concurrent use
// and must not block for long: components record while they work.
type Recorder interface {
	Record(Event)
}

// EventLog is a Recorder that keeps every event in the order recorded, for
// readers that follow the stream from any point. The zero EventLog is ready
// to use; it must not be copied after first use.
type EventLog struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced at each Record
}

// Record appends e to the log and wakes the readers waiting in Next. An
// event stamped before the latest one in the log, by a recorder that was
// slow to get here, takes the latest one's time: the log's order is the
// order of its times.
func (l *EventLog) Record(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.events); n > 0 && e.Time.Before(l.events[n-1].Time) {
		e.Time = l.events[n-1].Time
	}
	l.events = append(l.events, e)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// Events returns a copy of the events recorded so far.
func (l *EventLog) Events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// Next returns the event at index i (0 is the first event recorded),
// waiting for it to be recorded. It returns ctx.Err() if ctx ends first.
func (l *EventLog) Next(ctx context.Context, i int) (Event, error) {
	for {
		l.mu.Lock()
		if i < len(l.events) {
			e := l.events[i]
			l.mu.Unlock()
			return e, nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Stream sends every event of the log from the first one, in order, on the
// returned channel until ctx ends; the channel is closed then. It is the
// Events method of a backend that records into l.
func (l *EventLog) Stream(ctx context.Context) <-chan Event {
	ch := make(chan Event)
	go func() {
		defer close(ch)
		// One event per round; the loop ends with ctx.
		for i := 0; ; i++ {
			e, err := l.Next(ctx, i)
			if err != nil {
				return
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// ProbeFailure returns what failed of ProbeFailed event e, its probe and
// target ("readiness probe GET :8080/healthz failed"): the text that
// notices begin with, before the probe's output.
func ProbeFailure(e Event) string {
	s := e.Fields["probe"] + " probe"
	if t := e.Fields["target"]; t != "" {
		s += " " + t
	}
	return s + " failed"
}
