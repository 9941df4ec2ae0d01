package diagnosis

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// pinnedAfter is how long, in milliseconds, a pod must have been a ready
// endpoint before the traffic's end for a keep-alive client that sent it
// nothing to be found pinned: a client that spreads its connections
// reaches a new pod well within it.
const pinnedAfter = 2000

// pinned tells of each pod that joined the Service's ready endpoints
// during the run and got none of a keep-alive client's requests, where
// every pod the client did reach was a ready endpoint before it joined:
// the client's long-lived connections stayed on the pods they were made
// to (a gRPC channel through a ClusterIP, which kube-proxy balances per
// connection, not per call).
func pinned(h *history, run *results.Run) []results.Finding {
	if len(h.published) == 0 {
		return nil
	}
	end, ok := trafficEnd(run)
	if !ok {
		return nil
	}
	// joined holds, by address, when each pod that was not a ready
	// endpoint at the first EndpointSlices of the recording became one.
	first := &h.published[0]
	first.index()
	joined := map[string]float64{}
	var order []string
	for i := 1; i < len(h.published); i++ {
		e := &h.published[i]
		e.index()
		for ip, ready := range e.all {
			if _, seen := joined[ip]; ready && !seen && !first.all[ip] {
				joined[ip] = e.at
				order = append(order, ip)
			}
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return int(joined[a] - joined[b]) })
	var out []results.Finding
	for _, c := range run.Clients {
		if c.Kind != load.KeepAlive {
			continue
		}
		reached := slices.Sorted(maps.Keys(c.Pods))
		moved := len(reached) == 0
		for _, pod := range reached {
			ip := h.ipOf(pod)
			_, new := joined[ip]
			moved = moved || ip == "" || new
		}
		if moved {
			continue
		}
		for _, ip := range order {
			at := joined[ip]
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			pod := h.podAt(addr, at)
			if pod == "" || end-at < pinnedAfter || slices.ContainsFunc(out, func(f results.Finding) bool { return f.Pod == pod }) {
				continue
			}
			out = append(out, results.Finding{Pod: pod, Kind: "connections-pinned", Text: fmt.Sprintf(
				"a ready endpoint for the last %s of the traffic, it got none of the keep-alive client's requests: the client's %d %s went only to %s, %s before it joined",
				sec(end-at), c.Connections, plural(c.Connections, "connection", "connections"), strings.Join(reached, ", "),
				plural(len(reached), "there", "all there"))})
		}
	}
	return out
}

// trafficEnd returns when the run's traffic ended, an offset from the
// action's start in milliseconds: the end of the last second a client
// sent in.
func trafficEnd(run *results.Run) (float64, bool) {
	var end float64
	ok := false
	for _, c := range run.Clients {
		if n := len(c.Seconds); n > 0 {
			t := float64(c.Seconds[n-1].Time.Sub(run.Start).Milliseconds()) + 1000
			end, ok = max(end, t), true
		}
	}
	return end, ok
}
