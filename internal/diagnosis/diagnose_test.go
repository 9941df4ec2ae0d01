package diagnosis

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// timeline builds a run's timeline in order.
type timeline struct{ run results.Run }

func (tl *timeline) event(at float64, kind cluster.EventKind, pod string, detail map[string]string) *timeline {
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at, Source: results.SourceCluster, Kind: string(kind), Pod: pod, Node: "node-1", Detail: detail})
	return tl
}

func (tl *timeline) log(at float64, name, pod string, detail map[string]string) *timeline {
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at, Source: results.SourcePod, Kind: name, Pod: pod, Detail: detail})
	return tl
}

// endpoints records the EndpointSlices' endpoints at at, and node-1's
// view of them at at+lag.
func (tl *timeline) endpoints(at, lag float64, eps ...cluster.Endpoint) *timeline {
	list := cluster.Endpoints{List: eps}
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at, Source: results.SourceCluster, Kind: string(cluster.EndpointsPublished), Endpoints: list})
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at + lag, Source: results.SourceCluster, Kind: string(cluster.EndpointsApplied), Node: "node-1", Endpoints: list})
	sortTimeline(tl.run.Timeline)
	return tl
}

// sortTimeline puts a timeline's entries in the order of their times, as
// a run's is, those of one time in the order added.
func sortTimeline(entries []results.Entry) {
	slices.SortStableFunc(entries, func(a, b results.Entry) int { return cmp.Compare(a.AtMS, b.AtMS) })
}

func ready(ip string) cluster.Endpoint {
	return cluster.Endpoint{Address: ip, Ready: true, Serving: true}
}
func terminating(ip string) cluster.Endpoint {
	return cluster.Endpoint{Address: ip, Serving: true, Terminating: true}
}

// started adds a pod that starts at at with address ip, its server
// listening at listen (none if negative), ready at readyAt.
func (tl *timeline) started(pod, ip string, at, listen, readyAt float64, serveLogs bool) *timeline {
	tl.event(at, cluster.PodStarted, pod, map[string]string{"ip": ip})
	tl.event(at+1, cluster.ContainerStarted, pod, map[string]string{"restart": "0", "pid_namespace": "pid"})
	if serveLogs {
		tl.log(at+2, "started", pod, nil)
		if listen >= 0 {
			tl.log(listen, "listening", pod, nil)
		}
	}
	return tl.event(readyAt, cluster.PodReady, pod, nil)
}

// running adds a pod that ran before the recording began.
func (tl *timeline) running(pod, ip string) *timeline {
	tl.run.Running = append(tl.run.Running, results.RunningPod{Name: pod, Node: "node-1", IP: ip, Ready: true})
	return tl
}

// stopped adds pod's termination at at: a preStop of preStop ms, then
// SIGTERM, then its exit after exitAfter ms with code, or SIGKILL at the
// end of a 10 s grace period if killed.
func (tl *timeline) stopped(pod string, at, preStop, exitAfter float64, code int, killed bool) *timeline {
	tl.event(at, cluster.PodTerminating, pod, map[string]string{"grace": "10s"})
	sig := at
	if preStop > 0 {
		tl.event(at, cluster.PreStopStarted, pod, nil)
		sig = at + preStop
		tl.event(sig, cluster.PreStopFinished, pod, nil)
	}
	tl.event(sig, cluster.SignalSent, pod, map[string]string{"signal": "SIGTERM", "grace": "10s"})
	end := sig + exitAfter
	if killed {
		end = at + 10000
		tl.event(end, cluster.Killed, pod, nil)
		code = 137
	}
	return tl.event(end, cluster.ContainerExited, pod, map[string]string{"code": fmt.Sprint(code)})
}

// diagnosed returns the causes Diagnose gives requests on tl's run.
func (tl *timeline) diagnosed(t *testing.T, requests ...results.Request) (*results.Diagnosis, []results.Cause) {
	t.Helper()
	d := Diagnose(&tl.run, requests)
	if d == nil {
		t.Fatal("no diagnosis")
	}
	var got []results.Cause
	for _, r := range d.Requests {
		got = append(got, r.Cause)
	}
	return d, got
}

// proxied returns r as the 503 that pod's proxy answered for reason.
func proxied(pod string, r results.Request, reason proxy.Reason) results.Request {
	r.Pod, r.Proxy = pod, reason
	return r
}

// ingress returns r as an ingress's own answer for reason, after an
// attempt at pod, whose address is upstream.
func ingress(pod, upstream string, r results.Request, reason proxy.Reason) results.Request {
	r = proxied(pod, r, reason)
	r.Upstreams = upstream
	return r
}

// viaIngress returns r, which no answer named a pod for, with the
// attempts that the ingress's log tells.
func viaIngress(r results.Request, attempts ...proxy.Attempt) results.Request {
	r.Attempts, r.Upstreams = attempts, proxy.UpstreamAddrs(attempts)
	return r
}

func request(id string, class load.Class, at, connect, failed float64, addr string, connRequests int, connAge float64) results.Request {
	return results.Request{ID: id, Client: load.NewConn, AtMS: at, Class: class, ConnectMS: connect, FailedMS: failed, Addr: addr, ConnRequests: connRequests, ConnAgeMS: connAge}
}

