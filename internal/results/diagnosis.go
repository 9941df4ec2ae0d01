package results

import (
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
)

// Request is a failed or absorbed request of a run, joined to the run's
// timeline: what the client saw of the attempt that failed (the last one
// of a failed request, the first of one a retry absorbed), the pod it
// reached, what that pod and the routing did then, and the cause the
// diagnosis gave it (docs/diagnosis.md). Times are offsets from the
// action's start, in milliseconds, as in Entry.
type Request struct {
	// ID is the request's X-Request-Id.
	ID string `json:"id"`
	// Client is the kind of client that sent it.
	Client load.Kind `json:"client"`
	// AtMS is when it was scheduled to be sent.
	AtMS float64 `json:"atMs"`
	// Class is how the explained attempt failed.
	Class load.Class `json:"class"`
	// Absorbed reports that a retry saved it.
	Absorbed bool `json:"absorbed,omitempty"`
	// Error is the attempt's error.
	Error string `json:"error,omitempty"`
	// Proxy is the reason a proxy in front of the pod's server gave for
	// the 5xx it answered itself: what the server behind it did.
	Proxy proxy.Reason `json:"proxy,omitempty"`
	// Upstreams are the upstreams that an ingress in front of the pods
	// sent the request to, in order (its X-Upstream-Addr); empty if it
	// did not go through one that says so. The pod of an ingress's own
	// answer is that of its last attempt.
	Upstreams string `json:"upstreams,omitempty"`
	// Attempts are the attempts of the proxy in front of the pod, as its
	// log tells them (`closingtime proxy`'s request event, by the
	// request's id): the ingress's, or, for a 5xx that the pod's sidecar
	// answered, the sidecar's. Empty where no such log was read.
	Attempts []proxy.Attempt `json:"attempts,omitempty"`
	// ConnectMS is when the attempt's connection was ready (or its
	// connect failed, for a connect that failed; for a gRPC call that
	// its channel failed with its last failed connect's error, when that
	// connect began); FailedMS, when the attempt failed.
	ConnectMS float64 `json:"connectMs"`
	FailedMS  float64 `json:"failedMs"`
	// Addr is the address the attempt's connection reached or tried, as
	// the client's dialer connected it; empty if unknown. Through a real
	// cluster's kube-proxy it is the Service's.
	Addr string `json:"addr,omitempty"`
	// ConnRequests counts the requests its connection carried before: 0
	// for a new connection. ConnAgeMS is the connection's age when the
	// attempt took it.
	ConnRequests int     `json:"connRequests"`
	ConnAgeMS    float64 `json:"connAgeMs,omitempty"`
	// Reprobe is the probe the client sent at once on a new connection
	// after a failure on a reused one; nil if it sent none.
	Reprobe *Reprobe `json:"reprobe,omitempty"`

	// The diagnosis's join.

	// Pod is the pod the attempt reached, from the response's X-Pod-Name
	// or its connection's address; empty if unknown.
	Pod string `json:"pod,omitempty"`
	// PodInferred reports that the connection went to a Service's address
	// (a real cluster's kube-proxy), and Pod is the one pod that the
	// timeline shows stopping, or listed, then: inferred, not seen.
	PodInferred bool `json:"podInferred,omitempty"`
	// AtConnect and AtFailure are the pod's state when the connection was
	// made and when the attempt failed; zero if Pod is unknown.
	AtConnect PodState `json:"atConnect,omitzero"`
	AtFailure PodState `json:"atFailure,omitzero"`
	// Published reports whether the Service's EndpointSlices listed the
	// pod as a ready endpoint when the connection was made; nil if no
	// endpoints event came before, or Pod is unknown.
	Published *bool `json:"published,omitempty"`
	// RoutedBy are the nodes whose routing view (kube-proxy's rules) had
	// the pod as an endpoint it routes new connections to when the
	// connection was made: empty when none did, nil (absent) if the
	// cluster shows no view (a real one), none was applied by then, or
	// Pod is unknown.
	RoutedBy []string `json:"routedBy,omitzero"`
	// ReadyEndpoints counts the endpoints of the Service's
	// EndpointSlices that a new connection could be routed to when the
	// attempt connected (the ready ones, or the serving terminating ones
	// if none is ready); nil if no endpoints event came before.
	ReadyEndpoints *int `json:"readyEndpoints,omitempty"`
	// Cause is the cause the diagnosis gave it.
	Cause Cause `json:"cause"`
}

