package diagnosis

import (
	"fmt"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// BenchmarkDiagnose joins 100,000 failed requests to the timeline of a
// rollout that replaces each of its pods in turn, with the endpoints
// published and applied by every node's view at each step, and the old
// pods' figures: the per-request join the issue bounds at one second.
// Through pod addresses, requests reach their pod as the embedded
// cluster's routing shows it; through a Service's address, as a real
// cluster's kube-proxy hides it, and the pod is inferred.
func BenchmarkDiagnose(b *testing.B) {
	for _, size := range []struct{ pods, nodes int }{{30, 3}, {300, 10}} {
		for _, via := range []string{"pod", "service"} {
			b.Run(fmt.Sprintf("pods=%d/nodes=%d/via=%s", size.pods, size.nodes, via), func(b *testing.B) {
				run, reqs := rollout(size.pods, size.nodes, via == "service")
				for b.Loop() {
					if d := Diagnose(run, reqs); len(d.Requests) != len(reqs) {
						b.Fatalf("%d requests diagnosed, want %d", len(d.Requests), len(reqs))
					}
				}
			})
		}
	}
}

// rollout returns the run of a rollout of pods pods over nodes nodes, a
// second per pod, and 100,000 failed requests spread over it: refused,
// closed and reset in turn, half on kept-alive connections, through the
// old pods' addresses or the Service's.
func rollout(pods, nodes int, viaService bool) (*results.Run, []results.Request) {
	const requests = 100_000
	tl := new(timeline)
	ip := func(gen, i int) string { return fmt.Sprintf("10.%d.%d.%d", gen, i/250, i%250+1) }
	eps := make([]cluster.Endpoint, pods)
	for i := range pods {
		tl.running(fmt.Sprintf("app-old-%d", i), ip(0, i))
		eps[i] = ready(ip(0, i))
	}
	publish := func(at float64) {
		list := cluster.Endpoints{List: append([]cluster.Endpoint(nil), eps...)}
		tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at, Source: results.SourceCluster, Kind: string(cluster.EndpointsPublished), Endpoints: list})
		for n := range nodes {
			tl.run.Timeline = append(tl.run.Timeline, results.Entry{AtMS: at + float64(100*(n+1)), Source: results.SourceCluster,
				Kind: string(cluster.EndpointsApplied), Node: fmt.Sprintf("node-%d", n+1), Endpoints: list})
		}
	}
	publish(-5000)
	for i := range pods {
		at := float64(i) * 1000
		old := fmt.Sprintf("app-old-%d", i)
		tl.started(fmt.Sprintf("app-new-%d", i), ip(1, i), at, at+300, at+500, true)
		tl.stopped(old, at+500, 0, 5, 143, false)
		tl.run.OldPods = append(tl.run.OldPods, results.OldPod{Name: old, AfterSigterm: new(int)})
		eps[i] = ready(ip(1, i))
		publish(at + 501)
	}
	sortTimeline(tl.run.Timeline)
	reqs := make([]results.Request, requests)
	classes := []load.Class{load.Refused, load.Closed, load.Reset}
	for i := range reqs {
		at := float64(i) * float64(pods*1000) / requests
		addr := ip(0, int(at/1000)) + ":8080"
		if viaService {
			addr = "10.96.0.10:80"
		}
		reqs[i] = request(fmt.Sprint(i), classes[i%len(classes)], at, at, at+1, addr, i%2, float64(i%2)*3000)
	}
	return &tl.run, reqs
}