// TestDiagnoseCauses gives each rule the evidence of its seed's phenomenon
// and checks the cause, one request at a time; a run whose requests have
// several causes counts each.
func TestDiagnoseCauses(t *testing.T) {
	const old, fresh = "app-old", "app-new"
	const oldIP, freshIP = "10.0.0.1", "10.0.0.2"
	tests := []struct {
		name    string
		run     func() *timeline
		request results.Request
		want    results.Cause
	}{{
		name: "no endpoint",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(0, 0).stopped(old, 0, 0, 5, 143, false)
		},
		request: request("r", load.Refused, 100, 100, 100, "", 0, 0),
		want:    NoEndpoint,
	}, {
		name: "not listening: ready before its server listened",
		run: func() *timeline {
			return new(timeline).started(fresh, freshIP, 0, 5000, 10, true).endpoints(10, 5, ready(freshIP))
		},
		request: request("r", load.Refused, 1000, 1000, 1000, freshIP+":8080", 0, 0),
		want:    NotListening,
	}, {
		name: "not listening, a server without closingtime's logs",
		run: func() *timeline {
			return new(timeline).started(fresh, freshIP, 0, -1, 10, false).endpoints(10, 5, ready(freshIP))
		},
		request: request("r", load.Refused, 1000, 1000, 1000, freshIP+":8080", 0, 0),
		want:    NotListening,
	}, {
		name: "routing race: refused by a signalled pod the view still routes to",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).running("app-other", "10.0.0.3").endpoints(-5000, 0, ready(oldIP), ready("10.0.0.3")).
				stopped(old, 0, 0, 5, 143, false).endpoints(1, 800, terminating(oldIP), ready("10.0.0.3"))
		},
		request: request("r", load.Refused, 300, 300, 300, oldIP+":8080", 0, 0),
		want:    RoutingRace,
	}, {
		name: "routing race: unanswered by a pod gone while the view still routes to it",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).running("app-other", "10.0.0.3").endpoints(-5000, 0, ready(oldIP), ready("10.0.0.3")).
				stopped(old, 0, 0, 5, 143, false).event(30, cluster.PodTerminated, old, map[string]string{"phase": "Failed"}).
				endpoints(1, 800, terminating(oldIP), ready("10.0.0.3"))
		},
		request: request("r", load.ConnectTimeout, 300, 2300, 2300, oldIP+":8080", 0, 0),
		want:    RoutingRace,
	}, {
		name: "routing race: unanswered by a pod gone before the run, through a stale connection tracking entry",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP)).log(-4000, "listening", old, map[string]string{"address": oldIP + ":8080"})
		},
		request: request("r", load.ConnectTimeout, 300, 2300, 2300, "10.0.0.9:8080", 0, 0),
		want:    RoutingRace,
	}, {
		name: "an unanswered connect to another port of an unknown address tells no cause",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP)).log(-4000, "listening", old, map[string]string{"address": oldIP + ":8080"})
		},
		request: request("r", load.ConnectTimeout, 300, 2300, 2300, "10.96.0.10:80", 0, 0),
		want:    Unknown,
	}, {
		name: "a connect that a running pod never answered tells no cause",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP))
		},
		request: request("r", load.ConnectTimeout, 300, 2300, 2300, oldIP+":8080", 0, 0),
		want:    Unknown,
	}, {
		name: "no endpoint in the node's view, while the EndpointSlices have one again",
		run: func() *timeline {
			// The pod is ready again at 1000 in the EndpointSlices; node-1
			// applies it at 1800.
			return new(timeline).running(old, oldIP).endpoints(-5000, 0).endpoints(1000, 800, ready(oldIP))
		},
		request: request("r", load.Refused, 1200, 1200, 1200, "10.96.0.10:80", 0, 0),
		want:    NoEndpoint,
	}, {
		name: "proxy ready before its app: a 503 for an app that had not listened yet",
		run: func() *timeline {
			return new(timeline).started(fresh, freshIP, 0, 5000, 10, true).endpoints(10, 5, ready(freshIP))
		},
		request: proxied(fresh, request("r", load.HTTP5xx, 1000, 1000, 1001, freshIP+":5000", 0, 0), proxy.UpstreamRefused),
		want:    ProxyReadyBeforeApp,
	}, {
		name: "an ingress's 502 for a terminating pod that refused: its own routing still sent it there",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: ingress(old, oldIP+":8080", request("r", load.HTTP5xx, 1500, 1500, 1501, "10.96.0.20:80", 0, 0), proxy.UpstreamRefused),
		want:    IngressRoutingRace,
	}, {
		name: "an ingress's 504 for a pod whose address had gone",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: ingress(old, oldIP+":8080", request("r", load.HTTP5xx, 1500, 1500, 6501, "10.96.0.20:80", 0, 0), proxy.UpstreamConnectTimeout),
		want:    IngressRoutingRace,
	}, {
		name: "a client's timeout while the ingress, its log says, waited on a gone pod's connect, then tried a live one",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).running(fresh, freshIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: viaIngress(request("r", load.ResponseTimeout, 1500, 1500, 11500, "10.96.0.20:80", 0, 0),
			proxy.Attempt{Upstream: oldIP + ":8080", Outcome: string(proxy.UpstreamConnectTimeout)},
			proxy.Attempt{Upstream: freshIP + ":8080", Outcome: "canceled", Sent: true}),
		want: IngressRoutingRace,
	}, {
		name: "a client's timeout while a terminating pod, still serving, worked on its request is not the routing's",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 20000, 143, false)
		},
		request: viaIngress(request("r", load.ResponseTimeout, 1500, 1500, 11500, "10.96.0.20:80", 0, 0),
			proxy.Attempt{Upstream: oldIP + ":8080", Outcome: "canceled", Sent: true}),
		want: Unknown,
	}, {
		name: "a client's timeout while the ingress tried a pod that was not terminating tells no cause",
		run: func() *timeline {
			return new(timeline).running(old, oldIP)
		},
		request: viaIngress(request("r", load.ResponseTimeout, 1500, 1500, 11500, "10.96.0.20:80", 0, 0),
			proxy.Attempt{Upstream: oldIP + ":8080", Outcome: "canceled"}),
		want: Unknown,
	}, {
		name: "an ingress's 502 for a pod that was not terminating tells no cause",
		run: func() *timeline {
			return new(timeline).running(old, oldIP)
		},
		request: ingress(old, oldIP+":8080", request("r", load.HTTP5xx, 1500, 1500, 1501, "10.96.0.20:80", 0, 0), proxy.UpstreamError),
		want:    Unknown,
	}, {
		name: "an ingress's 502 for a request its pod's exit cut",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: ingress(old, oldIP+":8080", request("r", load.HTTP5xx, -100, -100, 6, "10.96.0.20:80", 0, 0), proxy.UpstreamReset),
		want:    ExitWithoutDrain,
	}, {
		name: "proxy outlived its app: a 503 for an app gone in the termination",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: proxied(old, request("r", load.HTTP5xx, 300, 300, 301, oldIP+":5000", 0, 0), proxy.UpstreamRefused),
		want:    ProxyOutlivedApp,
	}, {
		name: "a proxy's 503 for a listening app of a terminating pod tells no cause",
		run: func() *timeline {
			return new(timeline).started(old, oldIP, 0, 100, 200, true).stopped(old, 1000, 5000, 5, 143, false)
		},
		request: proxied(old, request("r", load.HTTP5xx, 1300, 1300, 1301, oldIP+":5000", 0, 0), proxy.UpstreamRefused),
		want:    Unknown,
	}, {
		name: "a proxy's 503 for a connection its app's exit cut",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: proxied(old, request("r", load.HTTP5xx, -100, -100, 6, oldIP+":5000", 0, 0), proxy.UpstreamReset),
		want:    ExitWithoutDrain,
	}, {
		name: "a proxy's 503 for a reset after its app's exit: the proxy outlived the app",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: proxied(old, request("r", load.HTTP5xx, 200, 200, 201, oldIP+":5000", 3, 900), proxy.UpstreamReset),
		want:    ProxyOutlivedApp,
	}, {
		name: "a sidecar's 503 on a pooled connection that its draining app closed as the request came",
		run: func() *timeline {
			// The app drains for 5 s after SIGTERM at 0.
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5000, 143, false)
		},
		request: func() results.Request {
			r := proxied(old, request("r", load.HTTP5xx, 1000, 1000, 1001, oldIP+":5000", 0, 0), proxy.UpstreamReset)
			r.Attempts = []proxy.Attempt{{Upstream: "127.0.0.1:50051", Outcome: string(proxy.UpstreamReset), Cached: true, Sent: true}}
			return r
		}(),
		want: StaleConnection,
	}, {
		name: "a proxy's 503 for a cut on a reused client connection is the app's cut",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: proxied(old, request("r", load.HTTP5xx, -100, -100, 6, oldIP+":5000", 3, 900), proxy.UpstreamReset),
		want:    ExitWithoutDrain,
	}, {
		name: "a proxy's 503 of another container beside the app: the app's exit alone counts",
		run: func() *timeline {
			tl := new(timeline).started(fresh, freshIP, 0, 1000, 10, true).
				event(20, cluster.ContainerStarted, fresh, map[string]string{"app": "2/2"}).
				event(400, cluster.ContainerExited, fresh, map[string]string{"app": "2/2", "code": "1"})
			sortTimeline(tl.run.Timeline)
			return tl
		},
		request: proxied(fresh, request("r", load.HTTP5xx, 500, 500, 501, freshIP+":5000", 0, 0), proxy.UpstreamRefused),
		want:    ProxyReadyBeforeApp,
	}, {
		name: "cut by an exit without drain",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: request("r", load.Closed, -100, -100, 6, oldIP+":8080", 0, 0),
		want:    ExitWithoutDrain,
	}, {
		name: "cut at the server's own drain deadline",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "listening", old, map[string]string{"address": oldIP + ":8080"}).
				log(1, "sigterm", old, nil).log(3003, "drained", old, map[string]string{"outcome": "deadline"}).stopped(old, 0, 0, 3005, 143, false)
		},
		request: request("r", load.Closed, -2000, -2000, 3002, oldIP+":8080", 0, 0),
		want:    DrainDeadline,
	}, {
		name: "cut in flight by supervisord's exit: its program's shell took the signal, the server never logged one",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "listening", old, map[string]string{"address": oldIP + ":8080"}).
				log(2, "supervisord_signal", old, map[string]string{"signal": "SIGTERM"}).
				log(1300, "program_stopped", old, map[string]string{"program": "grpc", "how": "terminated by SIGTERM"}).stopped(old, 0, 0, 1400, 0, false)
		},
		request: request("r", load.Closed, -500, -500, 1402, oldIP+":8080", 0, 0),
		want:    SupervisedUnsignalled,
	}, {
		name: "supervisord's program drained, and its exit cut: not a signal lost on the way",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "listening", old, map[string]string{"address": oldIP + ":8080"}).
				log(2, "supervisord_signal", old, map[string]string{"signal": "SIGTERM"}).log(3, "sigterm", old, nil).stopped(old, 0, 0, 1400, 0, false)
		},
		request: request("r", load.Closed, -500, -500, 1402, oldIP+":8080", 0, 0),
		want:    ExitWithoutDrain,
	}, {
		name: "cut by the exit of a wrapper",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "wrapper_started", old, map[string]string{"wrapper": "npm"}).
				stopped(old, 0, 0, 700, 1, false)
		},
		request: request("r", load.Closed, 500, 500, 702, oldIP+":8080", 0, 0),
		want:    WrapperExit,
	}, {
		name: "SIGKILL of a keep-alive hostage",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "started", old, nil).log(1, "sigterm", old, nil).
				stopped(old, 0, 0, 0, 0, true)
		},
		request: request("r", load.Closed, 9800, 9800, 10002, oldIP+":8080", 40, 12000),
		want:    KilledKeepAliveHostage,
	}, {
		name: "SIGKILL of a server that ignored SIGTERM",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "started", old, nil).stopped(old, 0, 0, 0, 0, true)
		},
		request: request("r", load.Closed, 9800, 9800, 10002, oldIP+":8080", 40, 12000),
		want:    KilledIgnoredSigterm,
	}, {
		name: "SIGKILL of a slow drain",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).log(-5000, "started", old, nil).log(1, "sigterm", old, nil).
				stopped(old, 0, 0, 0, 0, true)
		},
		request: request("r", load.Reset, 500, 500, 10001, oldIP+":8080", 0, 0),
		want:    KilledSlowDrain,
	}, {
		name: "SIGKILL of a server that logs nothing, and no new connection after its signal",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 3000, 0, 0, true)
		},
		request: request("r", load.Closed, 9800, 9800, 10002, oldIP+":8080", 40, 12000),
		want:    KilledStillRunning,
	}, {
		name: "the load client's pool had no free connection",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP))
		},
		request: func() results.Request {
			r := request("r", load.ConnectTimeout, 1000, 3000, 3000, "", 0, 0)
			r.Error = fmt.Errorf("%w: %w", load.ErrNoFreeConnection, os.ErrDeadlineExceeded).Error()
			return r
		}(),
		want: NoFreeConnection,
	}, {
		// The first attempt of an absorbed request, on a reused
		// connection of a pod in its termination, which without the
		// client's word would be a stale connection's.
		name: "goaway resend: the client sent the stream again by itself",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: func() results.Request {
			r := request("r", load.Closed, 100, 100, 101, oldIP+":8080", 3, 4000)
			r.Error = fmt.Errorf("%w: %w", load.ErrTransparentRetry, io.EOF).Error()
			return r
		}(),
		want: GoawayResend,
	}, {
		name: "stale connection: sent after the pod exited",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).stopped(old, 0, 0, 5, 143, false)
		},
		request: request("r", load.Closed, 100, 100, 101, oldIP+":8080", 3, 4000),
		want:    StaleConnection,
	}, {
		name: "liveness restart",
		run: func() *timeline {
			tl := new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP))
			tl.event(1000, cluster.LivenessKill, old, map[string]string{"probe": "liveness"}).event(1001, cluster.SignalSent, old, nil).
				event(1010, cluster.ContainerExited, old, map[string]string{"code": "143"}).event(1010, cluster.PodUnready, old, nil)
			return tl.endpoints(1011, 10)
		},
		request: request("r", load.Refused, 2000, 2000, 2000, "", 0, 0),
		want:    LivenessRestart,
	}, {
		name: "unknown: a reset on a new connection to a pod that went on serving",
		run: func() *timeline {
			return new(timeline).running(old, oldIP).endpoints(-5000, 0, ready(oldIP))
		},
		request: request("r", load.Reset, 1000, 1000, 1100, oldIP+":8080", 0, 0),
		want:    Unknown,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := tt.run()
			d, got := tl.diagnosed(t, tt.request)
			if got[0] != tt.want {
				t.Errorf("cause %s, want %s; evidence %+v", got[0], tt.want, d.Requests[0])
			}
		})
	}
}

