package load

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/closingtime-dev/closingtime/internal/proxy"
)

// A Result is what happened to one request.
type Result struct {
	// ID is the request's X-Request-Id.
	ID string
	// Client is the kind of client that sent it.
	Client Kind
	// Time is when the request was scheduled to be sent.
	Time time.Time
	// Lag is how late the generator started it.
	Lag time.Duration
	// Connect, FirstByte and Total are when the connection was ready, the
	// first response byte arrived, and the response was complete or the
	// request failed, as offsets from Time; with retries, those of the
	// last attempt. Connect and FirstByte are zero if not reached; a gRPC
	// call that its channel failed with its last failed connect's error
	// has that connect's start as its Connect, which may be negative.
	Connect, FirstByte, Total time.Duration
	// Class is the outcome of the last attempt.
	Class Class
	// Status is the response's status code, or zero.
	Status int
	// Pod is the response's X-Pod-Name header.
	Pod string
	// Proxy is the reason a proxy in front of the pod's server gave for
	// a 5xx it answered itself (Envoy's local replies, closingtime
	// proxy's): what the server behind did; "" for any other answer.
	Proxy proxy.Reason
	// Upstreams is the response's X-Upstream-Addr header: the upstreams
	// that an ingress in front of the pods (closingtime proxy --role
	// edge, an NGINX told to add it) sent the request to, in order,
	// "a:80, b:80"; more than one when it tried the request again on the
	// next. Empty without one.
	Upstreams string
	// Addr is the remote address of the connection the last attempt was
	// sent on, as the dialer connected it, or, if its connect failed, the
	// address the dialer tried, when its error (a *net.OpError) names
	// one; else the zero AddrPort. Through a dialer that picks a Service's
	// endpoint, such as the embedded cluster's routing view, it is the
	// address of the pod that got the request or refused the connection (a
	// Service with no endpoint to pick fails with none); through a real
	// cluster's kube-proxy, it is the Service's.
	Addr netip.AddrPort
	// ConnRequests is the number of requests that the connection of the
	// last attempt had carried before it: 0 for a new connection, more on
	// a keep-alive client's reused one. A request on a new connection went
	// wherever the dialer routed it at that moment, one on a reused
	// connection wherever its connection was routed when it was made.
	ConnRequests int
	// ConnAge is how long before the last attempt took its connection the
	// connection was made: 0 for a new connection.
	ConnAge time.Duration
	// Attempts is the number of attempts made; more than one only with
	// retries.
	Attempts int
	// FirstClass is the outcome of the first attempt. A request with
	// Class OK and FirstClass a failure was absorbed by a retry.
	FirstClass Class
	// FirstFailure is what the first attempt saw, for a request whose
	// first attempt failed and which made more (a retry); nil otherwise.
	FirstFailure *Attempt
	// Reprobe is the probe sent on a new connection after the request,
	// when its FailedAttempt was sent on a reused connection; nil
	// otherwise.
	Reprobe *Reprobe
	// Err is the last attempt's error, if any.
	Err error
}

// An Attempt is what one attempt of a request saw: the first failure of
// a request that a retry followed ([Result.FirstFailure]), or the attempt
// that [Result.FailedAttempt] returns.
type Attempt struct {
	// Class is the attempt's outcome.
	Class Class
	// Proxy is the reason a proxy gave for its 5xx, and Upstreams its
	// upstreams, as Result's.
	Proxy     proxy.Reason
	Upstreams string
	// Addr is the address its connection reached or its connect tried,
	// as Result's Addr is.
	Addr netip.AddrPort
	// ConnRequests and ConnAge describe its connection as Result's do:
	// both zero for a new connection.
	ConnRequests int
	ConnAge      time.Duration
	// Connect and Total are when its connection was ready (zero if never)
	// and when it ended, as offsets from the Result's Time.
	Connect, Total time.Duration
	// Err is its error, if any.
	Err error
}

// Reused reports whether the last attempt was sent on a connection that
// had carried a request before.
func (r *Result) Reused() bool { return r.ConnRequests > 0 }

