package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
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
	// default.
	DefaultConnectTimeout = 5 * time.Second
)

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

// Config configures the sidecar. The zero Config forwards port
// DefaultPort of every interface to DefaultUpstream, with Envoy's
// defaults, logging JSON to nowhere.
type Config struct {
	// Listen is the downstream listener's address, host:port. Empty means
	// port DefaultPort of every interface; port 0 picks a free one, which
	// the "listening" event reports.
	Listen string
	// Upstream is the app's address, host:port. Empty means
	// DefaultUpstream.
	Upstream string
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
	// Timeout is the route timeout, from the request's arrival to the
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
	c.Listen = cmp.Or(c.Listen, fmt.Sprintf(":%d", DefaultPort))
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
	if _, _, err := net.SplitHostPort(c.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("upstream %q: %w", c.Upstream, err))
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
	return map[string]any{
		"listen": c.Listen, "upstream": c.Upstream, "admin": c.Admin,
		"on_sigterm": c.OnSIGTERM, "drain_time": c.DrainTime.String(),
		"termination_drain": c.TerminationDrain.String(), "exit_on_zero_connections": c.ExitOnZeroConnections,
		"timeout": timeout, "connect_timeout": c.ConnectTimeout.String(), "hold_file": c.HoldFile,
		"log_format": c.LogFormat, "access_log": c.AccessLog,
	}
}