// TestDiagnoseUnknownKeepsEvidence injects a failure that no rule
// explains and checks it stays unknown, with its evidence joined.
func TestDiagnoseUnknownKeepsEvidence(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").endpoints(-5000, 0, ready("10.0.0.1"))
	d, got := tl.diagnosed(t, request("r", load.Error, 1000, 1000, 1001, "10.0.0.1:8080", 0, 0))
	r := d.Requests[0]
	if got[0] != Unknown || r.Pod != "app-a" || r.AtConnect.State != "ready" || r.Published == nil || !*r.Published ||
		!slices.Equal(r.RoutedBy, []string{"node-1"}) || r.ReadyEndpoints == nil || *r.ReadyEndpoints != 1 {
		t.Errorf("request %+v: want unknown, with pod app-a ready, published and routed by node-1", r)
	}
	if len(d.Causes) != 1 || d.Causes[0].Cause != Unknown || d.Causes[0].Failed != 1 {
		t.Errorf("causes %+v, want one unknown", d.Causes)
	}
}

// TestDiagnoseMixed counts each cause of a run whose failures differ.
func TestDiagnoseMixed(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		endpoints(-5000, 0, ready("10.0.0.1"), ready("10.0.0.2")).stopped("app-a", 0, 0, 5, 143, false)
	d, _ := tl.diagnosed(t,
		request("1", load.Closed, -50, -50, 6, "10.0.0.1:8080", 0, 0),
		request("2", load.Closed, -40, -40, 6, "10.0.0.1:8080", 0, 0),
		request("3", load.Refused, 200, 200, 200, "10.0.0.1:8080", 0, 0),
	)
	got := map[results.Cause]int{}
	for _, c := range d.Causes {
		got[c.Cause] = c.Failed
	}
	if len(got) != 2 || got[ExitWithoutDrain] != 2 || got[RoutingRace] != 1 {
		t.Errorf("causes %+v, want 2 exit-without-drain and 1 routing-race", d.Causes)
	}
	if d.Causes[0].Cause != ExitWithoutDrain {
		t.Errorf("first cause %s, want the most frequent, exit-without-drain", d.Causes[0].Cause)
	}
}

