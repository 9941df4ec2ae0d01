package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/proxy"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// TestDisruption computes a run's capacity, back-offs, evictions and
// recovery from constructed events: pods of Deployment app (and one of
// app-canary, which must not count) become ready before the action, one
// is evicted and replaced, another crashes and backs off twice, and an
// outage ends before the last pod is ready again.
func TestDisruption(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	ev := func(s float64, kind cluster.EventKind, pod string, fields ...string) cluster.Event {
		e := cluster.Event{Time: at(s), Kind: kind, Pod: pod}
		if kind == cluster.PodCreated {
			e.Object = fields[0]
			return e
		}
		if len(fields) > 0 {
			e.Fields = map[string]string{fields[0]: fields[1]}
		}
		return e
	}
	events := []cluster.Event{
		ev(-9, cluster.PodCreated, "app-a1b2c-1", "ReplicaSet/app-a1b2c"),
		ev(-9, cluster.PodCreated, "app-a1b2c-2", "ReplicaSet/app-a1b2c"),
		ev(-9, cluster.PodCreated, "app-a1b2c-3", "ReplicaSet/app-a1b2c"),
		ev(-9, cluster.PodCreated, "app-canary-x9z-1", "ReplicaSet/app-canary-x9z"),
		ev(-8, cluster.PodReady, "app-a1b2c-1"),
		ev(-8, cluster.PodReady, "app-a1b2c-2"),
		ev(-8, cluster.PodReady, "app-a1b2c-3"),
		ev(-8, cluster.PodReady, "app-canary-x9z-1"),
		// The action: an eviction refused, then one accepted.
		ev(0.5, cluster.EvictionRefused, "app-a1b2c-1", "status", "429"),
		ev(1, cluster.PodEvicted, "app-a1b2c-1"),
		ev(1, cluster.PodTerminating, "app-a1b2c-1"),
		ev(1.5, cluster.PodReady, "app-a1b2c-1"), // a terminating pod never counts again
		ev(2, cluster.PodCreated, "app-a1b2c-4", "ReplicaSet/app-a1b2c"),
		ev(2.5, cluster.PodUnready, "app-a1b2c-2"),
		ev(2.6, cluster.BackOff, "app-a1b2c-2", "delay", "9.998s"),
		ev(3, cluster.PodReady, "app-a1b2c-4"),
		ev(12.7, cluster.BackOff, "app-a1b2c-2", "delay", "19.99s"),
		ev(33, cluster.PodReady, "app-a1b2c-2"),
	}
	run := &results.Run{Start: start, Outage: &results.Outage{Mode: OutageRefuse, StartMS: 0, EndMS: 20000},
		Timeline: []results.Entry{
			{AtMS: 21000, Source: results.SourceClient, Kind: "refused"},
			{AtMS: 25000, Source: results.SourceCluster, Kind: "pod_ready"},
		}}
	disruption(run, events, "app", 3, ptr.To(2))
	want := &results.Run{Start: start, Outage: run.Outage, Timeline: run.Timeline,
		Capacity:  &results.Capacity{MinReady: 1, Replicas: 3, Allowed: ptr.To(2), AtMS: 2500},
		BackOffs:  []results.BackOff{{AtMS: 2600, Pod: "app-a1b2c-2", DelayMS: 9998}, {AtMS: 12700, Pod: "app-a1b2c-2", DelayMS: 19990}},
		Evictions: &results.Evictions{Accepted: 1, Refused: 1},
		RecoverMS: ptr.To(13000.0), // all ready at 33 s, 13 s after the outage's end at 20 s
	}
	if diff := cmp.Diff(want, run); diff != "" {
		t.Errorf("disruption (-want +got):\n%s", diff)
	}

	// A failure after the pods are back is what ends the recovery; a run
	// with no event after the action keeps the capacity it started with.
	run = &results.Run{Start: start, Outage: &results.Outage{EndMS: 20000}, Timeline: []results.Entry{{AtMS: 36000, Source: results.SourceClient, Kind: "timeout"}}}
	disruption(run, events, "app", 3, nil)
	if run.RecoverMS == nil || *run.RecoverMS != 16000 {
		t.Errorf("recover = %v, want 16000 ms, the last failure's", run.RecoverMS)
	}
	run = &results.Run{Start: at(40)}
	disruption(run, events, "app", 3, nil)
	if diff := cmp.Diff(&results.Capacity{MinReady: 3, Replicas: 3}, run.Capacity); diff != "" || run.Evictions != nil || run.RecoverMS != nil {
		t.Errorf("after everything: capacity diff %s, evictions %v, recover %v: want 3/3 and neither", diff, run.Evictions, run.RecoverMS)
	}
	// Not every pod ready at the end: no recovery.
	run = &results.Run{Start: start, Outage: &results.Outage{EndMS: 20000}}
	disruption(run, events[:len(events)-1], "app", 3, nil)
	if run.RecoverMS != nil {
		t.Errorf("recover = %v with a pod still unready, want none", *run.RecoverMS)
	}
}

