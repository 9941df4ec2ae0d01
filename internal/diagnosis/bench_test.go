package diagnosis

import (
	"fmt"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// BenchmarkDiagnose joins 100,000 failed requests to the timeline of a
// rollout of 30 pods, each replaced by a new one, with the endpoints
// published and applied at each step: the per-request join the issue
// bounds at one second.
func BenchmarkDiagnose(b *testing.B) {
	const pods, requests = 30, 100_000
	tl := new(timeline)
	var eps []cluster.Endpoint
	for i := range pods {
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		tl.running(fmt.Sprintf("app-old-%d", i), ip)
		eps = append(eps, ready(ip))
	}
	tl.endpoints(-5000, 0, eps...)
	for i := range pods {
		at := float64(i) * 1000
		oldIP, newIP := fmt.Sprintf("10.0.0.%d", i+1), fmt.Sprintf("10.0.1.%d", i+1)
		tl.started(fmt.Sprintf("app-new-%d", i), newIP, at, at+300, at+500, true)
		tl.stopped(fmt.Sprintf("app-old-%d", i), at+500, 0, 5, 143, false)
		eps[i] = ready(newIP)
		_ = oldIP
		tl.endpoints(at+501, 400, eps...)
	}
	reqs := make([]results.Request, requests)
	classes := []load.Class{load.Refused, load.Closed, load.Reset}
	for i := range reqs {
		at := float64(i) * float64(pods*1000) / requests
		pod := int(at / 1000)
		reqs[i] = request(fmt.Sprint(i), classes[i%len(classes)], at, at, at+1, fmt.Sprintf("10.0.0.%d:8080", pod+1), i%2, float64(i%2)*3000)
	}
	b.ResetTimer()
	for b.Loop() {
		if d := Diagnose(&tl.run, reqs); len(d.Requests) != requests {
			b.Fatalf("%d requests diagnosed, want %d", len(d.Requests), requests)
		}
	}
}