// TestFindings checks what the diagnosis tells of pods that ignored
// SIGTERM, were killed, or served after it.
func TestFindings(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		log(-5000, "started", "app-a", nil).log(-5000, "started", "app-b", nil).
		endpoints(-5000, 0, ready("10.0.0.1"), ready("10.0.0.2")).
		stopped("app-a", 0, 0, 0, 0, true).log(1, "sigterm", "app-b", nil).stopped("app-b", 0, 0, 0, 0, true)
	tl.run.OldPods = []results.OldPod{{Name: "app-a", AfterSigterm: new(int)}, {Name: "app-b", AfterSigterm: new(int)}}
	*tl.run.OldPods[0].AfterSigterm = 21
	d := Diagnose(&tl.run, nil)
	kinds := map[string][]string{}
	for _, f := range d.Findings {
		kinds[f.Pod] = append(kinds[f.Pod], f.Kind)
		if strings.TrimSpace(f.Text) == "" {
			t.Errorf("finding %+v without text", f)
		}
	}
	if !slices.Contains(kinds["app-a"], "ignored-sigterm") || !slices.Contains(kinds["app-a"], "served-after-sigterm") {
		t.Errorf("findings of app-a %v: want ignored-sigterm and served-after-sigterm", kinds["app-a"])
	}
	if !slices.Contains(kinds["app-b"], "killed-at-grace-end") || slices.Contains(kinds["app-b"], "ignored-sigterm") {
		t.Errorf("findings of app-b %v: want killed-at-grace-end, not ignored-sigterm", kinds["app-b"])
	}
}

