package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
	"github.com/closingtime-dev/closingtime/internal/podnet"
	"github.com/closingtime-dev/closingtime/retry"
)

type loadFlags struct {
	trafficFlags
	duration       time.Duration
	retryAttempts  int
	retryBaseDelay time.Duration
	resolve        time.Duration
	waitServing    time.Duration
	stopFile       string
	events         string
	output         string
}

// stopFilePoll is how often --stop-file is looked for.
const stopFilePoll = 100 * time.Millisecond

func newLoadCommand(streams Streams) *cobra.Command {
	var flags loadFlags
	cmd := &cobra.Command{
		Use:   "load URL",
		Short: "Send requests at a constant rate and count the failures by kind and by second",
		Long: `Send GET requests (or gRPC calls, to a grpc:// URL) to URL at a constant
rate (open loop: each request starts on its schedule whatever the earlier
ones are doing) and sort every request into ok, refused, reset, closed,
connect-timeout, response-timeout, http5xx or error, from the socket error
itself.

Each --client is one stream of requests with its own rate: new-conn dials a
connection for each request; keep-alive sends over a pool of --connections
persistent connections. Neither resends a failed request unless --retry is
given, and then only what is safe to resend (see the retry package).

An h2c://HOST:PORT/PATH URL sends the GETs over HTTP/2 without TLS, with
prior knowledge, through Go's net/http Transport, as a Go service calls
another: new-conn on a connection of its own per request, keep-alive over
--connections connections that each carry many requests at once. The
Transport's own resends of a request the server never processed (a stream
refused by a GOAWAY) are attempts of their own: a request one saved
counts as absorbed. The server must speak HTTP/2 from the first byte (no
Upgrade from HTTP/1.1); one that does not fails every request with
error, which standard error then quotes, and --wait-serving gives up at
once. A connection carries at most the server's stream limit at once
(Go's: 250); a request past it waits for a free stream, within its
response timeout. Go's HTTP/2 server gives its connections no maximum
age: --max-lifetime retires the client's.

A grpc://HOST:PORT/SERVICE/METHOD URL makes unary gRPC calls of that
method instead (grpc://127.0.0.1:50051/grpc.health.v1.Health/Check),
each with the empty request message, which every protobuf message type
reads as all its fields absent: pick a method that answers OK to it.
grpc://HOST:PORT alone calls closingtime.lab.v1.Lab/Work (closingtime
serve --grpc). new-conn makes each call on a channel of its own,
keep-alive over --connections long-lived channels. A call is sorted as a
request is, from its socket; http5xx is a call the server answered with an
error status. grpc-go's transparent retries of a call that never reached
the server are attempts of their own: a call one saved counts as absorbed.
A channel dials HOST as it is (a ClusterIP: one connection, to the pod
kube-proxy picks); with --resolve-interval, it looks HOST up in DNS
itself, as a client of a headless Service does, connects to every
address, round robin, and looks again only when a connection is lost,
at most once an interval, as grpc-go's DNS resolver does every 30 s.

With --wait-serving, the run begins once URL answers: ` + strconv.Itoa(load.ServingInARow) + ` requests in a row,
each on a new connection, with a status below 500 (a gRPC call, OK;
failed tries 100 ms apart). If it does not within that time, or a gRPC
server answers with a status no wait mends (Unimplemented: it has not the
method; InvalidArgument, Unauthenticated, PermissionDenied), the command
fails (exit status 3) and sends nothing. The load pods of rollout --kube and lab --kube use it,
so that their traffic starts, as the embedded cluster's does, once the
Service answers where the traffic comes from.

The run ends after --duration, on SIGINT or SIGTERM, or when --stop-file
exists; requests in flight then finish or time out and are counted.

Exit status: 0 when the run completed, whatever failed (the failures are
the measurement); 2 for a bad flag or URL; 3 when --wait-serving's URL
did not answer, so that nothing was sent; 4 when the tool failed; 130
when interrupted before the run began.

-o jsonl writes a first line when the run begins sending,
{"start":TIME}, then one JSON line per request to standard output as it
completes, then the report as the last line, {"report":{...}}, with its
latency histograms, so that the reports of several runs merge exactly:
the load pods of a real cluster say that their traffic flows, and hand
their results back, that way, through their logs (docs/load.md).

In a pod of closingtime cluster, the environment names the API server and
the node (CLOSINGTIME_KUBECONFIG, CLOSINGTIME_NODE_NAME), and kube-proxy's
delay in applying an endpoint change (CLOSINGTIME_PROPAGATION_DELAY): a URL
whose host is a Service, NAME.NAMESPACE[.svc[.cluster.local]], is then
dialed through that node's routing view of the Service's EndpointSlices, as
kube-proxy routes a pod's connections (docs/load.md).`,
		Example: `  closingtime load http://127.0.0.1:8080/work --rate 50 --duration 30s
  closingtime load http://127.0.0.1:8080/work --client new-conn=50 --client keep-alive=200 -o json
  closingtime load http://app/work --duration 10m --stop-file /tmp/stop --events events.jsonl
  closingtime load http://web.shop:80/ --client keep-alive=500 --retry --retry-attempts 3 -o jsonl
  closingtime load http://127.0.0.1:8080/work --wait-serving 30s --duration 10s
  closingtime load h2c://127.0.0.1:8080/work --client keep-alive=200 --connections 1
  closingtime load grpc://127.0.0.1:50051 --client keep-alive=200 --connections 1
  closingtime load grpc://127.0.0.1:50051/grpc.health.v1.Health/Check --client new-conn=100
  closingtime load grpc://app-headless.shop:50051 --client keep-alive=200 --resolve-interval 30s`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("load: want exactly one URL, got %d arguments (see closingtime load --help)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f := cmd.Flags(); !flags.retry && (f.Changed("retry-attempts") || f.Changed("retry-base-delay")) {
				return usagef("load: --retry-attempts and --retry-base-delay need --retry")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runLoad(ctx, streams, args[0], flags)
		},
	}
	f := cmd.Flags()
	flags.trafficFlags.bind(f)
	f.DurationVar(&flags.duration, "duration", load.DefaultDuration, "how long to send requests")
	f.IntVar(&flags.retryAttempts, "retry-attempts", retry.DefaultAttempts, "with --retry, the most attempts per request, the first included")
	f.DurationVar(&flags.retryBaseDelay, "retry-base-delay", retry.DefaultBaseDelay, "with --retry, the backoff ceiling before the first retry")
	f.DurationVar(&flags.resolve, "resolve-interval", 0, "gRPC: each channel looks HOST up itself (DNS: a headless Service's pods), balances round robin over the addresses, and looks again when a connection is lost, at most once this long (grpc-go's DNS resolver: 30s); 0: dial HOST as it is")
	f.DurationVar(&flags.waitServing, "wait-serving", 0, "before the run, wait up to this long for URL to answer "+strconv.Itoa(load.ServingInARow)+" requests in a row, and fail if it does not (0: start at once)")
	f.StringVar(&flags.stopFile, "stop-file", "", "stop sending when this file exists")
	f.StringVar(&flags.events, "events", "", "write one JSON line per request to this file")
	f.StringVarP(&flags.output, "output", "o", "text", "output format: text, json, or jsonl (a line per request, then the report)")
	return cmd
}

