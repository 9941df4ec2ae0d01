package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/closingtime-dev/closingtime/internal/target"
)

// serveFlags are the flags of `closingtime serve`. Each can also be set by
// the environment variable serveEnv gives it, so that a manifest can set it.
type serveFlags struct {
	listen            string
	startupDelay      time.Duration
	work              target.Work
	grpc              bool
	maxConnectionAge  time.Duration
	shutdown          target.Mode
	preStopDelay      time.Duration
	drainTimeout      time.Duration
	idleTimeout       time.Duration
	wrapper           target.Wrapper
	wrapperDelay      time.Duration
	dependency        string
	dependencyTimeout time.Duration
	crashCode         int
	crashAfter        time.Duration
	podName           string
	logFormat         target.LogFormat
	accessLog         bool
	readyFile         string
}

// serveEnv binds each flag of `closingtime serve` to its environment
// variable. The names without the CT_ prefix are those of seed 001's app.py
// and of Kubernetes' downward API. A bare number in a duration's variable
// counts unit.
var serveEnv = []struct {
	flag, env string
	unit      time.Duration
}{
	{"listen", "CT_LISTEN", 0},
	{"startup-delay", "STARTUP_DELAY", time.Second},
	{"work", "WORK_MS", time.Millisecond},
	{"grpc", "CT_GRPC", 0},
	{"max-connection-age", "CT_MAX_CONNECTION_AGE", time.Second},
	{"shutdown", "SHUTDOWN_MODE", 0},
	{"pre-stop-delay", "CT_PRE_STOP_DELAY", time.Second},
	{"drain-timeout", "CT_DRAIN_TIMEOUT", time.Second},
	{"idle-timeout", "CT_IDLE_TIMEOUT", time.Second},
	{"wrapper", "CT_WRAPPER", 0},
	{"wrapper-delay", "CT_WRAPPER_DELAY", time.Second},
	{"dependency", "CT_DEPENDENCY", 0},
	{"dependency-timeout", "CT_DEPENDENCY_TIMEOUT", time.Second},
	{"crash-code", "CT_CRASH_CODE", 0},
	{"crash-after", "CT_CRASH_AFTER", time.Second},
	{"pod-name", "POD_NAME", 0},
	{"log-format", "CT_LOG_FORMAT", 0},
	{"access-log", "CT_ACCESS_LOG", 0},
	{"ready-file", "CT_READY_FILE", 0},
}

func newServeCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the lab server, which dies the way you choose",
		Long: `serve runs the lab server: /work takes the work time, /ready, /live and
/health-deep are probes, / shows the configuration; HTTP/1.1 and HTTP/2
without TLS (h2c) both. With --grpc it serves gRPC instead: the Work call
of closingtime.lab.v1.Lab and the standard health service, on port 50051.
On SIGTERM it behaves as
--shutdown says, each mode a behaviour measured in rollout experiments:
exit (leave at once), graceful (drain through the graceful library),
hostage (Node's server.close(): busy keep-alive connections go on serving)
or ignore (no handler: ignored as PID 1 of a PID namespace, fatal
elsewhere). --wrapper runs it as the grandchild of an npm-like or sh-like
first process.

Every flag can be set by the environment variable named in its help; a flag
on the command line wins. Log lines go to standard output, one JSON object
per event (docs/serve.md).`,
		Args: cobra.NoArgs,
	}
	flags := newServeFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runServe(cmd, streams, flags)
	}
	return cmd
}

