package diagnosis

import (
	"slices"

	"github.com/closingtime-dev/closingtime/internal/results"
)

// The causes, in the order docs/diagnosis.md gives them. Each is the
// anchor of its section there.
const (
	// NoEndpoint: the Service had no endpoint to route the connection to,
	// and refused it, or, past the kernel's rate of refusals to a client,
	// let it time out.
	NoEndpoint results.Cause = "no-endpoint"
	// NotListening: the connection reached a pod that was an endpoint but
	// did not listen yet: counted ready before its server was.
	NotListening results.Cause = "not-listening"
	// RoutingRace: a new connection reached a pod whose termination had
	// begun and whose server no longer listened (refused), or whose
	// sandbox had gone with its address (unanswered), while a node's
	// routing view still sent new connections to it.
	RoutingRace results.Cause = "routing-race"
	// IngressRoutingRace: an ingress in front of the Service (an edge
	// that routes to pod addresses from its own watch) still sent a
	// request to a terminating pod that no longer listened, or was gone:
	// it answered 502 or 504, or its client gave up while it tried (its
	// log names the pod).
	IngressRoutingRace results.Cause = "ingress-routing-race"
	// ProxyReadyBeforeApp: the pod's proxy answered 503 for an app that
	// did not listen yet: the pod took traffic, ready through its proxy,
	// before its app could serve it.
	ProxyReadyBeforeApp results.Cause = "proxy-ready-before-app"
	// ProxyOutlivedApp: the pod's proxy answered 503 for an app that had
	// stopped listening, or exited, in the pod's termination, while the
	// proxy still took requests.
	ProxyOutlivedApp results.Cause = "proxy-outlived-app"
	// ExitWithoutDrain: the server exited on the stop signal and cut the
	// requests in flight.
	ExitWithoutDrain results.Cause = "exit-without-drain"
	// DrainDeadline: the server drained, and its own drain deadline cut
	// the request before it ended.
	DrainDeadline results.Cause = "drain-deadline"
	// SupervisedUnsignalled: supervisord stopped a program that ran the
	// server through a shell; the shell took the stop signal, supervisord
	// exited, and the server, never signalled, died with the container.
	SupervisedUnsignalled results.Cause = "supervisord-unsignalled"
	// WrapperExit: a wrapper that ran as the container's first process
	// (npm, sh -c) exited on the stop signal and took the server with it.
	WrapperExit results.Cause = "wrapper-exit"
	// KilledIgnoredSigterm: SIGKILL at the end of the grace period cut
	// the request; the server had ignored SIGTERM.
	KilledIgnoredSigterm results.Cause = "sigkill-ignored-sigterm"
	// KilledKeepAliveHostage: SIGKILL at the end of the grace period cut
	// a request on a keep-alive connection that the draining server kept
	// open while the client kept it busy.
	KilledKeepAliveHostage results.Cause = "sigkill-keepalive-hostage"
	// KilledSlowDrain: SIGKILL at the end of the grace period cut a
	// request that the drain had not finished.
	KilledSlowDrain results.Cause = "sigkill-slow-drain"
	// KilledStillRunning: SIGKILL at the end of the grace period cut the
	// request, and nothing in the run tells whether the server ignored
	// SIGTERM or drained too long.
	KilledStillRunning results.Cause = "sigkill-still-running"
	// StaleConnection: the request went out on a reused keep-alive
	// connection that its server had closed or was closing.
	StaleConnection results.Cause = "stale-connection"
	// GoawayResend: the request's stream met its server's GOAWAY, or its
	// connection's end, before the server took it, and its client (grpc-go,
	// Go's HTTP/2 Transport) sent it again by itself: an absorbed request
	// only.
	GoawayResend results.Cause = "goaway-resend"
	// StaleResolution: a client that resolves the Service's name itself
	// (a headless Service's DNS) connected to an address its last lookup
	// gave, of a pod that had left the Service's endpoints.
	StaleResolution results.Cause = "stale-resolution"
	// LivenessRestart: the kubelet restarted the pods on failed liveness
	// probes (during a dependency outage), and the requests found them
	// down.
	LivenessRestart results.Cause = "liveness-restart"
	// ContainerExited: the server's container exited by itself while its
	// pod was an endpoint: a crash.
	ContainerExited results.Cause = "container-exited"
	// DependencyDown: the server answered 5xx while its dependency was
	// down.
	DependencyDown results.Cause = "dependency-down"
	// NoFreeConnection: the load client's keep-alive pool had no free
	// connection within the connect timeout: the client's limit, not the
	// rollout's.
	NoFreeConnection results.Cause = "no-free-connection"
	// Unknown: no rule explains the evidence.
	Unknown results.Cause = "unknown"
)