func runLoad(ctx context.Context, streams Streams, target string, flags loadFlags) error {
	if flags.output != "text" && flags.output != "json" && flags.output != "jsonl" {
		return usagef("load: invalid --output %q: accepted values are text, json, jsonl", flags.output)
	}
	cfg := load.Config{
		URL:             target,
		Duration:        flags.duration,
		ConnectTimeout:  flags.connectTimeout,
		ResponseTimeout: flags.responseTimeout,
	}
	if err := cmp.Or(
		positive("load", "--duration", flags.duration),
		nonNegative("load", "--wait-serving", flags.waitServing),
	); err != nil {
		return err
	}
	clients, err := flags.trafficFlags.parse("load")
	if err != nil {
		return err
	}
	cfg.Clients = clients
	if err := cmp.Or(positive("load", "--retry-attempts", flags.retryAttempts), positive("load", "--retry-base-delay", flags.retryBaseDelay)); err != nil {
		return err
	}
	if flags.retry {
		cfg.Retry = &retry.Policy{Attempts: flags.retryAttempts, BaseDelay: flags.retryBaseDelay}
	}
	if err := nonNegative("load", "--resolve-interval", flags.resolve); err != nil {
		return err
	}
	if flags.resolve > 0 {
		cfg.Resolve = &load.Resolve{Interval: flags.resolve}
	}
	switch {
	case flags.output == "jsonl" && flags.events != "":
		return usagef("load: give --events or -o jsonl, not both: jsonl writes the events to standard output")
	case flags.output == "jsonl":
		cfg.Events = streams.Out
	case flags.events != "":
		f, err := os.Create(flags.events)
		if err != nil {
			return inputError("load: --events "+flags.events, err)
		}
		defer f.Close()
		cfg.Events = f
	}
	dial, closeRoutes, err := podDialer(ctx)
	if err != nil {
		return err
	}
	defer closeRoutes()
	cfg.Dial = dial
	// The first request of class error, which no socket failure explains:
	// its error says what did (a server that does not speak the URL's
	// protocol, no free local port).
	// The first gRPC call answered with an error status, which the text
	// has no line for, as it has for HTTP's statuses.
	var firstError, firstStatus *load.Result
	cfg.OnResult = func(r load.Result) {
		switch {
		case r.Class == load.Error && firstError == nil:
			firstError = &r
		case r.Class == load.HTTP5xx && r.Err != nil && firstStatus == nil:
			firstStatus = &r
		}
	}
	gen, err := load.New(cfg)
	if err != nil {
		if flags.events != "" {
			os.Remove(flags.events)
		}
		return &usageError{fmt.Errorf("load: %w", err)}
	}
	if flags.stopFile != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go watchStopFile(ctx, flags.stopFile, cancel)
	}
	if flags.waitServing > 0 {
		wctx, cancel := context.WithTimeout(ctx, flags.waitServing)
		err := load.WaitServing(wctx, cfg, nil)
		cancel()
		if err != nil {
			err = fmt.Errorf("load: --wait-serving %v: %w", flags.waitServing, err)
			if ctx.Err() != nil {
				// Interrupted, or --stop-file appeared, before any request.
				return errInterrupted
			}
			// URL never answered: there is nothing to measure.
			return &setupError{err}
		}
	}
	if flags.output == "jsonl" {
		if err := load.WriteStartLine(streams.Out, time.Now()); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	report, err := gen.Run(ctx)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	switch flags.output {
	case "jsonl":
		err = load.WriteReportLine(streams.Out, report)
	case "json":
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		err = enc.Encode(report)
	default:
		err = load.WriteText(streams.Out, report)
	}
	// A stream of -o jsonl is a program's to read, such as the runner of
	// rollout --kube, which warns of its own: a load pod's log carries
	// standard error too, where a line after the report would break the
	// stream.
	if u, perr := url.Parse(target); perr == nil && flags.output != "jsonl" {
		if w := clientErrorsWarning(load.CountClientErrors(report.Clients), cmp.Or(u.Path, "/"), "give the path it serves in the URL, http://HOST:PORT/PATH"); w != "" {
			fmt.Fprintf(streams.Err, "load: %s\n", w)
		}
		count := func(class load.Class) (n int64) {
			for _, c := range report.Clients {
				n += c.Totals[class]
			}
			return n
		}
		if firstError != nil {
			fmt.Fprintf(streams.Err, "load: %d of the requests failed with error, which no socket failure explains; the first (%s): %v\n", count(load.Error), firstError.ID, firstError.Err)
		}
		if firstStatus != nil {
			fmt.Fprintf(streams.Err, "load: %d of the calls were answered with an error status (http5xx); the first (%s): %v\n", count(load.HTTP5xx), firstStatus.ID, firstStatus.Err)
		}
	}
	return err
}

