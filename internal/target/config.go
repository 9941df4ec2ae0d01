package target

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Defaults used when the corresponding [Config] field is zero, and by the
// flags of `closingtime serve`.
const (
	// DefaultPort is the port the server listens on when Config.Listen is
	// empty, as seed 001's app.py does.
	DefaultPort = 8080
	// DefaultGRPCPort is the port of the gRPC server when Config.Listen
	// is empty: seed 003's model server's.
	DefaultGRPCPort = 50051
	// DefaultShutdown is the shutdown mode when Config.Shutdown is empty:
	// seed 001's first experiment, an application that leaves at once.
	DefaultShutdown = ModeExit
	// DefaultWork is the time a /work request takes when `closingtime serve`
	// is given none, seed 001's WORK_MS=200. A zero Config.Work answers at
	// once.
	DefaultWork = 200 * time.Millisecond
	// DefaultIdleTimeout is how long an idle keep-alive connection stays
	// open: Node's server.keepAliveTimeout, which is what finally ends a
	// hostage connection (seed 000, cause 3).
	DefaultIdleTimeout = 5 * time.Second
	// DefaultWrapperDelay is how long the npm-like wrapper takes to exit after
	// SIGTERM: seed 000 measured 0.72 s for npm 11 as PID 1.
	DefaultWrapperDelay = 700 * time.Millisecond
	// DefaultDependencyTimeout bounds the request /health-deep makes to the
	// dependency.
	DefaultDependencyTimeout = time.Second
)

// ExitSIGTERM is the exit code of the handled shutdown modes: 128 + SIGTERM,
// what a process killed by SIGTERM reports and what Node's and Next.js's
// handlers exit with (seed 000).
const ExitSIGTERM = 143

// Mode is what the server does on SIGTERM. Each mode reproduces a behaviour
// measured in the seeds.
type Mode string

const (
	// ModeExit leaves at once, dropping every request in flight (seed 001,
	// SHUTDOWN_MODE=exit).
	ModeExit Mode = "exit"
	// ModeGraceful terminates through the graceful package: readiness fails,
	// an optional pre-stop delay serves on, the listener closes, requests in
	// flight finish and busy keep-alive connections close after their current
	// response.
	ModeGraceful Mode = "graceful"
	// ModeHostage follows Node's server.close(): the listener and the
	// connections idle at that moment close, but a connection busy at that
	// moment goes on serving further requests, without "Connection: close",
	// until it stays idle for the idle timeout. The process exits when no
	// connection is left (seed 000, cause 3).
	ModeHostage Mode = "hostage"
	// ModeIgnore installs no handler for SIGTERM at all: as PID 1 of a PID
	// namespace the kernel then ignores the signal and only SIGKILL ends the
	// process; as an ordinary process it dies by the default action (seed
	// 000, the acquitted suspect).
	ModeIgnore Mode = "ignore"
)

// Modes returns every shutdown mode, in the order the documentation gives
// them.
func Modes() []Mode { return []Mode{ModeExit, ModeGraceful, ModeHostage, ModeIgnore} }

// Wrapper is the process that runs the server as its grandchild, as a
// container's first process might.
type Wrapper string

const (
	// WrapperNone runs the server as the process itself.
	WrapperNone Wrapper = "none"
	// WrapperNPM behaves like `npm start` as PID 1 (seed 000, cause 1): on
	// SIGTERM or SIGINT it does not forward the signal; it prints npm's error
	// and exits 1 after Config.WrapperDelay, which takes its process tree
	// down with it. Its child is a WrapperSh.
	WrapperNPM Wrapper = "npm"
	// WrapperSh behaves like `sh -c` without exec: it installs no handler
	// for SIGTERM, never forwards a signal and exits with its child's status.
	WrapperSh Wrapper = "sh"
)

// Wrappers returns every wrapper, in the order the documentation gives them.
func Wrappers() []Wrapper { return []Wrapper{WrapperNone, WrapperNPM, WrapperSh} }

// Child returns the wrapper of w's child process: npm runs sh, sh runs the
// server, as `npm start` runs `sh -c next start`, which runs next-server.
func (w Wrapper) Child() Wrapper {
	if w == WrapperNPM {
		return WrapperSh
	}
	return WrapperNone
}

// LogFormat is the format of the server's log lines.
type LogFormat string

const (
	// LogJSON writes one JSON object per line.
	LogJSON LogFormat = "json"
	// LogText writes key=value pairs, one line per event.
	LogText LogFormat = "text"
)

// LogFormats returns every log format, the default first.
func LogFormats() []LogFormat { return []LogFormat{LogJSON, LogText} }