// Absorbed reports whether a retry saved the request.
func (r *Result) Absorbed() bool { return r.Class == OK && r.FirstClass != OK }

// FailedAttempt returns the attempt that a diagnosis of r explains: the
// last one for a failed request, the first failure for an absorbed one
// (with its class alone if r does not carry FirstFailure), and false for a
// request that succeeded the first time.
func (r *Result) FailedAttempt() (Attempt, bool) {
	switch {
	case r.Class.Failed():
		return Attempt{Class: r.Class, Proxy: r.Proxy, Upstreams: r.Upstreams, Addr: r.Addr, ConnRequests: r.ConnRequests, ConnAge: r.ConnAge,
			Connect: r.Connect, Total: r.Total, Err: r.Err}, true
	case r.FirstFailure != nil:
		return *r.FirstFailure, true
	case r.Absorbed():
		return Attempt{Class: r.FirstClass}, true
	}
	return Attempt{}, false
}

func newResult(kind Kind, id string, at, began time.Time, attempts []attempt, err error) *Result {
	r := &Result{ID: id, Client: kind, Time: at, Lag: began.Sub(at), Attempts: len(attempts), Err: err}
	if len(attempts) == 0 {
		// The request failed before any attempt.
		r.Class, r.FirstClass, r.Total = Error, Error, time.Since(at)
		return r
	}
	last := attempts[len(attempts)-1]
	r.Class, r.FirstClass = last.class, attempts[0].class
	r.Status, r.Pod, r.Proxy, r.Upstreams, r.Addr = last.status, last.pod, last.proxy, last.upstreams, last.addr
	r.ConnRequests, r.ConnAge = last.connRequests, last.connAge
	r.Connect, r.FirstByte, r.Total = offset(at, last.connect), offset(at, last.firstByte), offset(at, last.end)
	if err == nil {
		r.Err = last.err
	}
	if first := &attempts[0]; len(attempts) > 1 && first.class.Failed() {
		r.FirstFailure = &Attempt{Class: first.class, Proxy: first.proxy, Upstreams: first.upstreams, Addr: first.addr, ConnRequests: first.connRequests, ConnAge: first.connAge,
			Connect: offset(at, first.connect), Total: offset(at, first.end), Err: first.err}
	}
	return r
}

func offset(from, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from)
}

// Counts are numbers of requests by class. They encode in JSON as an
// object with every class name as a key.
type Counts [numClasses]int64

// Failed returns the number of failed requests.
func (c *Counts) Failed() int64 {
	var n int64
	for class, v := range c {
		if Class(class).Failed() {
			n += v
		}
	}
	return n
}

// Total returns the number of requests.
func (c *Counts) Total() int64 { return c.Failed() + c[OK] }