// MadeMS returns when the request's connection was made: its connect
// less its age; for a connect that timed out, when it was tried: the
// request's start, since its ConnectMS is when it gave up, or, for a gRPC
// call that its channel failed with an earlier connect's timeout, that
// connect's start, its ConnectMS.
func (r *Request) MadeMS() float64 {
	if r.Class == load.ConnectTimeout {
		return min(r.AtMS, r.ConnectMS)
	}
	return r.ConnectMS - r.ConnAgeMS
}

// Reprobe is a probe sent on a new connection right after a request
// failed on a reused one. The probe is recorded, not counted as traffic.
type Reprobe struct {
	// Class is its outcome.
	Class load.Class `json:"class"`
	// Addr is the address its connection reached or tried; Pod, the
	// response's X-Pod-Name; Status, the response's status code. Each is
	// empty when it did not get that far.
	Addr   string `json:"addr,omitempty"`
	Pod    string `json:"pod,omitempty"`
	Status int    `json:"status,omitempty"`
	// AtMS is when it was sent.
	AtMS float64 `json:"atMs"`
}

// PodState is what a pod was doing at one moment, as the timeline shows
// it.
type PodState struct {
	// State is the pod's latest step then (docs/diagnosis.md § States):
	// pending, starting, running, listening, ready, unready, terminating,
	// prestop, signalled, draining, exited, killed, restarting.
	State string `json:"state"`
	// SinceMS is when it reached that step.
	SinceMS float64 `json:"sinceMs"`
	// ExitCode is its container's exit code once it exited; nil before.
	ExitCode *int `json:"exitCode,omitempty"`
	// Ready is its Ready condition, which puts it in the endpoints.
	Ready bool `json:"ready"`
	// Listening reports whether its server listened: known from the
	// server's own log (closingtime serve's started and listening
	// events, then its container's exits and starts), nil otherwise.
	Listening *bool `json:"listening,omitempty"`
}

// Cause names why a request failed: a stable identifier, the anchor of its
// section in docs/diagnosis.md.
type Cause string

// CauseCount is how many of a run's failed and absorbed requests a cause
// explains.
type CauseCount struct {
	Cause Cause `json:"cause"`
	// Title, Fix and Rule describe the cause, as docs/diagnosis.md does
	// at Docs, for readers of results.json: the cause in plain words,
	// what to change, and the closingtime lint rule that catches it
	// (empty if none does).
	Title string `json:"title,omitempty"`
	Fix   string `json:"fix,omitempty"`
	Rule  string `json:"rule,omitempty"`
	Docs  string `json:"docs,omitempty"`
	// Failed and Absorbed count its failed requests and those a retry
	// saved.
	Failed   int `json:"failed"`
	Absorbed int `json:"absorbed,omitempty"`
	// FirstMS and LastMS bound the send times of its requests.
	FirstMS float64 `json:"firstMs"`
	LastMS  float64 `json:"lastMs"`
	// Seconds lists the seconds (offsets from the action's start, as in
	// FailedSecond) its requests were sent in.
	Seconds []int `json:"seconds"`
	// Pods are the pods its requests reached, when known.
	Pods []string `json:"pods,omitempty"`
}

// Finding is what the diagnosis tells of one pod the action ended, failed
// requests or not: how it stopped and what that cost or risked; or of a
// pod that joined during the run and that a client's connections never
// reached.
type Finding struct {
	// Pod is the pod it tells of.
	Pod string `json:"pod"`
	// Kind names the finding (docs/diagnosis.md § Pod findings).
	Kind string `json:"kind"`
	// Text says it in plain words, with the figures.
	Text string `json:"text"`
}

// Diagnosis is a run's diagnosis: each failed and absorbed request with
// its cause, the causes counted, and the findings of the pods the action
// ended.
type Diagnosis struct {
	// Requests are the run's failed and absorbed requests, in the order
	// of their results, each with its cause.
	Requests []Request `json:"requests"`
	// Causes count the requests by cause, the most requests first.
	Causes []CauseCount `json:"causes"`
	// Findings tell how each pod the action ended stopped, in the order
	// of the run's old pods, then which pods that joined a keep-alive
	// client never reached.
	Findings []Finding `json:"findings,omitempty"`
	// Limits say what the cluster could not show, and which causes could
	// not be told apart for that.
	Limits []string `json:"limits,omitempty"`
}