// TestFindingsStopSignal: a pod stopped by the signal of its
// lifecycle.stopSignal is told of by that signal's name.
func TestFindingsStopSignal(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").log(-5000, "started", "app-a", nil).
		endpoints(-5000, 0, ready("10.0.0.1"))
	tl.event(0, cluster.PodTerminating, "app-a", map[string]string{"grace": "10s"}).
		event(0, cluster.SignalSent, "app-a", map[string]string{"signal": "SIGQUIT", "grace": "10s"}).
		event(10000, cluster.Killed, "app-a", nil).
		event(10000, cluster.ContainerExited, "app-a", map[string]string{"code": "137"})
	tl.run.OldPods = []results.OldPod{{Name: "app-a"}}
	d := Diagnose(&tl.run, nil)
	if len(d.Findings) == 0 || !strings.Contains(d.Findings[0].Text, "SIGQUIT") || strings.Contains(d.Findings[0].Text, "SIGTERM") {
		t.Errorf("findings %+v: want the first to name SIGQUIT, not SIGTERM", d.Findings)
	}
}

// TestRoutingFinding checks what the diagnosis tells of old pods that the
// routing still sent new connections to at their SIGTERM: the fix where a
// request to the pod failed, and only then.
func TestRoutingFinding(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").running("app-c", "10.0.0.3").
		endpoints(-5000, 0, ready("10.0.0.1"), ready("10.0.0.2"), ready("10.0.0.3")).
		stopped("app-a", 0, 0, 5, 143, false).stopped("app-b", 0, 0, 5, 143, false).
		endpoints(1, 800, terminating("10.0.0.1"), terminating("10.0.0.2"), ready("10.0.0.3"))
	tl.run.OldPods = []results.OldPod{{Name: "app-a", AfterSigterm: new(int)}, {Name: "app-b", AfterSigterm: new(int)}}
	d, _ := tl.diagnosed(t, request("r", load.Refused, 300, 300, 300, "10.0.0.1:8080", 0, 0))
	texts := map[string]string{}
	for _, f := range d.Findings {
		if f.Kind == "routing-not-converged" {
			texts[f.Pod] = f.Text
		}
	}
	if !strings.Contains(texts["app-a"], "a preStop delay would have covered") {
		t.Errorf("app-a, refused in the race: %q, want the preStop delay's fix", texts["app-a"])
	}
	if !strings.HasSuffix(texts["app-b"], "none of its requests failed") {
		t.Errorf("app-b, nothing failed: %q, want it said that none of its requests failed", texts["app-b"])
	}
}

// TestIngressFinding: where an ingress logged the endpoints it routed to,
// an old pod's finding tells how long after its SIGTERM the ingress still
// sent it requests, not what the nodes' views did.
func TestIngressFinding(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		endpoints(-5000, 0, ready("10.0.0.1"), ready("10.0.0.2")).
		stopped("app-a", 0, 0, 5, 143, false).
		endpoints(1, 300, terminating("10.0.0.1"), ready("10.0.0.2"))
	ingressView := func(at float64, eps ...cluster.Endpoint) {
		tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at, Source: results.SourceIngress, Kind: "endpoints", Pod: "ingress-1", Endpoints: cluster.Endpoints{List: eps}})
		sortTimeline(tl.run.Timeline)
	}
	ingressView(-4000, ready("10.0.0.1"), ready("10.0.0.2"))
	ingressView(2500, ready("10.0.0.2"))
	// The request it had in flight at SIGTERM was answered: it was the
	// requests the ingress sent on that failed, not a server that went
	// on accepting them.
	tl.run.OldPods = []results.OldPod{{Name: "app-a", AfterSigterm: ptr.To(1)}}
	r := viaIngress(request("r", load.ResponseTimeout, 300, 300, 10300, "10.96.0.20:80", 0, 0),
		proxy.Attempt{Upstream: "10.0.0.1:8080", Outcome: string(proxy.UpstreamRefused)})
	d, got := tl.diagnosed(t, r)
	if !slices.Equal(got, []results.Cause{IngressRoutingRace}) {
		t.Errorf("causes %v, want the ingress's routing race", got)
	}
	var kinds []string
	for _, f := range d.Findings {
		kinds = append(kinds, f.Kind)
		if f.Kind == "ingress-not-converged" && !strings.Contains(f.Text, "the ingress still sent requests to it, for 2.50 s more: a preStop delay longer than the ingress's update delay") {
			t.Errorf("finding %q, want the 2.5 s the ingress still routed to it, and the preStop's fix", f.Text)
		}
	}
	if !slices.Equal(kinds, []string{"served-after-sigterm", "ingress-not-converged"}) {
		t.Errorf("findings %v, want the ingress's view, not the nodes'", kinds)
	}
}