// MarshalJSON encodes the counts as {"ok":N,"refused":N,...}, every class
// present, in the order of the classes.
func (c Counts) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for class, v := range c {
		if class > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, classNames[class]...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes counts encoded by MarshalJSON.
func (c *Counts) UnmarshalJSON(data []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*c = Counts{}
	for name, v := range m {
		var class Class
		if err := class.UnmarshalText([]byte(name)); err != nil {
			return err
		}
		c[class] = v
	}
	return nil
}

// A Report is the result of a run.
type Report struct {
	// URL is the target.
	URL string `json:"url"`
	// Start is when the first request was scheduled; End is when the last
	// was sent (the run's duration passed or it was stopped).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Clients has one report per client, in the order of the Config.
	Clients []ClientReport `json:"clients"`
}

// A ClientReport is the result of one client in a run.
type ClientReport struct {
	Kind        Kind    `json:"kind"`
	Rate        float64 `json:"rate"`
	Connections int     `json:"connections,omitempty"`
	// MaxIdleMS and MaxLifetimeMS are a keep-alive client's [Limits];
	// zero for none.
	MaxIdleMS     float64 `json:"maxIdleMs,omitempty"`
	MaxLifetimeMS float64 `json:"maxLifetimeMs,omitempty"`
	// ResolveIntervalMS is, for a gRPC client whose channels resolved the
	// host themselves ([Resolve]), the shortest time between two of
	// their lookups; zero for a client that dialed the host as it is.
	ResolveIntervalMS float64 `json:"resolveIntervalMs,omitempty"`
	// Totals counts every request by class.
	Totals Counts `json:"totals"`
	// Absorbed counts the requests that failed and then succeeded on a
	// retry, by the class of their first failure.
	Absorbed Counts `json:"absorbed"`
	// Seconds counts the requests by the UTC second of their scheduled
	// send time, for every second that had requests, in order.
	Seconds []Second `json:"seconds"`
	// Latency is the time from a request's scheduled send time to its
	// complete response, for requests that got one (ok and http5xx).
	Latency Percentiles `json:"latencyMs"`
	// ScheduleLag is how late the generator started requests.
	ScheduleLag Percentiles `json:"scheduleLagMs"`
	// Pods counts the responses by the X-Pod-Name that served them;
	// responses without the header are not counted.
	Pods map[string]int64 `json:"pods"`
	// Statuses counts the responses (ok and http5xx) by status code. A 4xx
	// is ok, as the server answered; a run whose answers are mostly 4xx
	// likely requested a path that the server does not serve. Empty in a
	// report that does not carry them.
	Statuses map[int]int64 `json:"statuses,omitempty"`
	// ProxyReasons counts the http5xx that a proxy in front of the pods
	// answered itself, by its reason (Result's Proxy).
	ProxyReasons map[proxy.Reason]int64 `json:"proxyReasons,omitempty"`
	// ProxyRetried counts the responses (ok and http5xx) that an ingress
	// in front of the pods got only after a failed attempt at another
	// upstream, or the same again (Result's Upstreams lists more than
	// one): failures of the pods that the client did not see.
	ProxyRetried int64 `json:"proxyRetried,omitempty"`
	// LatencyHistogram and ScheduleLagHistogram are the distributions
	// behind Latency and ScheduleLag: HDR histograms of microseconds, from
	// 1 µs to one hour with three significant digits, in HdrHistogram's
	// compressed V2 encoding (base64), so that the reports of several
	// generators merge without losing their percentiles ([Merge]). Empty
	// in a report that does not carry them.
	LatencyHistogram     string `json:"latencyHistogram,omitempty"`
	ScheduleLagHistogram string `json:"scheduleLagHistogram,omitempty"`
}

// A Second counts the requests scheduled in one second.
type Second struct {
	Time   time.Time `json:"time"`
	Counts Counts    `json:"counts"`
}

// Percentiles summarize a distribution of durations, in milliseconds in
// JSON.
type Percentiles struct {
	P50, P90, P99, Max time.Duration
}

// percentilesJSON is the JSON form of Percentiles, in milliseconds.
type percentilesJSON struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// MarshalJSON encodes the percentiles as {"p50":ms,"p90":ms,"p99":ms,"max":ms}.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(percentilesJSON{P50: ms(p.P50), P90: ms(p.P90), P99: ms(p.P99), Max: ms(p.Max)})
}

// UnmarshalJSON decodes percentiles encoded by MarshalJSON.
func (p *Percentiles) UnmarshalJSON(data []byte) error {
	var v percentilesJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*p = Percentiles{P50: DurationMS(v.P50), P90: DurationMS(v.P90), P99: DurationMS(v.P99), Max: DurationMS(v.Max)}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// DurationMS is the duration of v milliseconds, rounded to the nanosecond: the
// inverse of the millisecond fields of reports and streams. Rounding matters: a
// float such as 4.023 times 1e6 is 4022999.9999…, which truncation would turn
// into 4.022999 ms.
func DurationMS(v float64) time.Duration {
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}

// histogram records durations in microseconds, from 1 µs to one hour, with
// three significant digits.
type histogram struct{ h *hdrhistogram.Histogram }

func newHistogram() histogram {
	return histogram{hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)}
}