// newServeFlags defines the flags of `closingtime serve` in fs, with their
// defaults, and returns the struct they are bound to.
func newServeFlags(fs *pflag.FlagSet) *serveFlags {
	f := &serveFlags{
		work:              target.Work{{Min: target.DefaultWork}},
		shutdown:          target.DefaultShutdown,
		idleTimeout:       target.DefaultIdleTimeout,
		wrapper:           target.WrapperNone,
		wrapperDelay:      target.DefaultWrapperDelay,
		dependencyTimeout: target.DefaultDependencyTimeout,
		logFormat:         target.LogJSON,
	}
	fs.Var((*listenValue)(&f.listen), "listen",
		fmt.Sprintf("address to listen on, host:port (default $POD_IP:%[1]d, or 0.0.0.0:%[1]d without POD_IP; port %[2]d with --grpc)", target.DefaultPort, target.DefaultGRPCPort))
	fs.Var((*durationValue)(&f.startupDelay), "startup-delay", "time between the start and the opening of the port")
	fs.Var((*workValue)(&f.work), "work", "time a /work request (or Work call) takes: a duration, a range such as 100ms-300ms, or parts with their shares of the requests, such as 2s,19s:5%")
	fs.Var((*boolValue)(&f.grpc), "grpc", fmt.Sprintf("serve gRPC instead of HTTP: closingtime.lab.v1.Lab/Work and grpc.health.v1, on port %d by default; graceful is GracefulStop, exit is Stop", target.DefaultGRPCPort))
	fs.Lookup("grpc").NoOptDefVal = "true"
	fs.Var((*durationValue)(&f.maxConnectionAge), "max-connection-age", "gRPC: close each connection with a GOAWAY once it is this old, so that clients connect again (0: never)")
	fs.Var(&enumValue[target.Mode]{&f.shutdown, target.Modes()}, "shutdown",
		"what to do on SIGTERM: "+joinValues(target.Modes()))
	fs.Var((*durationValue)(&f.preStopDelay), "pre-stop-delay", "graceful: time to serve on after SIGTERM, readiness failing")
	fs.Var((*durationValue)(&f.drainTimeout), "drain-timeout",
		"graceful: drain deadline after the pre-stop delay (0: 30s budget - pre-stop delay - 2s)")
	fs.Var((*durationValue)(&f.idleTimeout), "idle-timeout",
		"time an idle keep-alive connection stays open (Node's keepAliveTimeout; ends hostage connections)")
	fs.Var(&enumValue[target.Wrapper]{&f.wrapper, target.Wrappers()}, "wrapper",
		"first process to run the server under: "+joinValues(target.Wrappers()))
	fs.Var((*durationValue)(&f.wrapperDelay), "wrapper-delay", "npm wrapper: time from a signal to its exit")
	fs.Var((*urlValue)(&f.dependency), "dependency", "http(s) URL that /health-deep checks")
	fs.Var((*durationValue)(&f.dependencyTimeout), "dependency-timeout", "time /health-deep waits for the dependency")
	fs.Var((*exitCodeValue)(&f.crashCode), "crash-code", "exit with this code (1-255) after --crash-after; 0: never")
	fs.Var((*durationValue)(&f.crashAfter), "crash-after", "time from the start to the crash (0: before listening)")
	fs.StringVar(&f.podName, "pod-name", "", "name on every response and log line (default $HOSTNAME, which a kubelet sets to the pod's name, else the host name)")
	fs.Var(&enumValue[target.LogFormat]{&f.logFormat, target.LogFormats()}, "log-format",
		"log line format: "+joinValues(target.LogFormats()))
	fs.Var((*boolValue)(&f.accessLog), "access-log", "log a request event for every request")
	fs.Lookup("access-log").NoOptDefVal = "true"
	fs.StringVar(&f.readyFile, "ready-file", "", "file to write once the port is open, and to remove on exit, for an exec probe")
	for _, b := range serveEnv {
		fs.Lookup(b.flag).Usage += " ($" + b.env + ")"
	}
	return f
}

