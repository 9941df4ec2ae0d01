package load

import "testing"

// TestCountClientErrors: 4xx responses are most when more than half of
// the responses, summed over the clients, had one; the commonest is named,
// the lowest on a tie.
func TestCountClientErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		clients []map[int]int64
		want    ClientErrors
		mostly  bool
	}{
		{name: "none"},
		{name: "half is not most", clients: []map[int]int64{{200: 5, 404: 5}}, want: ClientErrors{Responses: 10, Count: 5, Commonest: 404}},
		{name: "a 5xx is a response", clients: []map[int]int64{{200: 4, 503: 1, 401: 2, 404: 3}}, want: ClientErrors{Responses: 10, Count: 5, Commonest: 404}},
		{name: "tie", clients: []map[int]int64{{200: 4, 401: 3, 404: 3}}, want: ClientErrors{Responses: 10, Count: 6, Commonest: 401}, mostly: true},
		{name: "summed over clients", clients: []map[int]int64{{200: 1, 401: 2}, {404: 3}}, want: ClientErrors{Responses: 6, Count: 5, Commonest: 404}, mostly: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var clients []ClientReport
			for _, s := range tt.clients {
				clients = append(clients, ClientReport{Statuses: s})
			}
			got := CountClientErrors(clients)
			if got != tt.want || got.Mostly() != tt.mostly {
				t.Errorf("CountClientErrors = %+v (mostly %t), want %+v (mostly %t)", got, got.Mostly(), tt.want, tt.mostly)
			}
		})
	}
}
