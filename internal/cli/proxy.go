package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/target"
)

func newProxyCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the lab's sidecar proxy, which answers for its app as Envoy does",
		Long: `proxy runs the lab's sidecar proxy: every request on --listen goes to
--upstream, the app on the pod's own loopback. When the app refuses the
connection, resets it or does not answer in --timeout, the proxy answers
itself as Envoy does: 503 "upstream connect error or disconnect/reset
before headers. reset reason: connection failure, transport failure
reason: delayed connect error: 111" for a refused connect, 503 for a
reset, 504 "upstream request timeout". closingtime load reads those
answers, and the diagnosis names the app's state behind them.

On SIGTERM it exits at once (--on-sigterm exit, Envoy's own) or drains for
--termination-drain with Connection: close on every response before it
exits (drain, Istio's agent). The admin listener serves Envoy's shutdown
endpoints, POST /drain_listeners[?graceful], /healthcheck/fail,
/healthcheck/ok and /quitquitquit, and GET /ready; "closingtime proxy
admin PATH" posts to them, for a preStop hook. --hold-file keeps the
listener closed until the app's readiness file exists.

Log lines go to standard output, one JSON object per event
(docs/proxy.md).`,
		Example: `  # Seed 003's sidecar: held until the model server has loaded, then in
  # front of it; SIGTERM drains for a second before the exit
  closingtime proxy --upstream 127.0.0.1:50051 --hold-file /tmp/start_success \
    --on-sigterm drain --termination-drain 1s --timeout 30s

  # Its preStop hook: drain the listener at the start of the termination
  closingtime proxy admin /drain_listeners?graceful`,
		Args: cobra.NoArgs,
	}
	f := struct {
		listen, upstream, admin, holdFile, podName string
		onSIGTERM                                  proxy.Mode
		drainTime, terminationDrain                time.Duration
		timeout, connectTimeout                    time.Duration
		exitOnZero, accessLog                      bool
		logFormat                                  target.LogFormat
	}{
		upstream: proxy.DefaultUpstream, admin: proxy.DefaultAdmin, onSIGTERM: proxy.ModeExit,
		drainTime: proxy.DefaultDrainTime, terminationDrain: proxy.DefaultTerminationDrain, timeout: proxy.DefaultTimeout, connectTimeout: proxy.DefaultConnectTimeout,
		logFormat: target.LogJSON,
	}
	fs := cmd.Flags()
	fs.Var((*listenValue)(&f.listen), "listen",
		fmt.Sprintf("address to listen on, host:port (default $POD_IP:%[1]d, or 0.0.0.0:%[1]d without POD_IP)", proxy.DefaultPort))
	fs.Var((*listenValue)(&f.upstream), "upstream", "the app's address, host:port, on the pod's own loopback")
	fs.Var((*adminValue)(&f.admin), "admin", `admin listener's address, host:port, or none`)
	fs.Var(&enumValue[proxy.Mode]{&f.onSIGTERM, proxy.Modes()}, "on-sigterm",
		"what to do on SIGTERM: exit (Envoy's: at once, cutting what is in flight) or drain (Istio's agent: serve on for --termination-drain with Connection: close, then exit)")
	fs.Var((*durationValue)(&f.terminationDrain), "termination-drain",
		"with --on-sigterm drain, how long the proxy serves on after SIGTERM (Istio's terminationDrainDuration)")
	fs.Var((*durationValue)(&f.drainTime), "drain-time",
		"how long POST /drain_listeners?graceful keeps the listener open (Envoy's --drain-time-s, which Istio sets to its drainDuration)")
	fs.Var((*boolValue)(&f.exitOnZero), "exit-on-zero-connections",
		"after --termination-drain, exit only once no downstream connection is left (Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS)")
	fs.Lookup("exit-on-zero-connections").NoOptDefVal = "true"
	fs.Var((*durationValue)(&f.timeout), "timeout", "route timeout: time the upstream has for its whole response, past which the proxy answers 504 or cuts a response begun; 0: none (Envoy's default 15s)")
	fs.Var((*durationValue)(&f.connectTimeout), "connect-timeout", "time an upstream connect may take")
	fs.StringVar(&f.holdFile, "hold-file", "", "file to wait for before opening the listener: the app's readiness signal, such as its --ready-file")
	fs.StringVar(&f.podName, "pod-name", "", "name on the proxy's own answers (X-Pod-Name) and log lines (default $POD_NAME, else $HOSTNAME, else the host name)")
	fs.Var(&enumValue[target.LogFormat]{&f.logFormat, target.LogFormats()}, "log-format", "log line format: "+joinValues(target.LogFormats()))
	fs.Var((*boolValue)(&f.accessLog), "access-log", "log a request event for every request, not only for those the proxy answered itself or that failed")
	fs.Lookup("access-log").NoOptDefVal = "true"

	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		listen := f.listen
		if ip := os.Getenv("POD_IP"); ip != "" && listen == "" {
			listen = net.JoinHostPort(ip, strconv.Itoa(proxy.DefaultPort))
		}
		podName := f.podName
		for _, v := range []string{"POD_NAME", "HOSTNAME"} {
			if podName == "" {
				podName = os.Getenv(v)
			}
		}
		timeout := f.timeout
		if timeout == 0 {
			timeout = -1
		}
		code, err := proxy.Run(cmd.Context(), proxy.Config{
			Listen: listen, Upstream: f.upstream, Admin: f.admin,
			OnSIGTERM: f.onSIGTERM, DrainTime: f.drainTime, TerminationDrain: f.terminationDrain, ExitOnZeroConnections: f.exitOnZero,
			Timeout: timeout, ConnectTimeout: f.connectTimeout, HoldFile: f.holdFile,
			PodName: podName, LogFormat: f.logFormat, AccessLog: f.accessLog, Log: streams.Out,
		})
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		if code != ExitOK {
			return exitStatus(code)
		}
		return nil
	}
	cmd.AddCommand(newProxyAdminCommand(streams))
	return cmd
}

