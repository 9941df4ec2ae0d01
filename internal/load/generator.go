package load

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/closingtime-dev/closingtime/internal/labpb"
	"github.com/closingtime-dev/closingtime/retry"
)

// Defaults of a zero [Config] and [Client].
const (
	// DefaultRate is the request rate of a client with no rate: the seeds'
	// 50 requests per second.
	DefaultRate = 50.0
	// DefaultDuration is how long a run sends requests.
	DefaultDuration = 10 * time.Second
	// DefaultConnectTimeout bounds a connect, as the seeds' 2 s client
	// timeout does.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultResponseTimeout bounds the response, from when the connection
	// is ready.
	DefaultResponseTimeout = 2 * time.Second
	// DefaultConnections is the size of a keep-alive client's pool.
	DefaultConnections = 8
)

// Headers that the generator sends and reads.
const (
	// RequestIDHeader carries each request's unique id, which the lab
	// server logs, so that client and server records join.
	RequestIDHeader = "X-Request-Id"
	// PodHeader carries the name of the pod that served a response.
	PodHeader = "X-Pod-Name"
)

// A Kind is a client's connection habit.
type Kind uint8

const (
	// NewConn dials a new TCP connection for each request and closes it
	// after the response.
	NewConn Kind = iota
	// KeepAlive sends requests over a pool of persistent connections.
	KeepAlive
)

var kindNames = [...]string{NewConn: "new-conn", KeepAlive: "keep-alive"}