// Info tells what a cause means and what to change.
type Info struct {
	// Cause is the cause it describes.
	Cause results.Cause
	// Title is the cause in plain words.
	Title string
	// Fix is what to change.
	Fix string
	// Rule is the closingtime lint rule that catches the cause in the
	// manifests; empty when none can.
	Rule string
	// Scenario names the built-in scenario (closingtime lab) that shows
	// it; empty when none does.
	Scenario string
}

// causes describes every cause, in order.
var causes = []Info{
	{NoEndpoint, "no ready endpoint: the Service refused the connection, or let it time out",
		"keep a ready pod behind the Service: maxUnavailable 0 with a surge, readiness that passes only when the pod can serve",
		"rolling-update-unavailable", "probe-readiness-deep"},
	{NotListening, "reached a pod counted ready before its server listened",
		"add a readiness probe on the serving port, so that a pod joins the endpoints only once it answers",
		"readiness-probe-missing", "1-plain"},
	{RoutingRace, "routing race: a new connection reached a terminating pod that no longer listened, or was gone, while the routing still sent it new connections",
		"add a preStop delay at least as long as the measured endpoint propagation (closingtime rollout measures it), and keep listening until it ends",
		"prestop-delay-missing", "2-readiness"},
	{IngressRoutingRace, "the ingress's own routing still sent the request to a terminating pod that no longer listened, or was gone: the ingress answered 502 or 504, or the client gave up while it tried",
		"give the pods a preStop delay longer than the endpoint propagation and the ingress's own update delay (ingress-NGINX applies new endpoints up to seconds after the API has them), and keep listening until it ends; let the ingress try the next pod after a refused connect (proxy_next_upstream error timeout), with a connect timeout (proxy-connect-timeout) well under the clients' own, so that a gone pod's address does not take the client's whole wait",
		"prestop-delay-missing", "seed002-no-fix"},
	{ProxyReadyBeforeApp, "the pod's proxy answered 503: it took requests before its app listened, the pod counted ready through the proxy",
		"hold the proxy's listener until the app is ready (start it once the app's readiness file exists: closingtime proxy --hold-file), or probe readiness through the proxy to the app's own readiness endpoint",
		"", "seed003-scale-out-early"},
	{ProxyOutlivedApp, "the pod's proxy answered 503: its app had stopped listening or exited in the termination while the proxy still took requests",
		"stop the proxy after the app: a native sidecar (initContainers with restartPolicy: Always) is signalled only once the app has exited; under supervisord, give the app the higher priority; and make the app drain (a preStop delay, then finish what is in flight) instead of exiting at once",
		"proxy-not-sidecar", "seed003-proxy-outlives"},
	{ExitWithoutDrain, "cut in flight: the server exited on the stop signal without draining",
		"on SIGTERM, stop accepting, finish the requests in flight and close idle keep-alive connections before exiting (package graceful)",
		"", "2-readiness"},
	{DrainDeadline, "cut at the drain deadline: the server drained, and its own drain timeout ended before the request did",
		"give the server's drain timeout the longest request, and the pod's grace period the preStop, the drain and a few seconds to exit",
		"", "seed003-drain-12s"},
	{SupervisedUnsignalled, "cut in flight: supervisord's stop signal never reached the server: a shell between took it, supervisord exited, and the server died with the container",
		"end the program's command with exec (command=sh -c \"… && exec server\"), or set stopasgroup=true, so that the server gets the signal and drains",
		"supervisord-no-exec", "seed003-supervisord-sh"},
	{WrapperExit, "cut in flight: a PID 1 wrapper (npm, sh -c) exited on the stop signal and took the server with it",
		"run the server as the container's first process (exec form, exec in scripts), or an init that forwards signals (tini)",
		"shell-pid1", "A-npm-pid1"},
	{KilledIgnoredSigterm, "cut by SIGKILL: the server ignored SIGTERM and lived out the grace period",
		"handle SIGTERM in the server; as PID 1 a process without a handler ignores it (or run under an init such as tini)",
		"", "B-no-handler"},
	{KilledKeepAliveHostage, "cut by SIGKILL: busy keep-alive connections kept the draining server alive to the end of the grace period",
		"while draining, answer with Connection: close (HTTP/2: GOAWAY) so that clients leave kept-alive connections (package graceful); in the client, give pooled connections a maximum lifetime shorter than the grace period less the longest request, as an idle timeout never retires a busy one",
		"", "C-graceful-keepalive"},
	{KilledSlowDrain, "cut by SIGKILL: the drain took longer than the grace period left for it",
		"make terminationGracePeriodSeconds cover the preStop delay, the longest request and the exit, or bound the drain below it",
		"termination-budget", ""},
	{KilledStillRunning, "cut by SIGKILL: the server was still running at the end of the grace period; whether it ignored SIGTERM or drained too long, nothing after the signal tells",
		"handle SIGTERM (as PID 1 a process without a handler ignores it: or run it under tini), answer with Connection: close while draining, and make terminationGracePeriodSeconds cover the drain",
		"", ""},
	{StaleConnection, "stale connection: the request went out on a kept-alive connection that its server had closed or was closing",
		"retry idempotent requests once on a new connection (package retry), give client connections a lifetime, and have a draining server answer with Connection: close before it closes kept-alive connections (package graceful; net/http's Server.Shutdown closes idle ones under requests already on their way)",
		"", ""},
	{GoawayResend, "resent by the client: the request's stream met its server's GOAWAY, or its connection's end, before the server took it, and the client sent it again by itself",
		"nothing, while the client resends what a server never took, as grpc-go and Go's HTTP/2 Transport do; a client that does not should resend a stream above a GOAWAY's last stream id, or refused, on a new connection",
		"", "http2-graceful"},
	{StaleResolution, "stale resolution: the client connected to an address of its own last lookup (a headless Service's DNS answer), of a pod that had left the Service's endpoints: its resolver had not looked again",
		"give gRPC clients a ClusterIP Service, whose routing follows the endpoints, and the server a maximum connection age for balance; or a resolver that follows the EndpointSlices (kuberesolver, xDS); with grpc-go's DNS resolver, which looks again at most every 30 s, keep old pods serving longer than that (a preStop delay past 30 s)",
		"grpc-headless-max-age", "grpc-headless"},
	{LivenessRestart, "restarts: failed liveness probes restarted the pods, and back-off kept them down",
		"make the liveness probe check the process only, never a dependency; readiness may take a pod out of the Service instead",
		"liveness-checks-dependency", "probe-liveness-deep"},
	{ContainerExited, "the server's container exited by itself while its pod was an endpoint",
		"read the container's last log lines and exit code (closingtime rollout prints them); fix the crash",
		"", ""},
	{DependencyDown, "the server answered 5xx while its dependency was down",
		"fail fast and degrade while a dependency is down; keep the liveness probe off it",
		"", ""},
	{NoFreeConnection, "closingtime's load client had no free keep-alive connection: every one was busy, its pool too small for the rate at this latency",
		"raise the keep-alive client's connections (--connections) or lower its rate; if the latency rose in the rollout (read the other causes of the same seconds), that rise is the rollout's doing, these failures its echo in the measuring client",
		"", ""},
	{Unknown, "unknown: no rule explains the evidence",
		"read the request's evidence in results.json (diagnosis.requests) and the run's timeline in the HTML report",
		"", ""},
}

// Causes returns the description of every cause, in the order of
// docs/diagnosis.md.
func Causes() []Info { return slices.Clone(causes) }

// Describe returns the description of cause c; that of Unknown for a
// cause it does not know (from a newer results file).
func Describe(c results.Cause) Info {
	for _, info := range causes {
		if info.Cause == c {
			return info
		}
	}
	return causes[len(causes)-1]
}

// DocsLink returns the section of docs/diagnosis.md that explains c.
func DocsLink(c results.Cause) string { return "docs/diagnosis.md#" + string(c) }