// clientErrorsWarning returns a warning for a run whose responses had a
// 4xx status more than half the time (e): the server answered, so they
// count as ok and nothing failed, but the path requested, path, is likely
// not one it serves; set says how to request another. It returns "" when
// at most half of the responses had a 4xx status.
func clientErrorsWarning(e load.ClientErrors, path, set string) string {
	if !e.Mostly() {
		return ""
	}
	return fmt.Sprintf("warning: %d of %d responses (%.0f%%) had a 4xx status, most often %d %s: they count as ok, but path %s is likely not one the server serves; %s",
		e.Count, e.Responses, 100*float64(e.Count)/float64(e.Responses), e.Commonest, http.StatusText(e.Commonest), path, set)
}

// routesStartTimeout bounds the wait for the routing view of a pod's node
// to list the Services and EndpointSlices of its API server.
const routesStartTimeout = 30 * time.Second

// podDialer returns the dialer of a load that runs in a pod of
// `closingtime cluster`, which names its API server in the environment:
// in a pod network of namespaces (cluster.PodKubeconfigEnv),
// nodeagent.Resolver.DialFromPod, which resolves Services' names to the
// cluster IPs that the node's rules route; in the loopback model
// (nodeagent.RoutingEnv), nodeagent.Routes.DialFromPod of a routing view
// of the pod's node, once the view holds the Services and EndpointSlices
// of the API server. Without either, it returns a nil dialer (the
// generator's net.Dialer). The returned function stops what it started. A
// variable missing or a kubeconfig that cannot be read is a usage error
// that names the variable and the file.
func podDialer(ctx context.Context) (load.Dialer, func(), error) {
	env, path := cluster.PodKubeconfigEnv, os.Getenv(cluster.PodKubeconfigEnv)
	if path == "" {
		env, path = nodeagent.KubeconfigEnv, os.Getenv(nodeagent.KubeconfigEnv)
	}
	if path == "" {
		return nil, func() {}, nil
	}
	rest, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, nil, usagef("load: %s=%s: %w", env, path, err)
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, nil, usagef("load: %s=%s: %w", env, path, err)
	}
	startCtx, cancel := context.WithTimeout(ctx, routesStartTimeout)
	defer cancel()
	if env == cluster.PodKubeconfigEnv {
		return resolverDialer(startCtx, client, rest.Host, path)
	}
	node := os.Getenv(nodeagent.NodeNameEnv)
	if node == "" {
		return nil, nil, usagef("load: %s is set but %s is not: the routing view needs the pod's node", nodeagent.KubeconfigEnv, nodeagent.NodeNameEnv)
	}
	minDelay, maxDelay, err := nodeagent.ParsePropagationDelay(os.Getenv(nodeagent.PropagationDelayEnv))
	if err != nil {
		return nil, nil, usagef("load: %w", err)
	}
	routes, err := nodeagent.StartRoutes(startCtx, nodeagent.RoutesConfig{Client: client, NodeName: node, MinDelay: minDelay, MaxDelay: maxDelay})
	if err != nil {
		return nil, nil, fmt.Errorf("load: routing view of node %s from the API server at %s (%s=%s): %w", node, rest.Host, env, path, err)
	}
	return routes.DialFromPod, routes.Close, nil
}