// String returns the kind's name as the command line and reports spell it.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MarshalText encodes the kind as its name.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) {
		return nil, fmt.Errorf("marshal kind %d: unknown kind", uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText decodes a kind from its name.
func (k *Kind) UnmarshalText(text []byte) error {
	kind, err := ParseKind(string(text))
	if err != nil {
		return err
	}
	*k = kind
	return nil
}

// ParseKind returns the kind named s: "new-conn" or "keep-alive".
func ParseKind(s string) (Kind, error) {
	for i, name := range kindNames {
		if name == s {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown client kind %q: accepted kinds are new-conn, keep-alive", s)
}

// A Client is one stream of requests of a run: a connection habit and a
// rate.
type Client struct {
	// Kind is the client's connection habit.
	Kind Kind
	// Rate is in requests per second. Zero means DefaultRate; negative is
	// invalid.
	Rate float64
	// Connections is the size of a KeepAlive client's pool; a request
	// waits for a free connection when all are busy. Zero means
	// DefaultConnections. Ignored for NewConn.
	Connections int
	// Limits retire a KeepAlive client's connections; zero means none.
	// Ignored for NewConn.
	Limits
}

// Config configures a [Generator].
type Config struct {
	// URL is the target, an http URL. Each request is a GET of it.
	URL string
	// Clients are the streams of requests, at most one of each kind. None
	// means one NewConn client at DefaultRate.
	Clients []Client
	// Duration is how long requests are sent. Zero means DefaultDuration.
	Duration time.Duration
	// ConnectTimeout bounds each connect, and the wait for a free pooled
	// connection. Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds each response, counted from when its
	// connection is ready. Zero means DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// Dial makes connections. Nil means a net.Dialer. The local cluster
	// sets it to route a Service's address through its routing view.
	Dial Dialer
	// Resolve, if not nil, makes a gRPC target's channels resolve its host
	// themselves (a headless Service's clients); nil dials the host as it
	// is. It is the gRPC target's alone.
	Resolve *Resolve
	// Retry, if not nil, makes each client resend what is safe to resend
	// (see package retry), on a new connection. Nil means no retries:
	// every failure is counted.
	Retry *retry.Policy
	// OnResult, if not nil, is called with each request's Result when it
	// completes: the typed record, for a caller in this process. Calls do
	// not overlap; each must return soon, as the generator's other
	// requests wait to record theirs.
	OnResult func(Result)
	// Events, if not nil, receives one JSON line per request when it
	// completes (see [Event]): the record for another process, as
	// `closingtime load` writes it.
	Events io.Writer
}

// A Generator sends the requests of one run. It is used once.
type Generator struct {
	cfg     Config
	target  *url.URL
	clients []*stream
	runID   string
}

// stream is a Client in a run, with what sends its requests.
type stream struct {
	Client
	index    int
	sender   sender
	recorder *recorder
}

// A sender sends the requests of one stream, each attempt recorded in its
// request's log: over the stream's connections, retried as the run's
// policy says, or, fresh, once on a new connection of its own (a
// re-probe).
type sender interface {
	send(id string, log *attemptLog, fresh bool) error
	// close closes the idle connections, once no request is in flight.
	close()
}

// httpSender sends GETs of the target over HTTP/1.1 (a [client]) or
// HTTP/2 (an [h2Client]).
type httpSender struct {
	rt http.RoundTripper // the stream's client, or a retry.Transport around it
	// fresh makes a connection of its own for each request: the retries
	// go out on it, and the re-probes.
	fresh     http.RoundTripper
	closeIdle func()
	template  *http.Request // the request, without its id
}

func (h *httpSender) send(id string, log *attemptLog, fresh bool) error {
	rt := h.rt
	if fresh {
		rt = h.fresh
	}
	resp, err := rt.RoundTrip(h.request(id, log))
	if resp != nil {
		resp.Body.Close()
	}
	return err
}

func (h *httpSender) close() { h.closeIdle() }

// New checks cfg and returns a Generator for it. Every error it returns is
// about cfg.
func New(cfg Config) (*Generator, error) {
	target, err := parseTarget(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Duration < 0 || cfg.ConnectTimeout < 0 || cfg.ResponseTimeout < 0 {
		return nil, errors.New("duration and timeouts must not be negative")
	}
	cfg.Duration = cmp.Or(cfg.Duration, DefaultDuration)
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, DefaultConnectTimeout)
	cfg.ResponseTimeout = cmp.Or(cfg.ResponseTimeout, DefaultResponseTimeout)
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []Client{{Kind: NewConn}}
	}
	var id [4]byte
	rand.Read(id[:])
	g := &Generator{cfg: cfg, target: target, runID: hex.EncodeToString(id[:])}
	address := hostPort(target)
	var template *http.Request
	if target.Scheme != "grpc" {
		template, err = newTemplate(target)
		if err != nil {
			return nil, err
		}
		if cfg.Resolve != nil {
			return nil, errors.New("resolving the host (--resolve-interval) is the gRPC client's: an HTTP target is dialed as it is")
		}
	} else if cfg.Retry != nil {
		return nil, errors.New("retries (--retry) are the HTTP client's: grpc-go's own transparent retries are counted as absorbed")
	}
	seen := make(map[Kind]bool)
	for i, cl := range cfg.Clients {
		if _, err := cl.Kind.MarshalText(); err != nil {
			return nil, err
		}
		if seen[cl.Kind] {
			return nil, fmt.Errorf("client kind %s given twice", cl.Kind)
		}
		seen[cl.Kind] = true
		switch {
		case cl.Rate < 0 || math.IsNaN(cl.Rate) || math.IsInf(cl.Rate, 0):
			return nil, fmt.Errorf("%s rate %v: want a positive number of requests per second", cl.Kind, cl.Rate)
		case cl.Rate == 0:
			cl.Rate = DefaultRate
		}
		if cl.Connections < 0 {
			return nil, fmt.Errorf("%s connections %d: must not be negative", cl.Kind, cl.Connections)
		}
		if cl.MaxIdle < 0 || cl.MaxLifetime < 0 {
			return nil, fmt.Errorf("%s max idle %v, max lifetime %v: must not be negative", cl.Kind, cl.MaxIdle, cl.MaxLifetime)
		}
		connections := 0
		if cl.Kind == KeepAlive {
			cl.Connections = cmp.Or(cl.Connections, DefaultConnections)
			connections = cl.Connections
		} else {
			cl.Connections, cl.Limits = 0, Limits{}
		}
		s := &stream{Client: cl, index: i, recorder: newRecorder(cl)}
		if template == nil {
			s.sender = newGRPCSender(cfg.Dial, address, grpcMethod(target), cfg.Resolve, cfg.ConnectTimeout, cfg.ResponseTimeout, connections, cl.Limits)
		} else {
			h := &httpSender{template: template}
			if target.Scheme == "h2c" {
				c := newH2Client(cfg.Dial, cfg.ConnectTimeout, cfg.ResponseTimeout, connections, cl.Limits)
				h.rt, h.closeIdle = c, c.close
				h.fresh = newH2Client(cfg.Dial, cfg.ConnectTimeout, cfg.ResponseTimeout, 0, Limits{})
			} else {
				c := newClient(cfg.Dial, address, cfg.ConnectTimeout, cfg.ResponseTimeout, connections, cl.Limits)
				h.rt, h.closeIdle = c, c.close
				h.fresh = newClient(cfg.Dial, address, cfg.ConnectTimeout, cfg.ResponseTimeout, 0, Limits{})
			}
			if cfg.Retry != nil {
				h.rt = &retry.Transport{Base: h.rt, Fresh: h.fresh, Policy: *cfg.Retry}
			}
			s.sender = h
		}
		g.clients = append(g.clients, s)
	}
	return g, nil
}

// parseTarget parses raw, the target of a run: an http, h2c or grpc URL
// with a host.
// The error for anything else says which form is wanted, and, for an
// address without its scheme ("127.0.0.1:8080/work", which net/url takes
// for a scheme or rejects with "first path segment in URL cannot contain
// colon"), the URL it likely stands for.
func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	validPort := false
	if err == nil {
		port, perr := strconv.Atoi(u.Port())
		validPort = u.Port() == "" || (perr == nil && port > 0 && port <= 65535)
	}
	if err == nil && validPort && u.User == nil && u.Hostname() != "" {
		if u.Scheme == "http" || u.Scheme == "h2c" {
			return u, nil
		}
		if u.Scheme == "grpc" && u.Port() != "" && !grpcExtras(raw, u) && u.RawPath == "" && (u.Path == "" || u.Path == "/" || CheckGRPCMethod(u.Path) == nil) {
			return u, nil
		}
	}
	msg := fmt.Sprintf("target URL %q: want http://HOST:PORT/PATH, h2c://HOST:PORT/PATH or grpc://HOST:PORT[/SERVICE/METHOD]", raw)
	switch {
	case err == nil && !validPort:
		msg += fmt.Sprintf(": port %q is not a port from 1 to 65535", u.Port())
	case err == nil && u.User != nil:
		msg += ": no user information"
	case err == nil && u.Hostname() == "" && strings.Contains(raw, "://"):
		msg += ": no host"
	case !strings.Contains(raw, "://"):
		if u, err := url.Parse("http://" + raw); err == nil && u.Host != "" {
			msg += ", such as " + u.String()
		}
	case err != nil:
		msg += ": " + strings.TrimPrefix(err.Error(), fmt.Sprintf("parse %q: ", raw))
	case u.Scheme == "grpc" && u.Port() == "":
		msg += ": a gRPC target names its port"
	case u.Scheme == "grpc" && grpcExtras(raw, u):
		msg += ": a gRPC target has no query or fragment"
	case u.Scheme == "grpc" && u.RawPath != "":
		msg += ": a gRPC target's method is written as it is, with no escapes"
	case u.Scheme == "grpc":
		msg += ": " + CheckGRPCMethod(u.Path).Error()
	default:
		msg += ": the requests are plain HTTP/1.1, HTTP/2 without TLS (h2c) or gRPC, not " + u.Scheme
	}
	return nil, errors.New(msg)
}

// grpcExtras reports whether u, parsed from raw, has a query or a
// fragment, even an empty one ("grpc://h:1/a.B/C?").
func grpcExtras(raw string, u *url.URL) bool {
	return u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#")
}

// CheckGRPCMethod checks that path names a gRPC method as a call's path
// does: "/SERVICE/METHOD", SERVICE its full name, package included
// ("grpc.health.v1.Health"), and METHOD a name ("Check").
func CheckGRPCMethod(path string) error {
	const form = "want /SERVICE/METHOD, such as /grpc.health.v1.Health/Check"
	rest, ok := strings.CutPrefix(path, "/")
	service, method, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !isIdent(method) {
		return fmt.Errorf("gRPC method %q: %s", path, form)
	}
	for part := range strings.SplitSeq(service, ".") {
		if !isIdent(part) {
			return fmt.Errorf("gRPC method %q: %s", path, form)
		}
	}
	return nil
}

// isIdent reports whether s is a protobuf identifier: a letter or an
// underscore, then letters, digits and underscores.
func isIdent(s string) bool {
	for i, r := range s {
		letter := r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// grpcMethod returns the method that the calls to target, a grpc URL,
// make: the one its path names, or, with none ("" or "/"), the lab
// server's Work.
func grpcMethod(target *url.URL) string {
	if target.Path == "" || target.Path == "/" {
		return labpb.Lab_Work_FullMethodName
	}
	return target.Path
}

// newTemplate returns the GET of target, an http or h2c URL, without its
// id: an h2c URL's request is an http one, sent over HTTP/2.
func newTemplate(target *url.URL) (*http.Request, error) {
	u := *target
	u.Scheme = "http"
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("target URL: %w", err)
	}
	req.Header.Set("User-Agent", userAgent)
	return req, nil
}

// userAgent is the User-Agent of the generator's requests.
const userAgent = "closingtime-load"

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Run sends requests until the configured duration has passed or ctx is
// done, whichever comes first, then waits for the requests in flight to
// complete or time out, and returns what they did. A request in flight
// when ctx is done is still counted: each is bounded by the connect and
// response timeouts (and the retry policy's backoff, if any, and its
// re-probe's own timeouts), not by ctx. The error is about writing events.
func (g *Generator) Run(ctx context.Context) (*Report, error) {
	results := newResultSink(g.cfg.OnResult, g.cfg.Events)
	start := time.Now()
	end := start.Add(g.cfg.Duration)
	var inFlight, pacers sync.WaitGroup
	for _, s := range g.clients {
		s.recorder.results = results
		pacers.Go(func() { g.pace(ctx, s, start, end, &inFlight) })
	}
	pacers.Wait()
	stopped := time.Now()
	inFlight.Wait()
	report := &Report{URL: g.target.String(), Start: start.UTC(), End: stopped.UTC()}
	for _, s := range g.clients {
		s.sender.close()
		cr := s.recorder.report()
		if r := g.cfg.Resolve; r != nil {
			cr.ResolveIntervalMS = ms(cmp.Or(r.Interval, DefaultResolveInterval))
		}
		report.Clients = append(report.Clients, cr)
	}
	return report, results.flush()
}

// pace starts the requests of s on their schedule, from start until end or
// until ctx is done. A request whose time has come starts at once, whatever
// the requests before it are doing: it goes to an idle worker, or to a new
// one if all are busy. When the pacer falls behind, it starts every request
// that is due without waiting. Workers outlive pace; inFlight counts them.
func (g *Generator) pace(ctx context.Context, s *stream, start, end time.Time, inFlight *sync.WaitGroup) {
	interval := float64(time.Second) / s.Rate
	// Requests closer together than busyInterval keep the process busy
	// enough that the runtime's timers fire on time; a nanosleep per
	// request would then cost the pacer its P at each wake, and a wait
	// for a P that the senders hold.
	precise := time.Duration(interval) >= busyInterval
	idPrefix := g.runID + "-" + strconv.Itoa(s.index) + "-"
	// Workers are reused rather than a goroutine started per request: a
	// new goroutine grows its stack again for every request.
	tasks := make(chan task)
	defer close(tasks)
	timer := time.NewTimer(0)
	<-timer.C
	for seq := 0; ; seq++ {
		at := start.Add(time.Duration(float64(seq) * interval))
		if !at.Before(end) || !waitUntil(ctx, timer, at, precise) {
			return
		}
		t := task{id: idPrefix + strconv.Itoa(seq), at: at}
		select {
		case tasks <- t:
		default:
			inFlight.Go(func() {
				s.send(t)
				for t := range tasks {
					s.send(t)
				}
			})
		}
	}
}

// A task is a request to send: its id and scheduled time.
type task struct {
	id string
	at time.Time
}

// coarseSlack is how late a Go timer may fire in an idle process;
// waitUntil sleeps the last stretch before a request's time with
// sleepPrecise instead, unless the requests come closer together than
// busyInterval.
const (
	coarseSlack  = 2 * time.Millisecond
	busyInterval = 100 * time.Microsecond
)

// waitUntil waits until at, and reports false if ctx is done first. ctx
// is checked at least every coarseSlack. With precise, the last stretch
// is slept with sleepPrecise; without, the runtime's timer waits it all.
func waitUntil(ctx context.Context, timer *time.Timer, at time.Time, precise bool) bool {
	slack := time.Duration(0)
	if precise {
		slack = coarseSlack
	}
	if wait := time.Until(at) - slack; wait > 0 {
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
	if ctx.Err() != nil {
		return false
	}
	if precise {
		sleepPrecise(time.Until(at))
	}
	return true
}

// send sends the request of t, re-probes it if its failed attempt was on
// a reused connection, and records its result.
func (s *stream) send(t task) {
	began := time.Now()
	var log attemptLog
	err := s.sender.send(t.id, &log, false)
	r := newResult(s.Kind, t.id, t.at, began, log.attempts, err)
	if a, ok := r.FailedAttempt(); ok && a.ConnRequests > 0 {
		r.Reprobe = s.reprobe(t)
	}
	s.recorder.record(r)
}

// request returns the request of the run with id as its X-Request-Id,
// whose attempts go to log.
func (h *httpSender) request(id string, log *attemptLog) *http.Request {
	req := h.template.WithContext(withAttemptLog(context.Background(), log))
	req.Header = http.Header{
		"User-Agent":    h.template.Header["User-Agent"],
		RequestIDHeader: {id},
	}
	return req
}