// TestRolloutAllowed resolves the fewest ready pods a rollout's strategy
// allows as the deployment controller does: maxUnavailable rounded down,
// 25 % when unset, one when both fenceposts round to zero, none for a
// Recreate strategy, and no figure for an action that is not a rollout.
func TestRolloutAllowed(t *testing.T) {
	rolling := func(surge, unavailable *intstr.IntOrString) appsv1.DeploymentStrategy {
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: surge, MaxUnavailable: unavailable}}
	}
	n := func(v int) *intstr.IntOrString { i := intstr.FromInt(v); return &i }
	pct := func(v string) *intstr.IntOrString { i := intstr.FromString(v); return &i }
	tests := []struct {
		name     string
		strategy appsv1.DeploymentStrategy
		replicas int32
		action   string
		want     *int
	}{
		{name: "defaults of 3", replicas: 3, action: ActionRolloutRestart, want: ptr.To(3)},
		{name: "defaults of 8", replicas: 8, action: ActionRolloutRestart, want: ptr.To(6)},
		{name: "maxUnavailable 1", strategy: rolling(n(0), n(1)), replicas: 3, action: ActionRolloutRestart, want: ptr.To(2)},
		{name: "set-env", strategy: rolling(n(1), n(0)), replicas: 2, action: ActionSetEnv, want: ptr.To(2)},
		{name: "both round to zero", strategy: rolling(pct("0%"), pct("10%")), replicas: 3, action: ActionRolloutRestart, want: ptr.To(2)},
		{name: "maxUnavailable above replicas", strategy: rolling(n(0), n(5)), replicas: 3, action: ActionRolloutRestart, want: ptr.To(0)},
		{name: "recreate", strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}, replicas: 3, action: ActionRolloutRestart, want: ptr.To(0)},
		{name: "not a percentage", strategy: rolling(n(0), pct("half")), replicas: 3, action: ActionRolloutRestart},
		{name: "delete-pod", strategy: rolling(n(0), n(1)), replicas: 3, action: ActionDeletePod},
		{name: "drain", replicas: 1, action: ActionDrain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Strategy: tt.strategy}}
			if diff := cmp.Diff(tt.want, rolloutAllowed(d, tt.replicas, tt.action)); diff != "" {
				t.Errorf("allowed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFiguresProxyLogs: an ingress's log gives the timeline the endpoints
// it routed to (the last before the timeline's minute too), and a request
// that got no answer the attempts the ingress made, joined by its id, of
// the event nearest its failure; one the ingress answered keeps the
// upstreams of its answer; a sidecar's 503 gets the sidecar's attempts.
func TestFiguresProxyLogs(t *testing.T) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	stamp := func(s float64) string { return at(s).Format(time.RFC3339Nano) }
	ingress := map[string][]cluster.LogLine{"ingress-1": {
		{Time: at(-120), Text: `{"event":"endpoints","time":"` + stamp(-120) + `","service":"default/app","ready":[]}`},
		{Time: at(-90), Text: `{"event":"endpoints","time":"` + stamp(-90) + `","service":"default/app","ready":[{"addr":"10.244.1.3:8080","pod":"app-1"}]}`},
		{Time: at(-1), Text: `{"event":"listening","time":"` + stamp(-1) + `","address":"10.244.2.4:8080"}`},
		{Time: at(-50), Text: `{"event":"request","time":"` + stamp(-50) + `","id":"r1","attempts":[{"upstream":"10.244.1.7:8080","outcome":"upstream-refused"}]}`},
		{Time: at(0.5), Text: `{"event":"endpoints","time":"` + stamp(0.5) + `","service":"default/app","ready":[{"addr":"10.244.1.3:8080","pod":"app-1"},{"addr":"10.244.1.5:8080"}]}`},
		{Time: at(11), Text: `{"event":"request","time":"` + stamp(11) + `","id":"r1","attempts":[{"upstream":"10.244.1.4:8080","outcome":"upstream-connect-timeout","ms":5000},{"upstream":"10.244.1.3:8080","outcome":"canceled","ms":5000}]}`},
		{Time: at(2), Text: `{"event":"request","time":"` + stamp(2) + `","id":"r2","attempts":[{"upstream":"10.244.1.9:8080","outcome":"upstream-refused"}]}`},
	}}
	sidecars := map[string][]cluster.LogLine{"app-1": {
		{Time: at(3), Text: `{"event":"request","time":"` + stamp(3) + `","id":"r3","attempts":[{"upstream":"127.0.0.1:50051","outcome":"upstream-reset","cached":true,"sent":true}]}`},
	}}
	requests := []load.Result{
		{ID: "r1", Time: at(1), Class: load.ResponseTimeout, Total: 10 * time.Second},
		{ID: "r2", Time: at(1.5), Class: load.HTTP5xx, Status: 502, Proxy: proxy.UpstreamError, Upstreams: "10.244.1.4:8080"},
		{ID: "r3", Time: at(2.9), Class: load.HTTP5xx, Status: 503, Proxy: proxy.UpstreamReset, Pod: "app-1"},
	}
	run := &results.Run{Start: start}
	failed := figures(run, &load.Report{}, requests, nil, podAddresses{}, nil, proxyLogs{ingress: ingress, sidecars: sidecars}, time.Time{})
	got := map[string]string{}
	for _, f := range failed {
		var outcomes []string
		for _, a := range f.Attempts {
			outcomes = append(outcomes, fmt.Sprintf("%s %s cached=%v", a.Upstream, a.Outcome, a.Cached))
		}
		got[f.ID] = f.Upstreams + " | " + strings.Join(outcomes, "; ")
	}
	want := map[string]string{
		"r1": "10.244.1.4:8080, 10.244.1.3:8080 | 10.244.1.4:8080 upstream-connect-timeout cached=false; 10.244.1.3:8080 canceled cached=false",
		"r2": "10.244.1.4:8080 | 10.244.1.9:8080 upstream-refused cached=false",
		"r3": " | 127.0.0.1:50051 upstream-reset cached=true",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstreams by request (-want +got):\n%s", diff)
	}
	var views []results.Entry
	for _, e := range run.Timeline {
		if e.Source == results.SourceIngress {
			views = append(views, e)
		}
	}
	wantViews := []results.Entry{{AtMS: -90000, Source: results.SourceIngress, Kind: "endpoints", Pod: "ingress-1",
		Detail:    map[string]string{"service": "default/app"},
		Endpoints: cluster.Endpoints{List: []cluster.Endpoint{{Address: "10.244.1.3", Ready: true, Serving: true}}}},
		{AtMS: 500, Source: results.SourceIngress, Kind: "endpoints", Pod: "ingress-1",
			Detail:    map[string]string{"service": "default/app"},
			Endpoints: cluster.Endpoints{List: []cluster.Endpoint{{Address: "10.244.1.3", Ready: true, Serving: true}, {Address: "10.244.1.5", Ready: true, Serving: true}}}}}
	if diff := cmp.Diff(wantViews, views); diff != "" {
		t.Errorf("the ingress's entries (-want +got):\n%s", diff)
	}
}

// TestFiguresSigtermFromLog: on a cluster whose kubelet reports no signal,
// as a real one, an old pod's SIGTERM is when its log says it received it,
// and the requests it answered after that count as after SIGTERM.
func TestFiguresSigtermFromLog(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	stamp := func(s float64) string { return at(s).Format(time.RFC3339Nano) }
	events := []cluster.Event{
		{Time: at(0.1), Kind: cluster.PodTerminating, Pod: "app-1"},
		{Time: at(5), Kind: cluster.ContainerExited, Pod: "app-1", Fields: map[string]string{"code": "143"}},
	}
	logs := map[string][]cluster.LogLine{"app-1": {
		{Time: at(-3), Text: `{"event":"sigterm","time":"` + stamp(-3) + `"}`}, // an earlier run's
		{Time: at(0.2), Text: `not JSON`},
		{Time: at(1.1), Text: `{"event":"sigterm","time":"` + stamp(1) + `","pod":"app-1"}`},
	}}
	requests := []load.Result{
		{Time: at(0.5), Pod: "app-1", Class: load.OK},
		{Time: at(1.5), Pod: "app-1", Class: load.OK},
	}
	run := &results.Run{Start: start}
	figures(run, &load.Report{}, requests, events, podAddressesOf(events), logs, proxyLogs{}, at(5))
	if len(run.OldPods) != 1 {
		t.Fatalf("old pods %+v, want app-1", run.OldPods)
	}
	p := run.OldPods[0]
	if p.SigtermMS == nil || *p.SigtermMS != 1000 {
		t.Errorf("SIGTERM at %v ms, want 1000 (the pod's own log)", p.SigtermMS)
	}
	if p.AfterSigterm == nil || *p.AfterSigterm != 1 || p.ExitCode != 143 {
		t.Errorf("%v requests after SIGTERM, exit %d; want 1, 143", p.AfterSigterm, p.ExitCode)
	}
}

// addressedRun returns the cluster events of a run whose old pods app-1 and
// app-2 get SIGTERM at +1 s and exit at +3 s, and the events before it:
// app-1 started with the address 127.77.0.2, which app-0, deleted, had
// before it, and app-3 has after it; app-2 started with 10.77.0.3.
func addressedRun(at func(float64) time.Time) (earlier, events []cluster.Event) {
	ip := func(s float64, pod, addr string) cluster.Event {
		return cluster.Event{Time: at(s), Kind: cluster.PodStarted, Pod: pod, Fields: map[string]string{"ip": addr}}
	}
	earlier = []cluster.Event{
		ip(-30, "app-0", "127.77.0.2"),
		{Time: at(-20), Kind: cluster.PodDeleted, Pod: "app-0"},
		ip(-10, "app-1", "127.77.0.2"),
		ip(-10, "app-2", "10.77.0.3"),
	}
	for _, pod := range []string{"app-1", "app-2"} {
		events = append(events,
			cluster.Event{Time: at(0.1), Kind: cluster.PodTerminating, Pod: pod},
			cluster.Event{Time: at(1), Kind: cluster.SignalSent, Pod: pod, Fields: map[string]string{"signal": "SIGTERM"}},
			cluster.Event{Time: at(3), Kind: cluster.ContainerExited, Pod: pod, Fields: map[string]string{"code": "143"}})
	}
	// A new pod gets app-1's address once app-1 is gone.
	events = append(events, ip(3.5, "app-3", "127.77.0.2"))
	return earlier, events
}

// TestFiguresByAddress: requests to a server that sets no X-Pod-Name are
// attributed to the pod whose address their connection reached, the pod
// that had the address at the time (app-0 before app-1, app-3 after it);
// the header, when present, wins; a
// failed request and one that reached a Service's address count for no
// pod. A request on a kept-alive connection counts for the pod's last
// request, not for its last new connection.
func TestFiguresByAddress(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	req := func(s float64, class load.Class, pod, addr string) load.Result {
		return load.Result{Time: at(s), Connect: 500 * time.Microsecond, Class: class, Pod: pod, Addr: addrPort(addr)}
	}
	kept := func(r load.Result) load.Result { r.ConnRequests = 1; return r }
	earlier, events := addressedRun(at)
	requests := []load.Result{
		req(0.5, load.OK, "", "127.77.0.2:8080"),
		kept(req(1.5, load.HTTP5xx, "", "127.77.0.2:8080")), // after SIGTERM
		req(0.8, load.OK, "", "10.77.0.3:8080"),             // app-2
		kept(req(1.3, load.OK, "", "10.77.0.3:8080")),       // app-2, after SIGTERM
		req(1.2, load.OK, "app-2", "127.77.0.2:8080"),       // the header wins
		req(2, load.Reset, "", "127.77.0.2:8080"),           // not answered
		req(2.2, load.OK, "", "10.96.0.10:80"),              // a ClusterIP
		req(2.4, load.OK, "", ""),
		req(4, load.OK, "", "127.77.0.2:8080"), // app-3's by then
	}
	run := &results.Run{Start: start}
	figures(run, &load.Report{}, requests, events, podAddressesOf(slices.Concat(earlier, events)), nil, proxyLogs{}, at(3))
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	want := []results.OldPod{
		{Name: "app-1", SigtermMS: f(1000), LastRequestMS: f(1500.5), GapMS: f(-500.5), LastNewConnectionMS: f(500.5), AfterSigterm: n(1), DrainMS: 2900, ExitCode: 143},
		{Name: "app-2", SigtermMS: f(1000), LastRequestMS: f(1300.5), GapMS: f(-300.5), LastNewConnectionMS: f(1200.5), AfterSigterm: n(2), DrainMS: 2900, ExitCode: 143},
	}
	if diff := cmp.Diff(want, run.OldPods); diff != "" {
		t.Errorf("old pods (-want +got):\n%s", diff)
	}
}

// TestFiguresUnattributed: when requests were answered and none could be
// attributed to a pod (no header, and addresses that are no pod's, as a
// real cluster's ClusterIP), the old pods' request figures are unknown,
// absent from the JSON, not zero; once one request is attributed, a pod
// that answered none has a measured zero; and when no request was
// answered at all, every pod answered none: a measured zero too.
func TestFiguresUnattributed(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	earlier, events := addressedRun(at)
	requests := []load.Result{
		{Time: at(0.5), Class: load.OK, Addr: addrPort("10.96.0.10:80")},
		{Time: at(1.5), Class: load.OK, Addr: addrPort("10.96.0.10:80")},
		{Time: at(1.6), Class: load.OK},
	}
	run := &results.Run{Start: start}
	figures(run, &load.Report{}, requests, events, podAddressesOf(slices.Concat(earlier, events)), nil, proxyLogs{}, at(3))
	if len(run.OldPods) != 2 {
		t.Fatalf("old pods %+v, want app-1 and app-2", run.OldPods)
	}
	for _, p := range run.OldPods {
		if p.AfterSigterm != nil || p.LastRequestMS != nil || p.GapMS != nil || p.SigtermMS == nil {
			t.Errorf("old pod %s: after SIGTERM %v, last request %v, gap %v, SIGTERM %v: want the request figures unknown, SIGTERM known",
				p.Name, p.AfterSigterm, p.LastRequestMS, p.GapMS, p.SigtermMS)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"name":"` + p.Name + `","sigtermMs":1000,"drainMs":2900,"exitCode":143}`; string(b) != want {
			t.Errorf("JSON %s, want %s", b, want)
		}
	}

	requests = append(requests, load.Result{Time: at(0.7), Class: load.OK, Addr: addrPort("127.77.0.2:8080")})
	run = &results.Run{Start: start}
	figures(run, &load.Report{}, requests, events, podAddressesOf(slices.Concat(earlier, events)), nil, proxyLogs{}, at(3))
	app2 := run.OldPods[1]
	if app2.Name != "app-2" || app2.AfterSigterm == nil || *app2.AfterSigterm != 0 || app2.LastRequestMS != nil {
		t.Errorf("old pod %s: after SIGTERM %v, last request %v: want a measured 0 and none", app2.Name, app2.AfterSigterm, app2.LastRequestMS)
	}
	b, err := json.Marshal(app2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"afterSigterm":0`) {
		t.Errorf("JSON %s lacks \"afterSigterm\":0", b)
	}

	for _, requests := range [][]load.Result{
		nil,
		{
			{Time: at(0.5), Class: load.Refused, Addr: addrPort("10.96.0.10:80")},
			{Time: at(1.5), Class: load.Reset, Addr: addrPort("127.77.0.2:8080")},
			{Time: at(1.6), Class: load.ConnectTimeout},
		},
	} {
		run = &results.Run{Start: start}
		figures(run, &load.Report{}, requests, events, podAddressesOf(slices.Concat(earlier, events)), nil, proxyLogs{}, at(3))
		for _, p := range run.OldPods {
			if p.AfterSigterm == nil || *p.AfterSigterm != 0 || p.LastRequestMS != nil {
				t.Errorf("%d requests, none answered: old pod %s: after SIGTERM %v, last request %v: want a measured 0 and none",
					len(requests), p.Name, deref(p.AfterSigterm), deref(p.LastRequestMS))
			}
		}
	}
}

// headerless hands the runner the results of a server that sets no
// X-Pod-Name header: LocalTraffic's, with the header's pod removed. It
// checks, on the way, that on the embedded cluster an answered request's
// address names one pod, the one whose header it carried.
type headerless struct {
	dial load.Dialer
	t    *testing.T
}

func (h headerless) WaitServing(ctx context.Context, cfg load.Config, failed func(error)) error {
	return LocalTraffic(h.dial, nil).WaitServing(ctx, cfg, failed)
}

func (h headerless) Run(ctx context.Context, cfg load.Config, started func()) (*load.Report, []load.Result, error) {
	report, requests, err := LocalTraffic(h.dial, nil).Run(ctx, cfg, started)
	byAddr := map[netip.AddrPort]string{}
	for i, r := range requests {
		if r.Pod == "" {
			continue
		}
		if pod, ok := byAddr[r.Addr]; !r.Addr.IsValid() || ok && pod != r.Pod {
			h.t.Errorf("request %s answered by %s through address %v, which %q had", r.ID, r.Pod, r.Addr, pod)
		}
		byAddr[r.Addr] = r.Pod
		requests[i].Pod = ""
	}
	if len(byAddr) == 0 && err == nil {
		h.t.Error("no request answered with a pod's name")
	}
	return report, requests, err
}

// addrPort parses s, "ip:port"; "" is the zero AddrPort, of a request
// that made no connection.
func addrPort(s string) netip.AddrPort {
	if s == "" {
		return netip.AddrPort{}
	}
	return netip.MustParseAddrPort(s)
}

// TestFiguresHeaderlessRollout runs seed 001's graceful rollout quick on
// the embedded cluster, its requests stripped of the pod's header, as a
// server of one's own would answer: the old pods' figures come from the
// addresses the connections reached and show what the header shows, each
// old pod's last request a second or more before its SIGTERM and none
// after.
func TestFiguresHeaderlessRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout under load")
	}
	t.Parallel()
	_, res := runWithTraffic(t, "3-graceful", func(c cluster.Backend) TrafficSource { return headerless{dial: c.DialContext, t: t} })
	run := res.Runs[0]
	if len(run.OldPods) != 3 {
		t.Fatalf("%d old pods, want 3: %+v", len(run.OldPods), run.OldPods)
	}
	for _, p := range run.OldPods {
		if p.GapMS == nil || *p.GapMS < 1000 || p.AfterSigterm == nil || *p.AfterSigterm != 0 {
			t.Errorf("old pod %s: gap %v ms, %v requests after SIGTERM: want its last request a second or more before SIGTERM, none after",
				p.Name, deref(p.GapMS), deref(p.AfterSigterm))
		}
	}
}

