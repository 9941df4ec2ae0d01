package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/closingtime-dev/closingtime/internal/target"
)

// The defaults, those of the proxies the sidecar imitates.
const (
	// DefaultPort is the port of the downstream listener: that of seed
	// 003's Envoy.
	DefaultPort = 5000
	// DefaultUpstream is the app the sidecar forwards to, on its pod's
	// own loopback: seed 003's gRPC port.
	DefaultUpstream = "127.0.0.1:50051"
	// DefaultAdmin is the admin listener: Envoy's customary port, on the
	// pod's loopback.
	DefaultAdmin = "127.0.0.1:9901"
	// DefaultDrainTime is how long a graceful drain_listeners keeps the
	// listener open: Istio's drainDuration, which it gives Envoy as its
	// --drain-time-s.
	DefaultDrainTime = 45 * time.Second
	// DefaultTerminationDrain is how long ModeDrain serves on after
	// SIGTERM: Istio's terminationDrainDuration.
	DefaultTerminationDrain = 5 * time.Second
	// DefaultTimeout is the route timeout: Envoy's default for a route.
	DefaultTimeout = 15 * time.Second
	// DefaultConnectTimeout bounds an upstream connect: Envoy's cluster
	// default, and ingress-NGINX's proxy-connect-timeout.
	DefaultConnectTimeout = 5 * time.Second
)

// The edge's defaults, those of ingress-NGINX's ConfigMap.
const (
	// DefaultReadTimeout bounds the wait for each read of an upstream's
	// response, its header's first byte included: proxy-read-timeout.
	DefaultReadTimeout = 60 * time.Second
	// DefaultKeepalive is how many idle upstream connections the edge
	// keeps: upstream-keepalive-connections.
	DefaultKeepalive = 320
	// DefaultKeepaliveRequests is how many requests an upstream
	// connection carries before the edge closes it:
	// upstream-keepalive-requests.
	DefaultKeepaliveRequests = 10000
	// DefaultKeepaliveTimeout is how long an upstream connection stays
	// idle before the edge closes it: upstream-keepalive-timeout.
	DefaultKeepaliveTimeout = 60 * time.Second
	// DefaultKeepaliveTime is how long the edge uses an upstream
	// connection, from its connect: upstream-keepalive-time.
	DefaultKeepaliveTime = time.Hour
	// DefaultNextUpstreamTries is how many attempts a request gets, the
	// first included: proxy-next-upstream-tries.
	DefaultNextUpstreamTries = 3
	// DefaultUpdateDelay is the time from a change of a Service's
	// EndpointSlices, as the edge's watch sees it, to the balancer's use
	// of it: ingress-NGINX's Lua balancer takes the controller's new
	// backends every second (BACKENDS_SYNC_INTERVAL); the controller's
	// own sync, rate-limited to 0.3 a second by default, can add up to
	// 3.3 s more.
	DefaultUpdateDelay = time.Second
)

// A Role is what the proxy stands for.
type Role string

const (
	// RoleSidecar is a mesh's sidecar, Envoy under Istio's agent: one
	// upstream, the app on its pod's loopback; Envoy's answers.
	RoleSidecar Role = "sidecar"
	// RoleEdge is an ingress, ingress-NGINX: a Service's endpoints,
	// straight to their pod addresses, round-robin, over a keep-alive
	// pool, with retries on the next endpoint; NGINX's answers.
	RoleEdge Role = "edge"
)

// Roles returns every role, the default first.
func Roles() []Role { return []Role{RoleSidecar, RoleEdge} }

// NextUpstream is when the edge tries a request's next endpoint, NGINX's
// proxy_next_upstream: after an error (a refused, reset or closed
// upstream), after a timeout (of the connect or of the response), and
// whether a non-idempotent request (POST, LOCK, PATCH) may be tried again
// once it may have reached an upstream. Its zero value is ingress-NGINX's
// default, "error timeout"; NextUpstreamOff tries no other.
type NextUpstream uint8

const (
	NextUpstreamError NextUpstream = 1 << iota
	NextUpstreamTimeout
	NextUpstreamNonIdempotent
	// NextUpstreamOff tries no next endpoint.
	NextUpstreamOff
)

