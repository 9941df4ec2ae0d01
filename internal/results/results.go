package results

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

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
	// Target is the traffic's URL, through the Service; its scheme says
	// what the traffic spoke: http (HTTP/1.1), h2c (HTTP/2 without TLS) or
	// grpc.
	Target string `json:"target,omitempty"`
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

// Add adds o's counts to t's.
func (t *Totals) Add(o Totals) {
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
	// Diagnosis gives each failed and absorbed request its cause, and
	// tells how each old pod stopped (docs/diagnosis.md); absent when
	// there is nothing to tell, and in results files written before it
	// existed.
	Diagnosis *Diagnosis `json:"diagnosis,omitempty"`
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
	// PIDNamespace is how its container's process was isolated, from its
	// container_started event: "pid" or "user+pid" when it ran as PID 1
	// of a PID namespace of its own, "none" when not; empty where the
	// cluster does not tell (a real one).
	PIDNamespace string `json:"pidNamespace,omitempty"`
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
	// after SIGTERM; absent (unknown) if SIGTERM's time is unknown, or if
	// the run's answered requests could not be attributed to pods, none
	// of them. A request is the pod's when
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
	// Source says what the entry records.
	Source Source `json:"source"`
	// Kind is the event kind, log event name, failure class or runner
	// step.
	Kind string `json:"kind"`
	Pod  string `json:"pod,omitempty"`
	// Container is the container of the pod a cluster event is about,
	// if it is about one.
	Container string `json:"container,omitempty"`
	Node      string `json:"node,omitempty"`
	// Detail holds the event's fields.
	Detail map[string]string `json:"detail,omitempty"`
	// Endpoints are the endpoints of a cluster event that has them
	// (endpoints_published, endpoints_applied).
	Endpoints cluster.Endpoints `json:"endpoints,omitzero"`
}

// Source is what a timeline entry records; its value is the entry's
// "source" in results.json.
type Source string

// The sources of timeline entries.
const (
	// SourceCluster is a cluster event ([cluster.Event]); Kind is its
	// kind.
	SourceCluster Source = "cluster"
	// SourcePod is a log event of a pod: Kind is the event's name.
	SourcePod Source = "pod"
	// SourceIngress is a log event of an ingress in front of the
	// workload (`closingtime proxy --role edge`): Kind "endpoints", the
	// Ready endpoints its balancer took, in Endpoints.
	SourceIngress Source = "ingress"
	// SourceClient is a failed request: Kind is its failure class.
	SourceClient Source = "client"
	// SourceRunner is a step of the runner's action: Kind is one of the
	// Runner kinds below.
	SourceRunner Source = "runner"
)

// The kinds of the timeline entries of SourceRunner: the steps of an
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

// Write writes r as the indented JSON of docs/lab.md § results.json.
func Write(w io.Writer, r *Results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Read reads results written by Write, and those written before
// timeline entries had their Endpoints. Input that is not results (not
// JSON, a field of the wrong type, no scenario) gives an error that says
// so, with the decoder's reason and the line it found it on.
func Read(rd io.Reader) (*Results, error) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, notResults(data, err)
	}
	if len(r.Scenarios) == 0 {
		var compare struct {
			Sides []json.RawMessage `json:"sides"`
		}
		if json.Unmarshal(data, &compare) == nil && len(compare.Sides) > 0 {
			return nil, errors.New(notResultsText + `: it is lab --compare's, which holds each side's results under "sides"; report reads one side's (jq .sides[0].results FILE > embedded.json)`)
		}
		return nil, errors.New(notResultsText + ": no scenarios")
	}
	for i := range r.Scenarios {
		for j := range r.Scenarios[i].Runs {
			upgradeEndpoints(r.Scenarios[i].Runs[j].Timeline)
		}
	}
	return &r, nil
}

// notResultsText begins the error of input that is not results.
const notResultsText = "not a results file of closingtime lab or rollout"

// notResults returns the error of data, which json.Unmarshal could not
// decode as Results with err: where it failed, line and column of a
// syntax error, the line and field of a value of the wrong type (whose
// offset is the end of the value), and why.
func notResults(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, column := position(data, se.Offset-1)
		return fmt.Errorf("%s: line %d, column %d: %w", notResultsText, line, column, err)
	case errors.As(err, &te):
		line, _ := position(data, te.Offset)
		what := "the value"
		if te.Field != "" {
			what = "field " + te.Field
		}
		return fmt.Errorf("%s: line %d: %s is %s, not %s", notResultsText, line, what, article(te.Value), article(jsonKind(te.Type)))
	}
	return fmt.Errorf("%s: %w", notResultsText, err)
}

// position returns the line and column, from 1, of the byte at offset of
// data; the column counts characters. An offset out of data is taken as
// its nearest end.
func position(data []byte, offset int64) (line, column int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	start := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte("\n")) + 1, utf8.RuneCount(before[start:]) + 1
}

// jsonKind spells the JSON value that decodes into a Go value of type t,
// as json.UnmarshalTypeError spells the value found: a type that decodes
// itself from text takes a string.
func jsonKind(t reflect.Type) string {
	if reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return "string"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "number"
}

// article puts "a" or "an" before v, a JSON value's kind ("a number",
// "an object").
func article(v string) string {
	if strings.IndexByte("aeiou", v[0]) >= 0 {
		return "an " + v
	}
	return "a " + v
}

// upgradeEndpoints gives the endpoints events of a timeline written before
// Entry.Endpoints existed their Endpoints, from the detail "endpoints" in
// which such files held them: address=ready/serving/terminating for each
// endpoint, each condition 1 or 0, comma separated. Those files did not
// record an endpoint's node or the Service's internalTrafficPolicy.
func upgradeEndpoints(timeline []Entry) {
	for k := range timeline {
		e := &timeline[k]
		old, ok := e.Detail["endpoints"]
		if e.Source != SourceCluster || !ok || e.Endpoints.List != nil {
			continue
		}
		for _, part := range strings.Split(old, ",") {
			addr, flags, ok := strings.Cut(part, "=")
			f := strings.Split(flags, "/")
			if !ok || len(f) != 3 {
				continue
			}
			e.Endpoints.List = append(e.Endpoints.List, cluster.Endpoint{Address: addr, Ready: f[0] == "1", Serving: f[1] == "1", Terminating: f[2] == "1"})
		}
		delete(e.Detail, "endpoints")
	}
}