// TestFiguresEndpoints: the timeline entry of an endpoints event carries
// the event's Endpoints and names the Service in its detail.
func TestFiguresEndpoints(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	eps := cluster.Endpoints{NodeLocal: true, List: []cluster.Endpoint{{Address: "127.77.0.2", Ready: true, Serving: true, Node: "node-1"}}}
	events := []cluster.Event{{Time: start.Add(time.Second), Kind: cluster.EndpointsApplied, Node: "node-1", Object: "Service/default/app", Endpoints: eps}}
	run := &results.Run{Start: start}
	figures(run, &load.Report{}, nil, events, podAddressesOf(events), nil, proxyLogs{}, start.Add(2*time.Second))
	want := []results.Entry{{AtMS: 1000, Source: results.SourceCluster, Kind: string(cluster.EndpointsApplied), Node: "node-1",
		Detail: map[string]string{"object": "Service/default/app"}, Endpoints: eps}}
	if diff := cmp.Diff(want, run.Timeline); diff != "" {
		t.Errorf("timeline (-want +got):\n%s", diff)
	}
}

// deref spells what p points to, or nil.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestRunningOf: the pods a run's recording begins with are the
// Deployment's started and not ended, with their node, address and
// readiness then; another Deployment's pods and the pods gone are not.
func TestRunningOf(t *testing.T) {
	t.Parallel()
	created := func(pod, rs string) cluster.Event {
		return cluster.Event{Kind: cluster.PodCreated, Pod: pod, Object: "ReplicaSet/" + rs}
	}
	started := func(pod, node, ip string) cluster.Event {
		return cluster.Event{Kind: cluster.PodStarted, Pod: pod, Node: node, Fields: map[string]string{"ip": ip}}
	}
	events := []cluster.Event{
		created("app-a1-1", "app-a1"), started("app-a1-1", "node-1", "10.0.1.1"),
		created("app-a1-2", "app-a1"), started("app-a1-2", "node-2", "10.0.2.1"),
		created("app-a1-3", "app-a1"), started("app-a1-3", "node-1", "10.0.1.2"),
		created("app-db-b2-1", "app-db-b2"), started("app-db-b2-1", "node-2", "10.0.2.9"),
		{Kind: cluster.PodReady, Pod: "app-a1-1"}, {Kind: cluster.PodReady, Pod: "app-a1-3"},
		{Kind: cluster.PodTerminating, Pod: "app-a1-3"}, {Kind: cluster.PodTerminated, Pod: "app-a1-3"},
	}
	want := []results.RunningPod{{Name: "app-a1-1", Node: "node-1", IP: "10.0.1.1", Ready: true}, {Name: "app-a1-2", Node: "node-2", IP: "10.0.2.1"}}
	if got := runningOf(events, "app"); !cmp.Equal(got, want) {
		t.Errorf("runningOf = %+v, want %+v", got, want)
	}
}