func (h histogram) record(d time.Duration) {
	us := max(int64(d/time.Microsecond), 0)
	h.h.RecordValue(min(us, h.h.HighestTrackableValue()))
}

// encode returns h in HdrHistogram's compressed V2 encoding, as base64.
func (h histogram) encode() string {
	b, err := h.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		// Encode fails only for an encoding it does not know.
		panic("load: encode histogram: " + err.Error())
	}
	return string(b)
}

// decodeHistogram decodes a histogram that encode encoded; what names it
// in the error.
func decodeHistogram(what, encoded string) (histogram, error) {
	h, err := hdrhistogram.Decode([]byte(encoded))
	if err != nil {
		return histogram{}, fmt.Errorf("decode %s: %w", what, err)
	}
	return histogram{h}, nil
}

func (h histogram) percentiles() Percentiles {
	if h.h.TotalCount() == 0 {
		return Percentiles{}
	}
	at := func(q float64) time.Duration { return time.Duration(h.h.ValueAtQuantile(q)) * time.Microsecond }
	return Percentiles{P50: at(50), P90: at(90), P99: at(99), Max: time.Duration(h.h.Max()) * time.Microsecond}
}

// A recorder accumulates the results of one client.
type recorder struct {
	client  Client
	results *resultSink

	mu       sync.Mutex
	totals   Counts
	absorbed Counts
	seconds  map[int64]*Counts
	latency  histogram
	lag      histogram
	pods     map[string]int64
	statuses map[int]int64
	proxied  map[proxy.Reason]int64
	retried  int64 // by the proxy
}

func newRecorder(client Client) *recorder {
	return &recorder{
		client:   client,
		seconds:  make(map[int64]*Counts),
		latency:  newHistogram(),
		lag:      newHistogram(),
		pods:     make(map[string]int64),
		statuses: make(map[int]int64),
		proxied:  make(map[proxy.Reason]int64),
	}
}

func (r *recorder) record(res *Result) {
	r.results.put(res)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.totals[res.Class]++
	if res.Absorbed() {
		r.absorbed[res.FirstClass]++
	}
	sec := res.Time.Unix()
	counts := r.seconds[sec]
	if counts == nil {
		counts = new(Counts)
		r.seconds[sec] = counts
	}
	counts[res.Class]++
	if res.Class == OK || res.Class == HTTP5xx {
		r.latency.record(res.Total)
		if res.Status != 0 {
			// An HTTP response's; a gRPC call has none.
			r.statuses[res.Status]++
		}
		if res.Proxy != "" {
			r.proxied[res.Proxy]++
		}
		if strings.Contains(res.Upstreams, ",") {
			r.retried++
		}
		if res.Pod != "" {
			r.pods[res.Pod]++
		}
	}
	r.lag.record(res.Lag)
}

func (r *recorder) report() ClientReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	cr := ClientReport{
		Kind:          r.client.Kind,
		Rate:          r.client.Rate,
		Connections:   r.client.Connections,
		MaxIdleMS:     ms(r.client.MaxIdle),
		MaxLifetimeMS: ms(r.client.MaxLifetime),
		Totals:        r.totals,
		Absorbed:      r.absorbed,
		Seconds:       []Second{},
		Latency:       r.latency.percentiles(),
		ScheduleLag:   r.lag.percentiles(),
		Pods:          maps.Clone(r.pods),
		Statuses:      maps.Clone(r.statuses),
		ProxyRetried:  r.retried,

		LatencyHistogram:     r.latency.encode(),
		ScheduleLagHistogram: r.lag.encode(),
	}
	if len(r.proxied) > 0 {
		cr.ProxyReasons = maps.Clone(r.proxied)
	}
	for _, sec := range slices.Sorted(maps.Keys(r.seconds)) {
		cr.Seconds = append(cr.Seconds, Second{Time: time.Unix(sec, 0).UTC(), Counts: *r.seconds[sec]})
	}
	return cr
}

