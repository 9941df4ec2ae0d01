package results

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestEndpointsRoundTrip: an endpoints entry's Endpoints come back from
// the JSON as they went, node and internalTrafficPolicy included; an entry
// without them has none.
func TestEndpointsRoundTrip(t *testing.T) {
	t.Parallel()
	eps := cluster.Endpoints{NodeLocal: true, List: []cluster.Endpoint{
		{Address: "127.100.1.1", Ready: true, Serving: true, Node: "node-1"},
		{Address: "127.100.2.1", Serving: true, Terminating: true, Node: "node-2"},
	}}
	in := &Results{Scenarios: []Result{{Name: "s", Runs: []Run{{Repetition: 1, Timeline: []Entry{
		{AtMS: 1, Source: SourceCluster, Kind: string(cluster.EndpointsApplied), Node: "node-1",
			Detail: map[string]string{"object": "Service/default/app"}, Endpoints: eps},
		{AtMS: 2, Source: SourceCluster, Kind: string(cluster.PodReady), Pod: "app-1"},
	}}}}}}
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), `"endpoints"`); n != 1 {
		t.Errorf("%d endpoints keys in the JSON, want the one entry's:\n%s", n, b.String())
	}
	out, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("read back (-written +read):\n%s", diff)
	}
}

// TestReadOldEndpoints: a file written before entries had Endpoints held
// them in the detail "endpoints"; Read gives them as Endpoints, and the
// detail keeps the other fields.
func TestReadOldEndpoints(t *testing.T) {
	t.Parallel()
	old := `{"scenarios": [{"name": "s", "deployment": "default/app", "totals": {}, "runs": [{"repetition": 1, "timeline": [
		{"atMs": 1, "source": "cluster", "kind": "endpoints_applied", "node": "node-1",
		 "detail": {"endpoints": "127.100.1.1=1/1/0,127.100.2.1=0/1/1,127.100.2.2=0/0/0", "object": "Service/default/app"}},
		{"atMs": 2, "source": "cluster", "kind": "endpoints_published", "detail": {"endpoints": "", "object": "Service/default/app"}}
	]}]}]}`
	r, err := Read(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	timeline := r.Scenarios[0].Runs[0].Timeline
	want := []Entry{
		{AtMS: 1, Source: SourceCluster, Kind: string(cluster.EndpointsApplied), Node: "node-1",
			Detail: map[string]string{"object": "Service/default/app"},
			Endpoints: cluster.Endpoints{List: []cluster.Endpoint{
				{Address: "127.100.1.1", Ready: true, Serving: true},
				{Address: "127.100.2.1", Serving: true, Terminating: true},
				{Address: "127.100.2.2"},
			}}},
		{AtMS: 2, Source: SourceCluster, Kind: string(cluster.EndpointsPublished),
			Detail: map[string]string{"object": "Service/default/app"}},
	}
	if diff := cmp.Diff(want, timeline); diff != "" {
		t.Errorf("timeline (-want +got):\n%s", diff)
	}
}