// ParseNextUpstream parses NGINX's words for proxy_next_upstream,
// separated by spaces or commas: error, timeout, non_idempotent, or off
// alone.
func ParseNextUpstream(s string) (NextUpstream, error) {
	var n NextUpstream
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		switch w {
		case "error":
			n |= NextUpstreamError
		case "timeout":
			n |= NextUpstreamTimeout
		case "non_idempotent":
			n |= NextUpstreamNonIdempotent
		case "off":
			n |= NextUpstreamOff
		default:
			return 0, fmt.Errorf("next upstream %q: unknown %q, want error, timeout, non_idempotent or off", s, w)
		}
	}
	if n == 0 || (n&NextUpstreamOff != 0 && n != NextUpstreamOff) {
		return 0, fmt.Errorf("next upstream %q: want error, timeout and non_idempotent, or off alone", s)
	}
	return n, nil
}

// String returns n in NGINX's words.
func (n NextUpstream) String() string {
	if n == 0 {
		n = NextUpstreamError | NextUpstreamTimeout
	}
	var words []string
	for _, w := range []struct {
		bit  NextUpstream
		word string
	}{{NextUpstreamError, "error"}, {NextUpstreamTimeout, "timeout"}, {NextUpstreamNonIdempotent, "non_idempotent"}, {NextUpstreamOff, "off"}} {
		if n&w.bit != 0 {
			words = append(words, w.word)
		}
	}
	return strings.Join(words, " ")
}

// allows reports whether a request of method whose attempt failed with f
// may be tried on a next endpoint (ngx_http_upstream_next): never a POST,
// LOCK or PATCH that may have reached the upstream, unless
// non_idempotent is given.
func (n NextUpstream) allows(f *failure, method string) bool {
	if n == 0 {
		n = NextUpstreamError | NextUpstreamTimeout
	}
	switch {
	case n&NextUpstreamOff != 0:
		return false
	case f.sent && (method == http.MethodPost || method == "LOCK" || method == http.MethodPatch) && n&NextUpstreamNonIdempotent == 0:
		return false
	case f.timeout:
		return n&NextUpstreamTimeout != 0
	}
	return n&NextUpstreamError != 0
}

// A Mode is what the sidecar does on SIGTERM.
type Mode string

const (
	// ModeExit is Envoy's own: close the listeners and every connection,
	// and exit 0 at once. Requests in flight are cut.
	ModeExit Mode = "exit"
	// ModeDrain is Istio's agent in front of Envoy: drain for the
	// termination drain, the listener open and every response with
	// Connection: close, then exit 0 as ModeExit does (or, with
	// ExitOnZeroConnections, once no downstream connection is left).
	ModeDrain Mode = "drain"
)

// Modes returns every mode, the default first.
func Modes() []Mode { return []Mode{ModeExit, ModeDrain} }