// TestIngressFindingCountsAttempts: a pod that only an earlier attempt
// of the ingress failed on, not the one the request's cause names, did
// not serve all its requests: its finding gives the fix, not "none of its
// requests failed".
func TestIngressFindingCountsAttempts(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		stopped("app-a", 0, 0, 5, 143, false).stopped("app-b", 0, 0, 5, 143, false)
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: -4000, Source: results.SourceIngress, Kind: "endpoints", Pod: "ingress-1",
		Endpoints: cluster.Endpoints{List: []cluster.Endpoint{ready("10.0.0.1"), ready("10.0.0.2")}}})
	sortTimeline(tl.run.Timeline)
	tl.run.OldPods = []results.OldPod{{Name: "app-a", AfterSigterm: new(int)}, {Name: "app-b", AfterSigterm: new(int)}}
	r := viaIngress(request("r", load.ResponseTimeout, 300, 300, 10300, "10.96.0.20:80", 0, 0),
		proxy.Attempt{Upstream: "10.0.0.1:8080", Outcome: string(proxy.UpstreamRefused)},
		proxy.Attempt{Upstream: "10.0.0.2:8080", Outcome: "canceled"})
	d, _ := tl.diagnosed(t, r)
	for _, f := range d.Findings {
		if f.Kind == "ingress-not-converged" && strings.HasSuffix(f.Text, "none of its requests failed") {
			t.Errorf("%s: %q, want the fix: an attempt at it failed", f.Pod, f.Text)
		}
	}
}

// TestDiagnoseAgain checks that a diagnosis read back is diagnosed the
// same: the join is replaced, not added to.
func TestDiagnoseAgain(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").stopped("app-a", 0, 0, 5, 143, false)
	first := Diagnose(&tl.run, []results.Request{request("1", load.Closed, -50, -50, 6, "10.0.0.1:8080", 0, 0)})
	second := Diagnose(&tl.run, first.Requests)
	if !reflect.DeepEqual(first, second) {
		t.Errorf("diagnosed again:\n%+v\nwant\n%+v", second, first)
	}
}

// TestDiagnoseFromTheAPI diagnoses a run as a real cluster's API shows it:
// no stop signal, no SIGKILL, no routing view; the pod's own log tells of
// SIGTERM, and its exit code of SIGKILL. The causes are the same, and the
// limits say what was inferred.
func TestDiagnoseFromTheAPI(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		log(-5000, "started", "app-a", nil).log(-5000, "started", "app-b", nil)
	tl.run.Timeline = append(tl.run.Timeline,
		results.Entry{AtMS: -5000, Source: results.SourceCluster, Kind: string(cluster.EndpointsPublished),
			Endpoints: cluster.Endpoints{List: []cluster.Endpoint{ready("10.0.0.1"), ready("10.0.0.2")}}})
	tl.event(0, cluster.PodTerminating, "app-a", map[string]string{"grace": "10s"}).
		log(2, "sigterm", "app-a", nil).
		event(10000, cluster.ContainerExited, "app-a", map[string]string{"code": "137"})
	d, got := tl.diagnosed(t,
		request("hostage", load.Closed, 9800, 9800, 10001, "10.0.0.1:8080", 30, 20000),
		request("race", load.Refused, 300, 300, 300, "10.0.0.1:8080", 0, 0),
	)
	if !slices.Equal(got, []results.Cause{KilledKeepAliveHostage, RoutingRace}) {
		t.Errorf("causes %v, want sigkill-keepalive-hostage and routing-race", got)
	}
	if len(d.Limits) != 2 || !strings.Contains(d.Limits[0], "stop signal") || !strings.Contains(d.Limits[1], "routing view") {
		t.Errorf("limits %q: want the stop signal and the routing views named", d.Limits)
	}
}

// TestDiagnoseThroughServiceAddress infers the pod behind a connection to
// a Service's address from the one pod whose exit cut it, and leaves it
// unknown when two pods exited then.
func TestDiagnoseThroughServiceAddress(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").stopped("app-a", 0, 0, 5, 143, false)
	d, got := tl.diagnosed(t, request("r", load.Closed, -100, -100, 6, "10.96.0.10:80", 0, 0))
	if r := d.Requests[0]; got[0] != ExitWithoutDrain || r.Pod != "app-a" || !r.PodInferred {
		t.Errorf("request %+v: want exit-without-drain of app-a, inferred", r)
	}
	if !slices.ContainsFunc(d.Limits, func(l string) bool { return strings.Contains(l, "Service's address") }) {
		t.Errorf("limits %q: want the Service's address named", d.Limits)
	}
	tl.stopped("app-b", 0, 0, 6, 143, false)
	d, got = tl.diagnosed(t, request("r", load.Closed, -100, -100, 6, "10.96.0.10:80", 0, 0))
	if r := d.Requests[0]; got[0] != Unknown || r.Pod != "" {
		t.Errorf("request %+v: want unknown, no pod, with two pods exiting then", r)
	}
}

// TestDiagnoseLivenessKilledTwice has a liveness probe fail again during
// its kill's grace period, which kills the instance a second time before
// its one exit: once restarted and ready again, the pod is no longer
// down.
func TestDiagnoseLivenessKilledTwice(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").endpoints(-5000, 0, ready("10.0.0.1"))
	tl.event(1000, cluster.LivenessKill, "app-a", map[string]string{"probe": "liveness"}).
		event(1500, cluster.LivenessKill, "app-a", map[string]string{"probe": "liveness"}).
		event(2000, cluster.ContainerExited, "app-a", map[string]string{"code": "137"}).
		event(2001, cluster.PodUnready, "app-a", nil).
		event(3000, cluster.ContainerStarted, "app-a", map[string]string{"restart": "1"}).
		event(4000, cluster.PodReady, "app-a", nil)
	_, got := tl.diagnosed(t,
		request("killing", load.Refused, 1800, 1800, 1800, "10.0.0.1:8080", 0, 0),
		request("down", load.Refused, 2500, 2500, 2500, "10.0.0.1:8080", 0, 0),
		request("restarted", load.Refused, 3500, 3500, 3500, "10.0.0.1:8080", 0, 0),
		request("back", load.Refused, 5000, 5000, 5000, "10.0.0.1:8080", 0, 0),
	)
	if !slices.Equal(got, []results.Cause{LivenessRestart, LivenessRestart, LivenessRestart, NotListening}) {
		t.Errorf("causes %v, want liveness-restart while killed, down and restarted not ready, then not-listening", got)
	}
}

