package report

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// TestHTMLDisruption checks the action lane and the disruption lines of a
// run with an outage, a drain, a rollback, back-offs and evictions.
func TestHTMLDisruption(t *testing.T) {
	r := twoScenarios()
	run := &r.Scenarios[0].Runs[0]
	rolledBack, recovered := 9000.0, 400.0
	run.Outage = &results.Outage{Mode: "blackhole", StartMS: 0, EndMS: 3000}
	run.RecoverMS = &recovered
	run.Drain = &results.DrainOutcome{Node: "node-1", EndMS: 8000, TimeoutMS: 8000}
	run.RolledBackMS = &rolledBack
	two := 2
	run.Capacity = &results.Capacity{MinReady: 1, Replicas: 3, Allowed: &two, AtMS: 2500}
	run.Evictions = &results.Evictions{Refused: 2}
	run.BackOffs = []results.BackOff{{AtMS: 1000, Pod: "app-7d9-new", DelayMS: 10000}}
	run.Timeline = append(run.Timeline,
		results.Entry{AtMS: 1000, Source: results.SourceCluster, Kind: "back_off", Pod: "app-7d9-new", Detail: map[string]string{"delay": "10s"}},
		results.Entry{AtMS: 1500, Source: results.SourceCluster, Kind: "eviction_refused", Pod: "app-6c75f686b4-p9gcg", Detail: map[string]string{"budget": "app"}},
		results.Entry{AtMS: 8500, Source: results.SourceCluster, Kind: "progress_deadline_exceeded", Detail: map[string]string{"deadline": "8s"}},
	)
	page := html.UnescapeString(renderHTML(t, r))
	for _, want := range []string{
		`>action</text>`,
		`dependency outage (blackhole) from +0.000 s to +3.000 s`,
		`recovering from +3.000 s to +3.400 s`,
		`drain of node-1 from +0.000 s to +8.000 s: blocked, given up`,
		`rolled back at +9.000 s`,
		`progress_deadline_exceeded at +8.500 s: deadline=8s`,
		`ready pods fell to 1 of 3 at +2.500 s, below the 2 the rollout strategy allows`, `class="mark capacity below"`,
		`app-7d9-new: back_off at +1.000 s: delay=10s`,
		`app-6c75f686b4-p9gcg: eviction_refused at +1.500 s: budget=app`,
		`<td class="bad" title="the fewest ready pods, 1, of the Deployment's 3 replicas: below the 2 its rollout strategy allows">1/3</td>`,
		`<li>evictions: 0 accepted, 2 refused (429) by a PodDisruptionBudget</li>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestHTMLRunnerSteps checks that the action lane draws the runner's
// steps once: the variables applied as a tick of their own, the outage,
// drain and rollback from their figures, not again from their entries.
func TestHTMLRunnerSteps(t *testing.T) {
	page := html.UnescapeString(renderHTML(t, disruptions()))
	for _, want := range []string{
		`>env applied</text>`, `env_applied at +0.001 s: CT_CRASH_CODE=1`,
		`dependency outage (blackhole) from +0.000 s to +30.000 s`, `drain of node-1 from +0.000 s to +12.001 s: blocked, given up`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, `>rolled back</text>`); n != 1 {
		t.Errorf("the page has %d rollback ticks, want 1", n)
	}
	for _, unwanted := range []string{"outage started", "outage ended", "drain started", "drain ended", "rolled_back at"} {
		if strings.Contains(page, unwanted) {
			t.Errorf("the page draws the runner's step %q again", unwanted)
		}
	}
}

// startedBefore is a rollout's run of a server that logs nothing, as
// `rollout --local` records it: the old pods started before the
// recording, so its timeline has no event of their start, no log event,
// and their first entry is their deletion; the endpoints events name them
// by the addresses that Running gives.
func startedBefore() results.Run {
	cl := func(at float64, kind, pod, node string, detail map[string]string) results.Entry {
		return results.Entry{AtMS: at, Source: results.SourceCluster, Kind: kind, Pod: pod, Node: node, Detail: detail}
	}
	applied := func(at float64, node string, eps ...cluster.Endpoint) results.Entry {
		e := cl(at, "endpoints_applied", "", node, map[string]string{"object": "Service/default/app"})
		e.Endpoints.List = eps
		return e
	}
	ready := func(ip string) cluster.Endpoint { return cluster.Endpoint{Address: ip, Ready: true, Serving: true} }
	unready := func(ip string) cluster.Endpoint { return cluster.Endpoint{Address: ip} }
	last := 1899.0
	return results.Run{
		Repetition: 1, Start: time.Date(2026, 12, 1, 21, 35, 48, 0, time.UTC),
		Clients: []load.ClientReport{{Kind: load.NewConn, Rate: 50, Seconds: []load.Second{{Time: time.Date(2026, 12, 1, 21, 35, 45, 0, time.UTC)}}}},
		OldPods: []results.OldPod{{Name: "app-old-1", LastRequestMS: &last, ExitCode: 0}},
		Running: []results.RunningPod{{Name: "app-old-1", Node: "node-1", IP: "10.0.1.1", Ready: true}, {Name: "app-old-2", Node: "node-2", IP: "10.0.2.1", Ready: true}},
		Timeline: []results.Entry{
			cl(0.2, "pod_created", "app-new-1", "", nil),
			cl(0.4, "pod_started", "app-new-1", "node-2", map[string]string{"ip": "10.0.2.2"}),
			applied(400, "node-1", ready("10.0.1.1"), ready("10.0.2.1"), unready("10.0.2.2")),
			applied(500, "node-2", ready("10.0.1.1"), ready("10.0.2.1"), unready("10.0.2.2")),
			cl(2000, "pod_ready", "app-new-1", "node-2", nil),
			cl(2005, "pod_deleted", "app-old-1", "node-1", nil),
			cl(2006, "pod_terminating", "app-old-1", "node-1", nil),
			cl(2009, "container_exited", "app-old-1", "node-1", map[string]string{"code": "0"}),
			applied(2800, "node-1", ready("10.0.2.1"), ready("10.0.2.2")),
			applied(2850, "node-2", ready("10.0.2.1"), ready("10.0.2.2")),
		},
	}
}

// TestHTMLNodeLocal: with internalTrafficPolicy Local, a node's routing
// view sends new connections only to the endpoints on that node, and the
// report draws it so once each view has applied the endpoints.
func TestHTMLNodeLocal(t *testing.T) {
	applied := func(at float64, node string) results.Entry {
		return results.Entry{AtMS: at, Source: results.SourceCluster, Kind: "endpoints_applied", Node: node,
			Detail: map[string]string{"object": "Service/default/app"},
			Endpoints: cluster.Endpoints{NodeLocal: true, List: []cluster.Endpoint{
				{Address: "10.0.1.1", Ready: true, Serving: true, Node: "node-1"},
				{Address: "10.0.2.1", Ready: true, Serving: true, Node: "node-2"},
			}}}
	}
	run := results.Run{
		Repetition: 1, Start: time.Date(2026, 12, 1, 21, 35, 48, 0, time.UTC),
		Clients: []load.ClientReport{{Kind: load.NewConn, Rate: 50, Seconds: []load.Second{{Time: time.Date(2026, 12, 1, 21, 35, 47, 0, time.UTC)}}}},
		Running: []results.RunningPod{{Name: "app-1", Node: "node-1", IP: "10.0.1.1", Ready: true}, {Name: "app-2", Node: "node-2", IP: "10.0.2.1", Ready: true}},
		Timeline: []results.Entry{applied(100, "node-1"), applied(200, "node-2"),
			{AtMS: 1000, Source: results.SourceCluster, Kind: "pod_created", Pod: "app-3"}},
	}
	page := html.UnescapeString(renderHTML(t, &results.Results{Scenarios: []results.Result{{Name: "local", Runs: []results.Run{run}}}}))
	for _, want := range []string{
		"app-1: new connections routed to it by node-1 from +0.200 s to +1.000 s",
		"app-2: new connections routed to it by node-2 from +0.100 s to +1.000 s",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestHTMLStartedBefore: pods that ran before the recording are ready
// from its start, and routed to from it until the routing views dropped
// their addresses, not until the views' first change; with no listening
// event logged, the page says that line is not drawn instead of
// promising it.
func TestHTMLStartedBefore(t *testing.T) {
	run := startedBefore()
	page := html.UnescapeString(renderHTML(t, &results.Results{Scenarios: []results.Result{{Name: "rollout", Runs: []results.Run{run}}}}))
	for _, want := range []string{
		"app-old-1: ready from -3.000 s to +2.006 s",
		"app-old-1: new connections routed to it by node-1, node-2 from -3.000 s to +2.800 s",
		"app-old-1: new connections routed to it by node-2 from +2.800 s to +2.850 s",
		"app-old-2: ready from -3.000 s to +3.000 s",
		"app-old-2: new connections routed to it by node-1, node-2 from -3.000 s to +3.000 s",
		"app-new-1: new connections routed to it by node-1 from +2.800 s to +2.850 s",
		unloggedNote,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "when its process listens") {
		t.Error("a lane's title promises a listening line that the page does not draw")
	}
}