// An Event is one line of the events file: one request, for joining with
// the server's logs by ID. Durations are in milliseconds from Time.
type Event struct {
	ID          string  `json:"id"`
	Client      Kind    `json:"client"`
	Time        string  `json:"time"`
	LagMS       float64 `json:"lagMs"`
	ConnectMS   float64 `json:"connectMs,omitempty"`
	FirstByteMS float64 `json:"firstByteMs,omitempty"`
	TotalMS     float64 `json:"totalMs"`
	Class       Class   `json:"class"`
	Status      int     `json:"status,omitempty"`
	Pod         string  `json:"pod,omitempty"`
	// Proxy and Upstreams are Result's, if any.
	Proxy     proxy.Reason `json:"proxy,omitempty"`
	Upstreams string       `json:"upstreams,omitempty"`
	Addr      string       `json:"addr,omitempty"`
	// Reused is ConnRequests > 0, for readers that want only that.
	Reused       bool    `json:"reused,omitempty"`
	ConnRequests int     `json:"connRequests,omitempty"`
	ConnAgeMS    float64 `json:"connAgeMs,omitempty"`
	Attempts     int     `json:"attempts"`
	FirstClass   *Class  `json:"firstClass,omitempty"`
	// FirstFailure and Reprobe are Result's, if any.
	FirstFailure *EventAttempt `json:"firstFailure,omitempty"`
	Reprobe      *EventReprobe `json:"reprobe,omitempty"`
	Error        string        `json:"error,omitempty"`
}

// An EventReprobe is a [Reprobe] in an event line, its durations in
// milliseconds: AtMS from the event's time.
type EventReprobe struct {
	Class   Class   `json:"class"`
	Addr    string  `json:"addr,omitempty"`
	Pod     string  `json:"pod,omitempty"`
	Status  int     `json:"status,omitempty"`
	AtMS    float64 `json:"atMs"`
	TotalMS float64 `json:"totalMs"`
}

// An EventAttempt is an [Attempt] in an event line, its durations in
// milliseconds from the event's time.
type EventAttempt struct {
	Class        Class        `json:"class"`
	Proxy        proxy.Reason `json:"proxy,omitempty"`
	Upstreams    string       `json:"upstreams,omitempty"`
	Addr         string       `json:"addr,omitempty"`
	ConnRequests int          `json:"connRequests,omitempty"`
	ConnAgeMS    float64      `json:"connAgeMs,omitempty"`
	ConnectMS    float64      `json:"connectMs,omitempty"`
	TotalMS      float64      `json:"totalMs"`
	Error        string       `json:"error,omitempty"`
}

// EventOf returns the event line of r.
func EventOf(r *Result) Event {
	e := Event{
		ID:           r.ID,
		Client:       r.Client,
		Time:         r.Time.UTC().Format(time.RFC3339Nano),
		LagMS:        ms(r.Lag),
		ConnectMS:    ms(r.Connect),
		FirstByteMS:  ms(r.FirstByte),
		TotalMS:      ms(r.Total),
		Class:        r.Class,
		Status:       r.Status,
		Pod:          r.Pod,
		Proxy:        r.Proxy,
		Upstreams:    r.Upstreams,
		Reused:       r.Reused(),
		ConnRequests: r.ConnRequests,
		ConnAgeMS:    ms(r.ConnAge),
		Attempts:     r.Attempts,
	}
	e.Addr = addrText(r.Addr)
	if r.Attempts > 1 {
		first := r.FirstClass
		e.FirstClass = &first
	}
	if f := r.FirstFailure; f != nil {
		e.FirstFailure = &EventAttempt{Class: f.Class, Proxy: f.Proxy, Upstreams: f.Upstreams, Addr: addrText(f.Addr), ConnRequests: f.ConnRequests, ConnAgeMS: ms(f.ConnAge),
			ConnectMS: ms(f.Connect), TotalMS: ms(f.Total), Error: errText(f.Err)}
	}
	if p := r.Reprobe; p != nil {
		e.Reprobe = &EventReprobe{Class: p.Class, Addr: addrText(p.Addr), Pod: p.Pod, Status: p.Status, AtMS: ms(p.At), TotalMS: ms(p.Total)}
	}
	e.Error = errText(r.Err)
	return e
}