// TestDiagnoseNoGuess gives the rules evidence that looks like a cause
// but does not show it, and checks they do not claim it.
func TestDiagnoseNoGuess(t *testing.T) {
	const pod, ip = "app-a", "10.0.0.1"
	tests := []struct {
		name    string
		run     func() *timeline
		request results.Request
		want    results.Cause
	}{{
		name: "a server that logs nothing, seen accepting after its termination began, killed: not known to have ignored SIGTERM",
		run: func() *timeline {
			tl := new(timeline).running(pod, ip)
			tl.event(0, cluster.PodTerminating, pod, map[string]string{"grace": "30s"}).
				event(30000, cluster.ContainerExited, pod, map[string]string{"code": "137"})
			tl.run.OldPods = []results.OldPod{{Name: pod, LastNewConnectionMS: ptr.To(500.0)}}
			return tl
		},
		request: request("r", load.Closed, 29800, 29800, 30001, ip+":8080", 30, 40000),
		want:    KilledStillRunning,
	}, {
		name: "a 503 just before a clean exit is an answer, not a cut",
		run: func() *timeline {
			return new(timeline).running(pod, ip).stopped(pod, 0, 0, 2000, 0, false)
		},
		request: request("r", load.HTTP5xx, 1800, 1800, 1900, ip+":8080", 0, 0),
		want:    Unknown,
	}, {
		name: "a refused connection to a restarted pod, not ready nor published, that did not crash",
		run: func() *timeline {
			tl := new(timeline).running(pod, ip).endpoints(-5000, 0, ready(ip))
			tl.event(1000, cluster.PodUnready, pod, nil).endpoints(1001, 0, cluster.Endpoint{Address: ip})
			return tl
		},
		request: request("r", load.Refused, 2200, 2200, 2200, ip+":8080", 0, 0),
		want:    Unknown,
	}, {
		name: "a request on a kept-alive connection in flight since before SIGTERM, killed: a slow drain, not a hostage",
		run: func() *timeline {
			return new(timeline).running(pod, ip).log(-5000, "started", pod, nil).log(1, "sigterm", pod, nil).stopped(pod, 0, 0, 0, 0, true)
		},
		request: request("r", load.Reset, -50, -50, 10001, ip+":8080", 10, 8000),
		want:    KilledSlowDrain,
	}, {
		name: "a kept-alive connection closed by a draining server well before its exit: stale, not an exit without drain",
		run: func() *timeline {
			return new(timeline).running(pod, ip).stopped(pod, 0, 5000, 300, 0, false)
		},
		request: request("r", load.Closed, 5001, 5001, 5002, ip+":8080", 7, 20000),
		want:    StaleConnection,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, got := tt.run().diagnosed(t, tt.request)
			if got[0] != tt.want {
				t.Errorf("cause %s, want %s; evidence %+v", got[0], tt.want, d.Requests[0])
			}
		})
	}
}

// TestDiagnoseOOMKillIsNotTheGraceEnd takes an exit 137 early in a
// termination, on a cluster that reports SIGKILL, for what it is: not the
// kubelet's SIGKILL at the end of the grace period.
func TestDiagnoseOOMKillIsNotTheGraceEnd(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		stopped("app-b", 0, 0, 0, 0, true)
	tl.event(0, cluster.PodTerminating, "app-a", map[string]string{"grace": "30s"}).
		event(0, cluster.SignalSent, "app-a", map[string]string{"signal": "SIGTERM"}).
		event(2000, cluster.ContainerExited, "app-a", map[string]string{"code": "137"})
	d, got := tl.diagnosed(t, request("r", load.Reset, 1900, 1900, 2001, "10.0.0.1:8080", 0, 0))
	if got[0] != ExitWithoutDrain {
		t.Errorf("cause %s, want exit-without-drain; evidence %+v", got[0], d.Requests[0])
	}
	for _, f := range d.Findings {
		if f.Pod == "app-a" && strings.Contains(f.Text, "grace period") {
			t.Errorf("finding %+v: it was not killed at the end of its grace period", f)
		}
	}
}

// TestDiagnoseLivenessExitLogged refuses a connection between the server's
// own last line and the cluster's report of the exit a liveness kill
// caused: the pod was being killed.
func TestDiagnoseLivenessExitLogged(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").log(-5000, "started", "app-a", nil).endpoints(-5000, 0, ready("10.0.0.1"))
	tl.event(5000, cluster.LivenessKill, "app-a", map[string]string{"probe": "liveness"}).
		log(5148, "exiting", "app-a", nil).
		event(5152, cluster.ContainerExited, "app-a", map[string]string{"code": "143"})
	_, got := tl.diagnosed(t, request("r", load.Refused, 5150, 5150, 5150, "10.0.0.1:8080", 0, 0))
	if got[0] != LivenessRestart {
		t.Errorf("cause %s, want liveness-restart", got[0])
	}
}

// TestDiagnoseSigtermBeforeTheWatch refuses a connection to a pod whose
// server logged SIGTERM before the cluster's watch showed its termination,
// as a real cluster's may: a routing race, not a pod that never listened.
func TestDiagnoseSigtermBeforeTheWatch(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").log(-5000, "started", "app-a", nil).log(-4000, "listening", "app-a", nil)
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: -5000, Source: results.SourceCluster, Kind: string(cluster.EndpointsPublished),
		Endpoints: cluster.Endpoints{List: []cluster.Endpoint{ready("10.0.0.1")}}})
	tl.log(100, "sigterm", "app-a", nil).log(101, "exiting", "app-a", nil).
		event(300, cluster.PodTerminating, "app-a", map[string]string{"grace": "30s"}).
		event(310, cluster.ContainerExited, "app-a", map[string]string{"code": "143"})
	_, got := tl.diagnosed(t, request("r", load.Refused, 150, 150, 150, "10.0.0.1:8080", 0, 0))
	if got[0] != RoutingRace {
		t.Errorf("cause %s, want routing-race", got[0])
	}
}