// resolverDialer returns the dialer of a load in a pod of a network of
// namespaces, whose API server at host the kubeconfig at path names:
// nodeagent.Resolver.DialFromPod, tracked by the connection tracking of
// the pod's node where nodeagent.NodeNetnsEnv names it. The returned
// function stops the resolver and the tracking.
func resolverDialer(ctx context.Context, client kubernetes.Interface, host, path string) (load.Dialer, func(), error) {
	var tracker *podnet.Tracker
	var nodeNS *podnet.Netns
	if nsPath := os.Getenv(nodeagent.NodeNetnsEnv); nsPath != "" {
		var err error
		if nodeNS, err = podnet.JoinNetns(nsPath); err != nil {
			return nil, nil, fmt.Errorf("load: %s=%s: the node's network namespace: %w", nodeagent.NodeNetnsEnv, nsPath, err)
		}
		if tracker, err = podnet.NewTracker(nodeNS); err != nil {
			nodeNS.Close()
			return nil, nil, fmt.Errorf("load: %s=%s: the node's connection tracking: %w", nodeagent.NodeNetnsEnv, nsPath, err)
		}
	}
	stop := func() {
		if tracker != nil {
			tracker.Close()
			nodeNS.Close()
		}
	}
	var backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool)
	if tracker != nil {
		backend = tracker.Backend
	}
	resolver, err := nodeagent.StartResolver(ctx, client, backend)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("load: Services of the API server at %s (%s=%s): %w", host, cluster.PodKubeconfigEnv, path, err)
	}
	return resolver.DialFromPod, func() { resolver.Close(); stop() }, nil
}

// watchStopFile calls stop once path exists, as the seeds' load script
// stops when /tmp/stop appears. It returns when ctx is done.
func watchStopFile(ctx context.Context, path string, stop context.CancelFunc) {
	ticker := time.NewTicker(stopFilePoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				stop()
				return
			}
		}
	}
}