// Config configures the lab server. The zero Config is valid: a server on
// port DefaultPort of every interface whose /work answers at once and which
// leaves at once on SIGTERM, logging JSON to nowhere.
type Config struct {
	// Listen is the TCP address to listen on, as host:port. Empty means
	// port DefaultPort (DefaultGRPCPort with GRPC) on every interface. Port 0 picks a free port, which
	// the "listening" event reports.
	Listen string

	// StartupDelay is how long the server waits after it starts before it
	// opens its port, like an application that initialises slowly. Zero
	// means none.
	StartupDelay time.Duration

	// Work is the time each /work request takes, or each Work call of
	// the gRPC server. Empty means none.
	Work Work

	// GRPC serves the lab's gRPC service (labpb.Lab, whose Work takes the
	// work time) and grpc.health.v1 instead of HTTP. ModeHostage, Node's
	// way with HTTP/1 connections, is not one of its modes.
	GRPC bool

	// MaxConnectionAge, with GRPC, is how long a connection may live: past
	// it the server sends GOAWAY and lets the calls in flight finish, and
	// the client connects again, to whichever pod its resolver or the
	// Service's routing gives it (grpc-go's
	// keepalive.ServerParameters.MaxConnectionAge). Zero means for ever.
	MaxConnectionAge time.Duration

	// Shutdown is what the server does on SIGTERM. Empty means
	// DefaultShutdown.
	Shutdown Mode

	// PreStopDelay is, in ModeGraceful, how long the server goes on
	// accepting and serving after SIGTERM with readiness failing, as
	// graceful.Server.PreStopDelay. Zero means none.
	PreStopDelay time.Duration

	// DrainTimeout is, in ModeGraceful, the drain deadline measured from the
	// end of the pre-stop delay, as graceful.Server.DrainTimeout. Zero means
	// the one graceful derives from Kubernetes' default termination budget.
	// ModeHostage has no deadline, as Node has none.
	DrainTimeout time.Duration

	// IdleTimeout is how long an idle keep-alive connection, or a new one
	// that has not sent a request, stays open: Node's keepAliveTimeout. In
	// ModeHostage it is what ends a busy connection once its client pauses.
	// Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration

	// Wrapper, if not WrapperNone, makes Run a wrapper process that runs
	// WrapperCommand as its child. Empty means WrapperNone.
	Wrapper Wrapper

	// WrapperDelay is how long WrapperNPM takes to exit after a signal.
	// Zero means DefaultWrapperDelay.
	WrapperDelay time.Duration

	// WrapperCommand is the child's command line, program first, when
	// Wrapper is set: a command that runs this server with Wrapper.Child()
	// as its wrapper. It is required with a Wrapper and ignored without.
	WrapperCommand []string

	// Dependency is the URL that /health-deep checks with a GET. Empty means
	// none: /health-deep then answers 200 like /live.
	Dependency string

	// DependencyTimeout bounds the /health-deep check. Zero means
	// DefaultDependencyTimeout.
	DependencyTimeout time.Duration

	// CrashCode, if not zero, makes the server exit with this code after
	// CrashAfter, for restart experiments. It must be between 1 and 255.
	CrashCode int

	// CrashAfter is when, measured from the start, the server exits with
	// CrashCode. Zero means at once, before the port opens.
	CrashAfter time.Duration

	// PodName is the name on every response (X-Pod-Name) and log line.
	// Empty means the host name.
	PodName string

	// LogFormat is the format of the log lines. Empty means LogJSON.
	LogFormat LogFormat

	// AccessLog adds a "request" event for every request.
	AccessLog bool

	// ReadyFile, if set, is a file the server writes once its port is
	// open, holding its pod name: a readiness signal for an exec probe
	// such as `test -f`, as seed 003's model server wrote
	// /tmp/start_success. The server removes it as it starts (one a
	// killed instance left behind) and as it exits; a SIGKILL leaves it. The pods of the embedded
	// cluster share this machine's files: give each its own path, with
	// $(POD_NAME) in it.
	ReadyFile string

	// Log receives the log lines. Nil means they are discarded. A wrapper's
	// child writes its own log lines, and those of its child, to it as well.
	Log io.Writer

	// Stderr receives the npm-like wrapper's error messages and a child's
	// standard error. Nil means they are discarded.
	Stderr io.Writer
}

// Check reports what is invalid in c, as Run would: an unknown mode,
// wrapper or log format, a negative duration, settings that do not go
// together.
func (c Config) Check() error {
	// The host name, the default pod name, is Run's to look up.
	c.PodName = cmp.Or(c.PodName, "check")
	_, err := c.withDefaults()
	return err
}