// Config configures the proxy. The zero Config is a sidecar that
// forwards port DefaultPort of every interface to DefaultUpstream, with
// Envoy's defaults, logging JSON to nowhere.
type Config struct {
	// Role is the proxy's role; RoleSidecar if empty. The fields below
	// say which role reads them.
	Role Role
	// Listen is the downstream listener's address, host:port. Empty means
	// port DefaultPort of every interface; port 0 picks a free one, which
	// the "listening" event reports.
	Listen string
	// Upstream is the sidecar's app, host:port. Empty means
	// DefaultUpstream.
	Upstream string
	// Service is the edge's Service, namespace/name, whose ready
	// endpoints it routes to, from its own watch of the Service's
	// EndpointSlices through Kubeconfig. Either Service or Upstreams is
	// set for the edge.
	Service string
	// ServicePort is the port of Service the edge routes to: its name,
	// or its number; empty for a Service of one port.
	ServicePort string
	// Kubeconfig is the kubeconfig file by which the edge watches
	// Service; empty means the in-cluster configuration of a pod.
	Kubeconfig string
	// MinUpdateDelay and MaxUpdateDelay bound the edge's delay, drawn for
	// each change, from its watch's sight of a change of the endpoints to
	// its balancer's use of it; changes apply in order. Both zero means
	// DefaultUpdateDelay; both negative, none.
	MinUpdateDelay, MaxUpdateDelay time.Duration
	// Upstreams are the edge's endpoints, host:port each, when it has no
	// Service: a fixed upstream group.
	Upstreams []string
	// Keepalive is how many idle upstream connections the edge keeps for
	// reuse. Zero means DefaultKeepalive; negative, none: a connection
	// per request.
	Keepalive int
	// KeepaliveRequests is how many requests an upstream connection
	// carries at most. Zero means DefaultKeepaliveRequests.
	KeepaliveRequests int
	// KeepaliveTimeout is how long an upstream connection may stay idle.
	// Zero means DefaultKeepaliveTimeout.
	KeepaliveTimeout time.Duration
	// KeepaliveTime is an upstream connection's longest use, from its
	// connect. Zero means DefaultKeepaliveTime.
	KeepaliveTime time.Duration
	// NextUpstream is when the edge tries a request's next endpoint.
	NextUpstream NextUpstream
	// NextUpstreamTries is how many attempts the edge makes of a request,
	// the first included. Zero means DefaultNextUpstreamTries.
	NextUpstreamTries int
	// ReadTimeout bounds the edge's wait for each read of an upstream's
	// response; past it, before the header, the edge answers 504. Zero
	// means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Admin is the admin listener's address; empty means DefaultAdmin,
	// "none" none.
	Admin string
	// OnSIGTERM is what to do on SIGTERM (or SIGINT). Empty means ModeExit.
	OnSIGTERM Mode
	// DrainTime is how long a graceful drain_listeners keeps the
	// listener open. Zero means DefaultDrainTime.
	DrainTime time.Duration
	// TerminationDrain is how long ModeDrain serves on after SIGTERM
	// before the exit. Zero means DefaultTerminationDrain.
	TerminationDrain time.Duration
	// ExitOnZeroConnections makes a SIGTERM's drain, once
	// TerminationDrain is over, wait for the last downstream connection to close before the
	// exit, as Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS does.
	ExitOnZeroConnections bool
	// Timeout is the sidecar's route timeout, from the request's arrival to the
	// end of the upstream's response: past it the sidecar answers 504 (or
	// cuts a response already begun). Zero means DefaultTimeout; negative,
	// none.
	Timeout time.Duration
	// ConnectTimeout bounds an upstream connect. Zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// HoldFile, if set, is a file whose existence the sidecar waits for
	// before it opens its listener: the app's readiness signal, as seed
	// 003's wrapper held Envoy until /tmp/start_success existed. The
	// admin listener answers meanwhile, /ready with 503.
	HoldFile string
	// PodName is the name on the sidecar's own answers (X-Pod-Name) and
	// log lines. Empty means the host name.
	PodName string
	// LogFormat is the format of the log lines. Empty means
	// target.LogJSON.
	LogFormat target.LogFormat
	// AccessLog logs a "request" event for every request; without it only
	// the requests the sidecar answered itself, or that failed, are
	// logged.
	AccessLog bool
	// Log receives the log lines. Nil means they are discarded.
	Log io.Writer
}