// addrText spells ap as an event line does: empty for the zero AddrPort.
func addrText(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return ""
	}
	return ap.String()
}

// parseAddr parses an address that addrText spelled.
func parseAddr(s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, nil
	}
	return netip.ParseAddrPort(s)
}

// errText is the text of err in an event line: empty for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// parseErr returns an error with the text that errText gave, or nil.
func parseErr(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// result returns the Result that event line e records, as EventOf wrote
// it: its Time in UTC, and its Err an error with the text of the one
// recorded.
func (e *Event) result() (Result, error) {
	at, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return Result{}, fmt.Errorf("request %s: time: %w", e.ID, err)
	}
	r := Result{
		ID:           e.ID,
		Client:       e.Client,
		Time:         at,
		Lag:          DurationMS(e.LagMS),
		Connect:      DurationMS(e.ConnectMS),
		FirstByte:    DurationMS(e.FirstByteMS),
		Total:        DurationMS(e.TotalMS),
		Class:        e.Class,
		Status:       e.Status,
		Pod:          e.Pod,
		Proxy:        e.Proxy,
		Upstreams:    e.Upstreams,
		ConnRequests: e.ConnRequests,
		ConnAge:      DurationMS(e.ConnAgeMS),
		Attempts:     e.Attempts,
		FirstClass:   e.Class,
	}
	if e.Reused && e.ConnRequests == 0 {
		// A line of a writer that recorded only that the connection was
		// reused.
		r.ConnRequests = 1
	}
	if r.Addr, err = parseAddr(e.Addr); err != nil {
		return Result{}, fmt.Errorf("request %s: addr: %w", e.ID, err)
	}
	if e.FirstClass != nil {
		r.FirstClass = *e.FirstClass
	}
	if f := e.FirstFailure; f != nil {
		addr, err := parseAddr(f.Addr)
		if err != nil {
			return Result{}, fmt.Errorf("request %s: firstFailure.addr: %w", e.ID, err)
		}
		r.FirstFailure = &Attempt{Class: f.Class, Proxy: f.Proxy, Upstreams: f.Upstreams, Addr: addr, ConnRequests: f.ConnRequests, ConnAge: DurationMS(f.ConnAgeMS),
			Connect: DurationMS(f.ConnectMS), Total: DurationMS(f.TotalMS), Err: parseErr(f.Error)}
	}
	if p := e.Reprobe; p != nil {
		addr, err := parseAddr(p.Addr)
		if err != nil {
			return Result{}, fmt.Errorf("request %s: reprobe.addr: %w", e.ID, err)
		}
		r.Reprobe = &Reprobe{Class: p.Class, Addr: addr, Pod: p.Pod, Status: p.Status, At: DurationMS(p.AtMS), Total: DurationMS(p.TotalMS)}
	}
	r.Err = parseErr(e.Error)
	return r, nil
}

// A resultSink hands each request's result to a generator's OnResult and,
// as an event line, to its Events writer, one result at a time; either may
// be nil.
type resultSink struct {
	onResult func(Result)

	mu  sync.Mutex
	w   *bufio.Writer // nil for no events
	enc *json.Encoder
	err error
}

func newResultSink(onResult func(Result), events io.Writer) *resultSink {
	s := &resultSink{onResult: onResult}
	if events != nil {
		s.w = bufio.NewWriterSize(events, 64<<10)
		s.enc = json.NewEncoder(s.w)
	}
	return s
}

func (s *resultSink) put(r *Result) {
	if s.onResult == nil && s.enc == nil {
		return
	}
	var e Event
	if s.enc != nil {
		e = EventOf(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onResult != nil {
		s.onResult(*r)
	}
	if s.enc != nil && s.err == nil {
		s.err = s.enc.Encode(e)
	}
}

// flush writes the buffered event lines, and returns the first error of
// writing them.
func (s *resultSink) flush() error {
	if s.w == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if s.err != nil {
		return fmt.Errorf("write events: %w", s.err)
	}
	return nil
}
