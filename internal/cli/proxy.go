package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/target"
)

func newProxyCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the lab's proxy: a sidecar that answers for its app as Envoy does, or an edge that routes to a Service as ingress-NGINX does",
		Long: `proxy runs the lab's reverse proxy in one of two roles.

--role sidecar (the default) is a mesh's sidecar: every request on --listen goes to
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

--role edge is an ingress in front of a Service, as ingress-NGINX is: it
watches the --service's EndpointSlices itself (through --kubeconfig, by
default the one closingtime's clusters give their pods), and after
--update-delay sends each request straight to a ready pod's address,
round-robin, over a pool of keep-alive upstream connections (--keepalive,
--keepalive-requests, --keepalive-timeout, --keepalive-time). A refused or
reset upstream is tried again on the next endpoint (--next-upstream,
--next-upstream-tries), except a POST, LOCK or PATCH that may have
reached the upstream; when no try is left it answers NGINX's 502 Bad
Gateway, or 504 Gateway Time-out after --connect-timeout or
--read-timeout, with the upstreams tried in X-Upstream-Addr and its
reason in X-Proxy-Reason. --upstreams gives fixed endpoints instead of a
Service.

Log lines go to standard output, one JSON object per event
(docs/proxy.md).`,
		Example: `  # Seed 003's sidecar: held until the model server has loaded, then in
  # front of it; SIGTERM drains for a second before the exit
  closingtime proxy --upstream 127.0.0.1:50051 --hold-file /tmp/start_success \
    --on-sigterm drain --termination-drain 1s --timeout 30s

  # Its preStop hook: drain the listener at the start of the termination
  closingtime proxy admin /drain_listeners?graceful

  # An ingress in front of Service shop, port http: endpoint changes
  # reach it 1 to 4 s after the API has them; no retries
  closingtime proxy --role edge --service default/shop --port http \
    --update-delay 1s-4s --next-upstream off`,
		Args: cobra.NoArgs,
	}
	f := struct {
		role                                       proxy.Role
		listen, upstream, admin, holdFile, podName string
		onSIGTERM                                  proxy.Mode
		drainTime, terminationDrain                time.Duration
		timeout, connectTimeout                    time.Duration
		exitOnZero, accessLog                      bool
		logFormat                                  target.LogFormat

		service, port, kubeconfig       string
		upstreams                       []string
		updateDelay                     delayRangeValue
		keepalive, keepaliveRequests    int
		keepaliveTimeout, keepaliveTime time.Duration
		nextUpstream                    nextUpstreamValue
		nextUpstreamTries               int
		readTimeout                     time.Duration
	}{
		role: proxy.RoleSidecar, upstream: proxy.DefaultUpstream, admin: proxy.DefaultAdmin, onSIGTERM: proxy.ModeExit,
		drainTime: proxy.DefaultDrainTime, terminationDrain: proxy.DefaultTerminationDrain, timeout: proxy.DefaultTimeout, connectTimeout: proxy.DefaultConnectTimeout,
		logFormat:   target.LogJSON,
		updateDelay: delayRangeValue{proxy.DefaultUpdateDelay, proxy.DefaultUpdateDelay}, keepalive: proxy.DefaultKeepalive,
		keepaliveRequests: proxy.DefaultKeepaliveRequests, keepaliveTimeout: proxy.DefaultKeepaliveTimeout, keepaliveTime: proxy.DefaultKeepaliveTime,
		nextUpstreamTries: proxy.DefaultNextUpstreamTries, readTimeout: proxy.DefaultReadTimeout,
	}
	fs := cmd.Flags()
	fs.Var(&enumValue[proxy.Role]{&f.role, proxy.Roles()}, "role",
		"the proxy's role: sidecar (Envoy in front of its pod's app) or edge (ingress-NGINX in front of a Service's pods)")
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
	// The edge's.
	fs.StringVar(&f.service, "service", "", "edge: the Service to route to, namespace/name, whose EndpointSlices the edge watches")
	fs.StringVar(&f.port, "port", "", "edge: the Service's port, by name or number (default: the Service's only port)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "edge: kubeconfig for the watch (default $"+cluster.PodKubeconfigEnv+", else $KUBECONFIG, else the pod's in-cluster configuration)")
	fs.StringSliceVar(&f.upstreams, "upstreams", nil, "edge: fixed endpoints, host:port,... instead of a Service's")
	fs.Var(&f.updateDelay, "update-delay", "edge: time from a change of the Service's endpoints, as the watch sees it, to its use, a duration or a range MIN-MAX drawn for each change (ingress-NGINX: 1s, up to about 4s)")
	fs.IntVar(&f.keepalive, "keepalive", f.keepalive, "edge: idle upstream connections kept for reuse; 0: a connection per request (upstream-keepalive-connections)")
	fs.IntVar(&f.keepaliveRequests, "keepalive-requests", f.keepaliveRequests, "edge: requests an upstream connection carries at most (upstream-keepalive-requests)")
	fs.Var((*durationValue)(&f.keepaliveTimeout), "keepalive-timeout", "edge: how long an upstream connection may stay idle (upstream-keepalive-timeout)")
	fs.Var((*durationValue)(&f.keepaliveTime), "keepalive-time", "edge: an upstream connection's longest use, from its connect (upstream-keepalive-time)")
	fs.Var(&f.nextUpstream, "next-upstream", `edge: when to try the next endpoint, NGINX's proxy_next_upstream: "error timeout" (the default), with non_idempotent to retry a POST that may have reached an upstream, or off`)
	fs.IntVar(&f.nextUpstreamTries, "next-upstream-tries", f.nextUpstreamTries, "edge: attempts per request, the first included (proxy-next-upstream-tries)")
	fs.Var((*durationValue)(&f.readTimeout), "read-timeout", "edge: the longest wait for each read of an upstream's response, past which, before its header, the edge answers 504 (proxy-read-timeout)")

	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkRoleFlags(cmd, f.role); err != nil {
			return err
		}
		if ns, name, ok := strings.Cut(f.service, "/"); f.service != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
			return usagef("proxy: --service %q: want namespace/name, such as default/shop", f.service)
		}
		switch {
		case f.keepalive < 0:
			return usagef("proxy: --keepalive %d: want 0 (a connection per request) or more", f.keepalive)
		case f.keepaliveRequests < 1:
			return usagef("proxy: --keepalive-requests %d: want 1 or more", f.keepaliveRequests)
		case f.nextUpstreamTries < 1:
			return usagef("proxy: --next-upstream-tries %d: want 1 or more, the first attempt included", f.nextUpstreamTries)
		case cmd.Flags().Changed("port") && !cmd.Flags().Changed("service"):
			return usagef("proxy: --port is the --service's port; --upstreams give theirs")
		}
		for _, u := range f.upstreams {
			if err := new(listenValue).Set(u); err != nil {
				return usagef("proxy: --upstreams %q: %v", u, err)
			}
		}
		if f.kubeconfig != "" {
			if _, err := os.Stat(f.kubeconfig); err != nil {
				return usagef("proxy: --kubeconfig: %v", err)
			}
		}
		if f.readTimeout == 0 || f.keepaliveTimeout == 0 || f.keepaliveTime == 0 {
			return usagef("proxy: --read-timeout, --keepalive-timeout and --keepalive-time must be more than 0 (--keepalive 0 keeps no connection)")
		}
		if f.connectTimeout == 0 || f.drainTime == 0 || f.terminationDrain == 0 {
			return usagef("proxy: --connect-timeout, --drain-time and --termination-drain must be more than 0 (--on-sigterm exit exits at once)")
		}
		minDelay, maxDelay := f.updateDelay.min, f.updateDelay.max
		if maxDelay == 0 {
			minDelay, maxDelay = -1, -1 // none
		}
		kubeconfig := f.kubeconfig
		for _, v := range []string{cluster.PodKubeconfigEnv, "KUBECONFIG"} {
			if kubeconfig == "" && f.service != "" {
				kubeconfig = os.Getenv(v)
			}
		}
		keepalive := f.keepalive
		if keepalive == 0 {
			keepalive = -1
		}
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
			Role: f.role, Service: f.service, ServicePort: f.port, Kubeconfig: kubeconfig, Upstreams: f.upstreams,
			MinUpdateDelay: minDelay, MaxUpdateDelay: maxDelay,
			Keepalive: keepalive, KeepaliveRequests: f.keepaliveRequests, KeepaliveTimeout: f.keepaliveTimeout, KeepaliveTime: f.keepaliveTime,
			NextUpstream: f.nextUpstream.n, NextUpstreamTries: f.nextUpstreamTries, ReadTimeout: f.readTimeout,
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

// roleFlags are the flags of one role only.
var roleFlags = map[proxy.Role][]string{
	proxy.RoleSidecar: {"upstream", "timeout"},
	proxy.RoleEdge: {"service", "port", "kubeconfig", "upstreams", "update-delay", "keepalive", "keepalive-requests",
		"keepalive-timeout", "keepalive-time", "next-upstream", "next-upstream-tries", "read-timeout"},
}

// checkRoleFlags refuses a flag of the other role than role, and an edge
// without its endpoints.
func checkRoleFlags(cmd *cobra.Command, role proxy.Role) error {
	for r, names := range roleFlags {
		for _, name := range names {
			if r != role && cmd.Flags().Changed(name) {
				return usagef("proxy: --%s is for --role %s, not %s", name, r, role)
			}
		}
	}
	if role == proxy.RoleEdge && cmd.Flags().Changed("service") == cmd.Flags().Changed("upstreams") {
		return usagef("proxy: --role edge routes to --service namespace/name or to --upstreams host:port,...: give one of them")
	}
	return nil
}

// delayRangeValue is a duration, or a range of two, MIN-MAX.
type delayRangeValue struct{ min, max time.Duration }

func (d *delayRangeValue) String() string {
	if d.min == d.max {
		return d.min.String()
	}
	return d.min.String() + "-" + d.max.String()
}

func (d *delayRangeValue) Type() string { return "duration[-duration]" }

func (d *delayRangeValue) Set(s string) error {
	lo, hi, isRange := strings.Cut(s, "-")
	var from, to durationValue
	if err := from.Set(lo); err != nil {
		return errors.New("accepted values are a duration such as 1s, or a range such as 500ms-4s")
	}
	to = from
	if isRange {
		if err := to.Set(hi); err != nil || to < from {
			return errors.New("accepted values are a duration such as 1s, or a range such as 500ms-4s")
		}
	}
	d.min, d.max = time.Duration(from), time.Duration(to)
	return nil
}

// nextUpstreamValue is NGINX's proxy_next_upstream.
type nextUpstreamValue struct{ n proxy.NextUpstream }

func (v *nextUpstreamValue) String() string { return v.n.String() }

func (v *nextUpstreamValue) Type() string { return "words" }

func (v *nextUpstreamValue) Set(s string) error {
	n, err := proxy.ParseNextUpstream(s)
	if err != nil {
		return errors.New(`accepted values are error, timeout and non_idempotent, such as "error timeout", or off`)
	}
	v.n = n
	return nil
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
