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

// TestReadNotResults: input that is not results says so, with the
// decoder's reason and where it found it: the line and column of a
// syntax error, counted in characters, the line and field of a value of
// the wrong type.
func TestReadNotResults(t *testing.T) {
	t.Parallel()
	const not = "not a results file of closingtime lab or rollout: "
	tests := []struct {
		name, in, want string
	}{
		{"not JSON", "nonsense", not + "line 1, column 2: invalid character 'o' in literal null (expecting 'u')"},
		{"a manifest", "# web\napiVersion: apps/v1\nkind: Deployment\n", not + "line 1, column 1: invalid character '#' looking for beginning of value"},
		{"a syntax error past a multi-byte character", "{\"scenarios\": [\n  {\"name\": \"é\" \"deployment\": \"default/app\"}]}", not + "line 2, column 16: invalid character '\"' after object key:value pair"},
		{"truncated", "{\"scenarios\": [", not + "line 1, column 15: unexpected end of JSON input"},
		{"empty", "", not + "line 1, column 1: unexpected end of JSON input"},
		{"a field of the wrong type", "{\"scenarios\": [{\"name\": \"s\", \"runs\": [\n  {\"repetition\": 1},\n  {\"repetition\": 2, \"diagnosis\": 12}]}]}",
			not + "line 3: field scenarios.runs.diagnosis is a number, not an object"},
		{"a class of the wrong type", "{\"scenarios\": [{\"name\": \"s\", \"runs\": [{\"repetition\": 1,\n \"clients\": [{\"kind\": 3}]}]}]}",
			not + "line 2: field scenarios.runs.clients.kind is a number, not a string"},
		{"an array", "[]", not + "line 1: the value is an array, not an object"},
		{"no scenarios", `{"apiVersion": "v1", "kind": "Service"}`, not + "no scenarios"},
		{"a comparison", `{"sides": [{"cluster": "embedded", "results": {"scenarios": []}}]}`, not + `it is lab --compare's, which holds each side's results under "sides"; report reads one side's (jq .sides[0].results FILE > embedded.json)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Read(strings.NewReader(tt.in)); err == nil || err.Error() != tt.want {
				t.Errorf("error %v\nwant  %s", err, tt.want)
			}
		})
	}
}
