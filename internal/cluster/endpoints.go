package cluster

import (
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// DescribeEndpoints renders the endpoints of slices as the endpoints field
// of an [EndpointsPublished] event: ip=ready/serving/terminating for each
// endpoint in order, each condition 1 or 0, comma separated. An unset
// condition reads as the API defines it: ready and serving true,
// terminating false (k8s.io/api discovery/v1 types.go,
// EndpointConditions).
func DescribeEndpoints(slices []*discoveryv1.EndpointSlice) string {
	var parts []string
	flag := func(b *bool, def bool) string {
		if (b == nil && def) || (b != nil && *b) {
			return "1"
		}
		return "0"
	}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			c := ep.Conditions
			parts = append(parts, ep.Addresses[0]+"="+flag(c.Ready, true)+"/"+flag(c.Serving, true)+"/"+flag(c.Terminating, false))
		}
	}
	return strings.Join(parts, ",")
}
