package load

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteText writes the human summary of r, in the spirit of the seeds' load
// scripts: the target and what the requests spoke, then, for each client,
// only the seconds that had failures, as
// "13:43:30 ok=33 refused=12 reset=1", then the totals, the requests that
// retries absorbed, the latency and schedule lag, the responses by status
// and the responses per pod, by the X-Pod-Name header that named the pod.
// Times are UTC.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s\n\n", r.URL, DescribeTarget(r.URL))
	for i, c := range r.Clients {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s %s/s", c.Kind, strconv.FormatFloat(c.Rate, 'f', -1, 64))
		switch {
		case c.Connections == 1:
			b.WriteString(", 1 connection")
		case c.Connections > 1:
			fmt.Fprintf(&b, ", %d connections", c.Connections)
		}
		if c.MaxIdleMS > 0 {
			fmt.Fprintf(&b, ", max idle %v", DurationMS(c.MaxIdleMS))
		}
		if c.MaxLifetimeMS > 0 {
			fmt.Fprintf(&b, ", max lifetime %v", DurationMS(c.MaxLifetimeMS))
		}
		b.WriteByte('\n')
		for _, s := range c.Seconds {
			if s.Counts.Failed() > 0 {
				fmt.Fprintf(&b, "%s %s\n", s.Time.UTC().Format(time.TimeOnly), formatCounts(&s.Counts))
			}
		}
		fmt.Fprintf(&b, "total %s\n", formatCounts(&c.Totals))
		if c.Absorbed.Total() > 0 {
			fmt.Fprintf(&b, "absorbed by retries, by first failure: %s\n", formatCounts(&c.Absorbed))
		}
		if c.Totals[OK]+c.Totals[HTTP5xx] > 0 {
			fmt.Fprintf(&b, "latency %s\n", formatPercentiles(c.Latency))
		} else {
			b.WriteString("latency none: no responses\n")
		}
		fmt.Fprintf(&b, "schedule lag %s\n", formatPercentiles(c.ScheduleLag))
		if len(c.Statuses) > 0 {
			b.WriteString("statuses")
			for _, status := range slices.Sorted(maps.Keys(c.Statuses)) {
				fmt.Fprintf(&b, " %d=%d", status, c.Statuses[status])
			}
			b.WriteByte('\n')
		}
		if len(c.ProxyReasons) > 0 {
			b.WriteString("answered by a proxy, by its reason:")
			for _, reason := range slices.Sorted(maps.Keys(c.ProxyReasons)) {
				fmt.Fprintf(&b, " %s=%d", reason, c.ProxyReasons[reason])
			}
			b.WriteByte('\n')
		}
		if c.ProxyRetried > 0 {
			fmt.Fprintf(&b, "retried by a proxy on the next upstream (X-Upstream-Addr): %d\n", c.ProxyRetried)
		}
		if len(c.Pods) > 0 {
			fmt.Fprintf(&b, "responses per pod (X-Pod-Name): %s\n", PodCounts(c.Pods))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatCounts lists the classes with a non-zero count, as "ok=33 reset=1".
func formatCounts(c *Counts) string {
	var parts []string
	for class, n := range c {
		if n > 0 {
			parts = append(parts, classNames[class]+"="+strconv.FormatInt(n, 10))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

func formatPercentiles(p Percentiles) string {
	return fmt.Sprintf("p50=%s p90=%s p99=%s max=%s", formatMS(p.P50), formatMS(p.P90), formatMS(p.P99), formatMS(p.Max))
}

// formatMS formats d in milliseconds with about three significant digits.
func formatMS(d time.Duration) string {
	v := ms(d)
	decimals := 0
	switch {
	case v < 10:
		decimals = 2
	case v < 100:
		decimals = 1
	}
	return strconv.FormatFloat(v, 'f', decimals, 64) + "ms"
}

// DescribeTarget names what the requests to target, a URL of a run,
// speak, by its scheme.
func DescribeTarget(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "requests"
	}
	switch u.Scheme {
	case "grpc":
		return "gRPC calls of " + strings.TrimPrefix(grpcMethod(u), "/")
	case "h2c":
		return "GETs over HTTP/2 without TLS"
	}
	return "GETs over HTTP/1.1"
}

// PodCounts spells responses by pod, as "a=3 b=2", by the pods' names.
func PodCounts(pods map[string]int64) string {
	parts := make([]string, 0, len(pods))
	for _, pod := range slices.Sorted(maps.Keys(pods)) {
		parts = append(parts, pod+"="+strconv.FormatInt(pods[pod], 10))
	}
	return strings.Join(parts, " ")
}