// TestSupervisordEvents reads the steps of a stop from supervisord's log
// lines, at the time the kubelet read them, and leaves its other lines
// out.
func TestSupervisordEvents(t *testing.T) {
	read := time.Date(2026, 12, 2, 16, 1, 41, 0, time.UTC)
	at := func(t time.Time) float64 { return float64(t.Sub(read).Milliseconds()) }
	var got []string
	for i, text := range []string{
		"2026-12-02 16:01:39,680 INFO supervisord started with pid 1",
		"2026-12-02 16:01:40,687 INFO spawned: 'envoy' with pid 5682",
		"2026-12-02 16:01:41,693 WARN received SIGTERM indicating exit request",
		"2026-12-02 16:01:41,693 INFO waiting for envoy, grpc to die",
		"2026-12-02 16:01:42,226 INFO stopped: grpc (exit status 0)",
		"2026-12-02 16:01:45,570 WARN stopped: envoy (terminated by SIGKILL)",
		`{"time":"2026-12-02T16:01:41.7Z","event":"sigterm"}`,
	} {
		e, ok := logEvent("ocr-1", cluster.LogLine{Time: read.Add(time.Duration(i) * time.Second), Text: text}, at)
		if ok {
			got = append(got, fmt.Sprintf("%.0f %s %v", e.AtMS, e.Kind, e.Detail))
		}
	}
	want := []string{
		"1000 program_started map[program:envoy]",
		"2000 supervisord_signal map[signal:SIGTERM]",
		"3000 programs_stopping map[programs:envoy,grpc]",
		"4000 program_stopped map[how:exit status 0 program:grpc]",
		"5000 program_stopped map[how:terminated by SIGKILL program:envoy]",
		"700 sigterm map[]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	lines := []cluster.LogLine{{Time: read.Add(2 * time.Second), Text: "2026-12-02 16:01:41,693 WARN received SIGTERM indicating exit request"}}
	if got := loggedSigterm(lines, read); !got.Equal(read.Add(2 * time.Second)) {
		t.Errorf("loggedSigterm = %v, want supervisord's SIGTERM", got)
	}
}
