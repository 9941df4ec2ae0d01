package scenario

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/cluster"
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
