package scenario

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
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
	run := &Run{Start: start, Outage: &Outage{Mode: OutageRefuse, StartMS: 0, EndMS: 20000},
		Timeline: []Entry{
			{AtMS: 21000, Source: "client", Kind: "refused"},
			{AtMS: 25000, Source: "cluster", Kind: "pod_ready"},
		}}
	disruption(run, events, "app", 3)
	want := &Run{Start: start, Outage: run.Outage, Timeline: run.Timeline,
		Capacity:  &Capacity{MinReady: 1, Replicas: 3, AtMS: 2500},
		BackOffs:  []BackOff{{AtMS: 2600, Pod: "app-a1b2c-2", DelayMS: 9998}, {AtMS: 12700, Pod: "app-a1b2c-2", DelayMS: 19990}},
		Evictions: &Evictions{Accepted: 1, Refused: 1},
		RecoverMS: ptr(13000.0), // all ready at 33 s, 13 s after the outage's end at 20 s
	}
	if diff := cmp.Diff(want, run); diff != "" {
		t.Errorf("disruption (-want +got):\n%s", diff)
	}

	// A failure after the pods are back is what ends the recovery; a run
	// with no event after the action keeps the capacity it started with.
	run = &Run{Start: start, Outage: &Outage{EndMS: 20000}, Timeline: []Entry{{AtMS: 36000, Source: "client", Kind: "timeout"}}}
	disruption(run, events, "app", 3)
	if run.RecoverMS == nil || *run.RecoverMS != 16000 {
		t.Errorf("recover = %v, want 16000 ms, the last failure's", run.RecoverMS)
	}
	run = &Run{Start: at(40)}
	disruption(run, events, "app", 3)
	if diff := cmp.Diff(&Capacity{MinReady: 3, Replicas: 3}, run.Capacity); diff != "" || run.Evictions != nil || run.RecoverMS != nil {
		t.Errorf("after everything: capacity diff %s, evictions %v, recover %v: want 3/3 and neither", diff, run.Evictions, run.RecoverMS)
	}
	// Not every pod ready at the end: no recovery.
	run = &Run{Start: start, Outage: &Outage{EndMS: 20000}}
	disruption(run, events[:len(events)-1], "app", 3)
	if run.RecoverMS != nil {
		t.Errorf("recover = %v with a pod still unready, want none", *run.RecoverMS)
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
	requests := []load.Event{
		{Time: stamp(0.5), Pod: "app-1", Class: load.OK},
		{Time: stamp(1.5), Pod: "app-1", Class: load.OK},
	}
	run := &Run{Start: start}
	figures(run, &load.Report{}, requests, events, logs, at(5))
	if len(run.OldPods) != 1 {
		t.Fatalf("old pods %+v, want app-1", run.OldPods)
	}
	p := run.OldPods[0]
	if p.SigtermMS == nil || *p.SigtermMS != 1000 {
		t.Errorf("SIGTERM at %v ms, want 1000 (the pod's own log)", p.SigtermMS)
	}
	if p.AfterSigterm != 1 || p.ExitCode != 143 {
		t.Errorf("%d requests after SIGTERM, exit %d; want 1, 143", p.AfterSigterm, p.ExitCode)
	}
}