// config completes the flags in fs that the command line did not set from
// the environment, which lookupEnv reads, and returns the server's Config
// without its writers and wrapper command.
func (f *serveFlags) config(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) (target.Config, error) {
	for _, b := range serveEnv {
		fl := fs.Lookup(b.flag)
		v, ok := lookupEnv(b.env)
		if fl.Changed || !ok || v == "" {
			continue
		}
		if err := fl.Value.Set(bareDurations(v, b.unit)); err != nil {
			if b.unit != 0 {
				err = fmt.Errorf("%w, or bare numbers of %s", err, unitName(b.unit))
			}
			return target.Config{}, usagef("serve: invalid %s=%q (for --%s): %v", b.env, v, b.flag, err)
		}
	}
	listen := f.listen
	// A kubelet sets HOSTNAME to the pod's name; the embedded cluster's
	// pods share this machine's host name.
	podName := f.podName
	if h, _ := lookupEnv("HOSTNAME"); podName == "" {
		podName = h
	}
	port := target.DefaultPort
	if f.grpc {
		port = target.DefaultGRPCPort
	}
	if ip, ok := lookupEnv("POD_IP"); ok && ip != "" && listen == "" {
		listen = net.JoinHostPort(ip, strconv.Itoa(port))
	}
	return target.Config{
		Listen:            listen,
		StartupDelay:      f.startupDelay,
		Work:              f.work,
		GRPC:              f.grpc,
		MaxConnectionAge:  f.maxConnectionAge,
		Shutdown:          f.shutdown,
		PreStopDelay:      f.preStopDelay,
		DrainTimeout:      f.drainTimeout,
		IdleTimeout:       f.idleTimeout,
		Wrapper:           f.wrapper,
		WrapperDelay:      f.wrapperDelay,
		Dependency:        f.dependency,
		DependencyTimeout: f.dependencyTimeout,
		CrashCode:         f.crashCode,
		CrashAfter:        f.crashAfter,
		PodName:           podName,
		LogFormat:         f.logFormat,
		AccessLog:         f.accessLog,
		ReadyFile:         f.readyFile,
	}, nil
}

func runServe(cmd *cobra.Command, streams Streams, flags *serveFlags) error {
	cfg, err := flags.config(cmd.Flags(), os.LookupEnv)
	if err != nil {
		return err
	}
	cfg.Log, cfg.Stderr = streams.Out, streams.Err
	if cfg.Wrapper != target.WrapperNone {
		// The child is this very command line with the next wrapper of the
		// chain appended, which wins over an earlier --wrapper and over
		// CT_WRAPPER: npm runs sh, which runs the server.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("serve: wrapper %s: %w", cfg.Wrapper, err)
		}
		cfg.WrapperCommand = slices.Concat([]string{exe}, os.Args[1:], []string{"--wrapper=" + string(cfg.Wrapper.Child())})
	}
	if err := cfg.Check(); err != nil {
		return usagef("serve: %v", err)
	}
	code, err := target.Run(cmd.Context(), cfg)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if code != ExitOK {
		return exitStatus(code)
	}
	return nil
}

// bareDurations gives the bare numbers in s, a duration, a range of two,
// or parts of either with their shares, the unit unit: with
// time.Millisecond, "200" becomes "200ms", "100-300" "100ms-300ms" and
// "2000,19000:5%" "2s,19s:5%". Anything else, and any s when unit is zero,
// is returned as it is.
func bareDurations(s string, unit time.Duration) string {
	if unit == 0 {
		return s
	}
	withUnit := func(n string) string {
		if n == "" || strings.Trim(n, "0123456789.") != "" {
			return n
		}
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return n
		}
		return time.Duration(f * float64(unit)).String()
	}
	parts := strings.Split(s, ",")
	for i, part := range parts {
		times, share, shared := strings.Cut(part, ":")
		if lo, hi, ok := strings.Cut(times, "-"); ok {
			times = withUnit(lo) + "-" + withUnit(hi)
		} else {
			times = withUnit(times)
		}
		if shared {
			times += ":" + share
		}
		parts[i] = times
	}
	return strings.Join(parts, ",")
}