// withDefaults checks c and returns it with its defaults set.
func (c Config) withDefaults() (Config, error) {
	c.Role = cmp.Or(c.Role, RoleSidecar)
	c.Listen = cmp.Or(c.Listen, fmt.Sprintf(":%d", DefaultPort))
	switch {
	case c.MinUpdateDelay == 0 && c.MaxUpdateDelay == 0:
		c.MinUpdateDelay, c.MaxUpdateDelay = DefaultUpdateDelay, DefaultUpdateDelay
	case c.MinUpdateDelay < 0 && c.MaxUpdateDelay < 0:
		c.MinUpdateDelay, c.MaxUpdateDelay = 0, 0
	}
	c.Keepalive = cmp.Or(c.Keepalive, DefaultKeepalive)
	c.Keepalive = max(c.Keepalive, 0)
	c.KeepaliveRequests = cmp.Or(c.KeepaliveRequests, DefaultKeepaliveRequests)
	c.KeepaliveTimeout = cmp.Or(c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	c.KeepaliveTime = cmp.Or(c.KeepaliveTime, DefaultKeepaliveTime)
	c.NextUpstreamTries = cmp.Or(c.NextUpstreamTries, DefaultNextUpstreamTries)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.Upstream = cmp.Or(c.Upstream, DefaultUpstream)
	c.Admin = cmp.Or(c.Admin, DefaultAdmin)
	c.OnSIGTERM = cmp.Or(c.OnSIGTERM, ModeExit)
	c.DrainTime = cmp.Or(c.DrainTime, DefaultDrainTime)
	c.TerminationDrain = cmp.Or(c.TerminationDrain, DefaultTerminationDrain)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.LogFormat = cmp.Or(c.LogFormat, target.LogJSON)
	if c.PodName == "" {
		name, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("pod name from the host name: %w", err)
		}
		c.PodName = name
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	var errs []error
	if !slices.Contains(Modes(), c.OnSIGTERM) {
		errs = append(errs, fmt.Errorf("unknown SIGTERM mode %q", c.OnSIGTERM))
	}
	if !slices.Contains(Roles(), c.Role) {
		errs = append(errs, fmt.Errorf("unknown role %q", c.Role))
	}
	if _, _, err := net.SplitHostPort(c.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("upstream %q: %w", c.Upstream, err))
	}
	for _, u := range c.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			errs = append(errs, fmt.Errorf("upstream %q: %w", u, err))
		}
	}
	if c.Role == RoleEdge {
		if (c.Service == "") == (len(c.Upstreams) == 0) {
			errs = append(errs, errors.New("the edge routes to a Service or to upstreams: give one of them"))
		}
		if ns, name, ok := strings.Cut(c.Service, "/"); c.Service != "" && (!ok || ns == "" || name == "") {
			errs = append(errs, fmt.Errorf("service %q: want namespace/name", c.Service))
		}
	}
	if c.MinUpdateDelay < 0 || c.MaxUpdateDelay < c.MinUpdateDelay {
		errs = append(errs, fmt.Errorf("update delay %s-%s: want non-negative durations in order", c.MinUpdateDelay, c.MaxUpdateDelay))
	}
	if c.KeepaliveRequests < 0 || c.KeepaliveTimeout < 0 || c.KeepaliveTime < 0 || c.NextUpstreamTries < 0 || c.ReadTimeout < 0 {
		errs = append(errs, errors.New("the keep-alive limits, the tries and the read timeout cannot be negative"))
	}
	if c.DrainTime < 0 || c.TerminationDrain < 0 || c.ConnectTimeout < 0 {
		errs = append(errs, errors.New("the drain times and the connect timeout cannot be negative"))
	}
	return c, errors.Join(errs...)
}

// settings is the configuration as the "started" event logs it.
func (c Config) settings() map[string]any {
	timeout := "none"
	if c.Timeout > 0 {
		timeout = c.Timeout.String()
	}
	if c.Role == RoleEdge {
		return map[string]any{
			"role": c.Role, "listen": c.Listen, "service": c.Service, "port": c.ServicePort, "upstreams": c.Upstreams, "admin": c.Admin,
			"update_delay": c.MinUpdateDelay.String() + "-" + c.MaxUpdateDelay.String(),
			"keepalive":    c.Keepalive, "keepalive_requests": c.KeepaliveRequests, "keepalive_timeout": c.KeepaliveTimeout.String(),
			"keepalive_time": c.KeepaliveTime.String(), "next_upstream": c.NextUpstream.String(), "next_upstream_tries": c.NextUpstreamTries,
			"read_timeout": c.ReadTimeout.String(), "connect_timeout": c.ConnectTimeout.String(),
			"on_sigterm": c.OnSIGTERM, "drain_time": c.DrainTime.String(), "termination_drain": c.TerminationDrain.String(),
			"hold_file": c.HoldFile, "log_format": c.LogFormat, "access_log": c.AccessLog,
		}
	}
	return map[string]any{
		"role": c.Role, "listen": c.Listen, "upstream": c.Upstream, "admin": c.Admin,
		"on_sigterm": c.OnSIGTERM, "drain_time": c.DrainTime.String(),
		"termination_drain": c.TerminationDrain.String(), "exit_on_zero_connections": c.ExitOnZeroConnections,
		"timeout": timeout, "connect_timeout": c.ConnectTimeout.String(), "hold_file": c.HoldFile,
		"log_format": c.LogFormat, "access_log": c.AccessLog,
	}
}