// withDefaults checks c and returns it with every zero field that has a
// default set to it.
func (c Config) withDefaults() (Config, error) {
	c.Shutdown = cmp.Or(c.Shutdown, DefaultShutdown)
	c.Wrapper = cmp.Or(c.Wrapper, WrapperNone)
	c.LogFormat = cmp.Or(c.LogFormat, LogJSON)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.WrapperDelay = cmp.Or(c.WrapperDelay, DefaultWrapperDelay)
	c.DependencyTimeout = cmp.Or(c.DependencyTimeout, DefaultDependencyTimeout)
	port := DefaultPort
	if c.GRPC {
		port = DefaultGRPCPort
	}
	c.Listen = cmp.Or(c.Listen, fmt.Sprintf(":%d", port))
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
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}

	var errs []error
	if !slices.Contains(Modes(), c.Shutdown) {
		errs = append(errs, fmt.Errorf("unknown shutdown mode %q", c.Shutdown))
	}
	if c.GRPC && c.Shutdown == ModeHostage {
		errs = append(errs, fmt.Errorf("shutdown mode %s is HTTP/1's: not one of the gRPC server's", ModeHostage))
	}
	if c.GRPC && c.Dependency != "" {
		errs = append(errs, errors.New("a dependency (--dependency) is what the HTTP server's /health-deep checks: the gRPC server has none"))
	}
	if c.MaxConnectionAge != 0 && !c.GRPC {
		errs = append(errs, errors.New("a maximum connection age (--max-connection-age) is the gRPC server's: give --grpc"))
	}
	if !slices.Contains(Wrappers(), c.Wrapper) {
		errs = append(errs, fmt.Errorf("unknown wrapper %q", c.Wrapper))
	}
	if !slices.Contains(LogFormats(), c.LogFormat) {
		errs = append(errs, fmt.Errorf("unknown log format %q", c.LogFormat))
	}
	if c.Wrapper != WrapperNone && len(c.WrapperCommand) == 0 {
		errs = append(errs, fmt.Errorf("wrapper %s without a command to run", c.Wrapper))
	}
	if c.Dependency != "" {
		if u, err := url.Parse(c.Dependency); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("dependency %q is not an http or https URL", c.Dependency))
		}
	}
	if c.CrashCode < 0 || c.CrashCode > 255 {
		errs = append(errs, fmt.Errorf("crash code %d out of 1-255", c.CrashCode))
	}
	if err := c.Work.Check(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"startup delay", c.StartupDelay}, {"pre-stop delay", c.PreStopDelay},
		{"drain timeout", c.DrainTimeout}, {"idle timeout", c.IdleTimeout}, {"wrapper delay", c.WrapperDelay},
		{"dependency timeout", c.DependencyTimeout}, {"crash after", c.CrashAfter}, {"max connection age", c.MaxConnectionAge},
	} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("negative %s %v", d.name, d.d))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// settings is the configuration as the "started" event and GET / show it.
// Its field names are stable: scenarios and scripts read them.
type settings struct {
	Pod               string    `json:"pod"`
	Listen            string    `json:"listen"`
	Shutdown          Mode      `json:"shutdown"`
	StartupDelay      string    `json:"startup_delay"`
	Work              string    `json:"work"`
	GRPC              bool      `json:"grpc"`
	MaxConnectionAge  string    `json:"max_connection_age"`
	PreStopDelay      string    `json:"pre_stop_delay"`
	DrainTimeout      string    `json:"drain_timeout"`
	IdleTimeout       string    `json:"idle_timeout"`
	Wrapper           Wrapper   `json:"wrapper"`
	WrapperDelay      string    `json:"wrapper_delay"`
	Dependency        string    `json:"dependency"`
	DependencyTimeout string    `json:"dependency_timeout"`
	CrashCode         int       `json:"crash_code"`
	CrashAfter        string    `json:"crash_after"`
	LogFormat         LogFormat `json:"log_format"`
	AccessLog         bool      `json:"access_log"`
	ReadyFile         string    `json:"ready_file"`
}

// LogValue logs the settings as a group, under the names of their JSON.
func (s settings) LogValue() slog.Value {
	v := reflect.ValueOf(s)
	attrs := make([]slog.Attr, v.NumField())
	for i := range attrs {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		attrs[i] = slog.Any(name, v.Field(i).Interface())
	}
	return slog.GroupValue(attrs...)
}

// settings returns c, which has its defaults set, as the events show it.
func (c Config) settings() settings {
	return settings{
		Pod:               c.PodName,
		Listen:            c.Listen,
		Shutdown:          c.Shutdown,
		StartupDelay:      c.StartupDelay.String(),
		Work:              c.Work.String(),
		GRPC:              c.GRPC,
		MaxConnectionAge:  c.MaxConnectionAge.String(),
		PreStopDelay:      c.PreStopDelay.String(),
		DrainTimeout:      c.DrainTimeout.String(),
		IdleTimeout:       c.IdleTimeout.String(),
		Wrapper:           c.Wrapper,
		WrapperDelay:      c.WrapperDelay.String(),
		Dependency:        c.Dependency,
		DependencyTimeout: c.DependencyTimeout.String(),
		CrashCode:         c.CrashCode,
		CrashAfter:        c.CrashAfter.String(),
		LogFormat:         c.LogFormat,
		AccessLog:         c.AccessLog,
		ReadyFile:         c.ReadyFile,
	}
}