// unitName names unit in the plural for messages.
func unitName(unit time.Duration) string {
	if unit == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// joinValues lists accepted values for help texts and errors.
func joinValues[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// The flag values of `closingtime serve`. Their Set errors state the
// accepted values, which every message about a bad flag or environment
// value then gives.

// durationValue is a duration that must not be negative.
type durationValue time.Duration

func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errors.New("accepted values are durations of 0 or more such as 500ms or 1m30s")
	}
	*d = durationValue(v)
	return nil
}

var errWorkAccepted = errors.New("accepted values are a duration such as 200ms, a range such as 100ms-300ms, " +
	"or parts with their shares of the requests, such as 2s,19s:5% (the parts without a share split what is left)")

// workValue is the time a /work request takes: parts separated by commas,
// each a duration or a range of two, "100ms-300ms", with its share of the
// requests after a colon, "19s:5%", or without one.
type workValue target.Work

func (w *workValue) String() string { return target.Work(*w).String() }

func (w *workValue) Type() string { return "duration[-duration][:share%],..." }

func (w *workValue) Set(s string) error {
	var work target.Work
	for part := range strings.SplitSeq(s, ",") {
		times, share, shared := strings.Cut(strings.TrimSpace(part), ":")
		lo, hi, isRange := strings.Cut(times, "-")
		var from, to durationValue
		if err := from.Set(lo); err != nil {
			return errWorkAccepted
		}
		to = from
		if isRange {
			if err := to.Set(hi); err != nil || to < from {
				return errWorkAccepted
			}
		}
		p := target.WorkPart{Min: time.Duration(from), Max: time.Duration(to)}
		if shared {
			n, ok := strings.CutSuffix(share, "%")
			pct, err := strconv.ParseFloat(n, 64)
			if !ok || err != nil || pct <= 0 || pct > 100 {
				return errWorkAccepted
			}
			p.Percent = pct
		}
		work = append(work, p)
	}
	if err := work.Check(); err != nil {
		return err
	}
	*w = workValue(work)
	return nil
}

// enumValue is one of a list of names.
type enumValue[T ~string] struct {
	p      *T
	values []T
}

func (e *enumValue[T]) String() string { return string(*e.p) }

func (e *enumValue[T]) Type() string { return "string" }

func (e *enumValue[T]) Set(s string) error {
	if !slices.Contains(e.values, T(s)) {
		return fmt.Errorf("accepted values are %s", joinValues(e.values))
	}
	*e.p = T(s)
	return nil
}

// listenValue is a TCP address, host:port.
type listenValue string

func (l *listenValue) String() string { return string(*l) }

func (l *listenValue) Type() string { return "host:port" }

func (l *listenValue) Set(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("accepted values are host:port, such as 0.0.0.0:8080, :8080 or 127.0.0.1:0")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return errors.New("accepted values are host:port with a port from 0 to 65535")
	}
	*l = listenValue(s)
	return nil
}

// urlValue is an http or https URL.
type urlValue string

func (u *urlValue) String() string { return string(*u) }

func (u *urlValue) Type() string { return "url" }

func (u *urlValue) Set(s string) error {
	p, err := url.Parse(s)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return errors.New("accepted values are http or https URLs such as http://db:8080/health")
	}
	*u = urlValue(s)
	return nil
}

// exitCodeValue is an exit code, 0 to 255.
type exitCodeValue int

func (c *exitCodeValue) String() string { return strconv.Itoa(int(*c)) }

func (c *exitCodeValue) Type() string { return "code" }

func (c *exitCodeValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return errors.New("accepted values are exit codes from 0 to 255")
	}
	*c = exitCodeValue(n)
	return nil
}

// boolValue is a boolean flag that, given alone, means true.
type boolValue bool

func (b *boolValue) String() string { return strconv.FormatBool(bool(*b)) }

func (b *boolValue) Type() string { return "bool" }

func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("accepted values are true, false, 1 and 0")
	}
	*b = boolValue(v)
	return nil
}