// newProxyAdminCommand is `closingtime proxy admin`, the client of the
// proxy's admin endpoints that a preStop hook runs.
func newProxyAdminCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin PATH",
		Short: "POST to a proxy's admin endpoint, such as /drain_listeners?graceful, as a preStop hook does",
		Long: `admin posts PATH to the admin listener of a closingtime proxy (or of an
Envoy) and prints its answer: /drain_listeners, /drain_listeners?graceful,
/healthcheck/fail, /healthcheck/ok or /quitquitquit. An answer other than
2xx exits 1; no answer within --timeout, or no proxy there, exits 4.`,
		Example: `  closingtime proxy admin /drain_listeners?graceful
  closingtime proxy admin --admin 127.0.0.1:15000 /quitquitquit`,
		Args: cobra.ExactArgs(1),
	}
	addr, timeout := proxy.DefaultAdmin, 2*time.Second
	cmd.Flags().Var((*listenValue)(&addr), "admin", "admin listener's address, host:port")
	cmd.Flags().Var((*durationValue)(&timeout), "timeout", "time the answer may take")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := positive("proxy admin", "--timeout", timeout); err != nil {
			return err
		}
		err := proxy.Call(cmd.Context(), addr, args[0], timeout, streams.Out)
		if se := (*proxy.StatusError)(nil); errors.As(err, &se) {
			// The proxy answered, and said no.
			fmt.Fprintf(streams.Err, "closingtime: proxy admin: %v\n", err)
			return exitStatus(ExitFailed)
		}
		if err != nil {
			return fmt.Errorf("proxy admin: %w", err)
		}
		return nil
	}
	return cmd
}

// adminValue is a listener's address, host:port, or "none".
type adminValue string

func (a *adminValue) String() string { return string(*a) }

func (a *adminValue) Type() string { return "host:port" }

func (a *adminValue) Set(s string) error {
	if s != "none" {
		if err := (*listenValue)(a).Set(s); err != nil {
			return fmt.Errorf("%w, or none", err)
		}
	}
	*a = adminValue(s)
	return nil
}