// TestDiagnoseAddressReused refuses a connection to an address that an
// exited old pod had and a new one took, whose start the timeline stamps
// a little after the routing sent the connection to it: the new pod's
// not listening yet, not the old pod's.
func TestDiagnoseAddressReused(t *testing.T) {
	tl := new(timeline).running("app-old", "10.0.0.1").stopped("app-old", 0, 0, 35, 143, false)
	tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: 500, Source: results.SourceCluster, Kind: string(cluster.EndpointsPublished),
		Endpoints: cluster.Endpoints{List: []cluster.Endpoint{ready("10.0.0.1")}}})
	tl.started("app-new", "10.0.0.1", 842, -1, 845, false)
	d, got := tl.diagnosed(t, request("r", load.Refused, 839, 841, 841, "10.0.0.1:8080", 0, 0))
	if r := d.Requests[0]; got[0] != NotListening || r.Pod != "app-new" {
		t.Errorf("request %+v: want not-listening of app-new", r)
	}
}

// TestDiagnoseSigtermJustBeforeTheKill has a server log SIGTERM a moment
// before the cluster reports the liveness kill that sent it, by the
// milliseconds of its own clock: on a cluster that reports signals, the
// log does not start a termination.
func TestDiagnoseSigtermJustBeforeTheKill(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").log(-5000, "started", "app-a", nil).endpoints(-5000, 0, ready("10.0.0.1"))
	tl.log(999.5, "sigterm", "app-a", nil).
		event(1000, cluster.LivenessKill, "app-a", map[string]string{"probe": "liveness"}).
		event(1000.2, cluster.SignalSent, "app-a", map[string]string{"signal": "SIGTERM"}).
		event(1100, cluster.ContainerExited, "app-a", map[string]string{"code": "143"}).
		event(1101, cluster.PodUnready, "app-a", nil)
	_, got := tl.diagnosed(t, request("r", load.Refused, 1800, 1800, 1800, "10.0.0.1:8080", 0, 0))
	if got[0] != LivenessRestart {
		t.Errorf("cause %s, want liveness-restart", got[0])
	}
}

// TestPinnedFinding: after a scale-out, a keep-alive client whose calls
// all went to the pod that was there before is pinned, and each pod that
// joined for long enough gets a finding; a client that reached a pod that
// joined is not, nor a pod that joined just before the traffic ended.
func TestPinnedFinding(t *testing.T) {
	scaled := func(pods map[string]int64) *timeline {
		tl := new(timeline).running("app-a", "10.0.0.1").
			endpoints(-5000, 0, ready("10.0.0.1")).
			started("app-b", "10.0.0.2", 100, -1, 900, false).
			endpoints(1000, 0, ready("10.0.0.1"), ready("10.0.0.2")).
			started("app-c", "10.0.0.3", 100, -1, 8500, false).
			endpoints(8600, 0, ready("10.0.0.1"), ready("10.0.0.2"), ready("10.0.0.3"))
		tl.run.Start = time.Unix(100, 0)
		tl.run.Clients = []load.ClientReport{{Kind: load.KeepAlive, Connections: 4, Pods: pods,
			Seconds: []load.Second{{Time: tl.run.Start.Add(-5 * time.Second)}, {Time: tl.run.Start.Add(9 * time.Second)}}}}
		return tl
	}
	d := Diagnose(&scaled(map[string]int64{"app-a": 500}).run, nil)
	if d == nil || len(d.Findings) != 1 {
		t.Fatalf("diagnosis %+v, want one finding, app-b's (app-c joined 1.4 s before the end)", d)
	}
	want := "a ready endpoint for the last 9 s of the traffic, it got none of the keep-alive client's requests: the client's 4 connections went only to app-a, there before it joined"
	if f := d.Findings[0]; f.Pod != "app-b" || f.Kind != "connections-pinned" || f.Text != want {
		t.Errorf("finding %+v, want app-b's connections-pinned: %q", f, want)
	}
	if d := Diagnose(&scaled(map[string]int64{"app-a": 400, "app-b": 100}).run, nil); d != nil {
		t.Errorf("a client that reached a pod that joined: %+v, want no diagnosis", d.Findings)
	}
}

// TestStaleResolution: a failed connect of a client that resolves the
// name itself, to a pod no longer listed as a ready endpoint, is its
// resolver's stale answer; the same connect through the routing is not.
func TestStaleResolution(t *testing.T) {
	tl := new(timeline).running("app-a", "10.0.0.1").running("app-b", "10.0.0.2").
		endpoints(-5000, 0, ready("10.0.0.1"), ready("10.0.0.2")).
		stopped("app-a", 0, 0, 5, 143, false).
		endpoints(100, 800, ready("10.0.0.2"))
	r := request("r", load.Refused, 3000, 3000, 3000, "10.0.0.1:50051", 0, 0)
	r.Client = load.KeepAlive
	for _, tt := range []struct {
		resolves float64
		stale    bool
	}{{30000, true}, {0, false}} {
		tl.run.Clients = []load.ClientReport{{Kind: load.KeepAlive, ResolveIntervalMS: tt.resolves}}
		tl.run.OldPods = []results.OldPod{{Name: "app-a"}}
		d, got := tl.diagnosed(t, r)
		if len(got) != 1 || (got[0] == StaleResolution) != tt.stale {
			t.Errorf("resolve interval %v ms: causes %v, want stale-resolution: %t", tt.resolves, got, tt.stale)
		}
		// The nodes' routing views were not the resolving client's.
		routed := slices.ContainsFunc(d.Findings, func(f results.Finding) bool { return f.Kind == "routing-not-converged" })
		if routed == tt.stale {
			t.Errorf("resolve interval %v ms: findings %v, want a routing-not-converged one: %t", tt.resolves, d.Findings, !tt.stale)
		}
	}
}
