package load

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/closingtime-dev/closingtime/internal/proxy"
)

// Merge returns the report of the requests of reports taken together, as
// one generator that had sent them all would report them: the way a run
// whose rate one process cannot reach is split between several generators
// (the load pods of a real cluster) is put back together.
//
// The reports must have the same URL. Clients are matched by kind, in the
// order in which the reports first name them; a client's rate and
// connections are the sums of its parts', its counts, seconds and pods add
// up (statuses too), and its Latency and ScheduleLag are the percentiles of the merged
// histograms, so a client report without its histograms is an error. Start
// is the earliest start, End the latest end. The reports are not changed.
func Merge(reports ...*Report) (*Report, error) {
	if len(reports) == 0 {
		return nil, errors.New("merge reports: no report")
	}
	merged := &Report{URL: reports[0].URL, Start: reports[0].Start, End: reports[0].End}
	type client struct {
		report       ClientReport
		seconds      map[time.Time]*Counts
		latency, lag histogram
	}
	var clients []*client
	for i, r := range reports {
		if r.URL != merged.URL {
			return nil, fmt.Errorf("merge reports: report %d is of %s, not %s", i, r.URL, merged.URL)
		}
		if r.Start.Before(merged.Start) {
			merged.Start = r.Start
		}
		if r.End.After(merged.End) {
			merged.End = r.End
		}
		for _, cr := range r.Clients {
			latency, err := decodeHistogram(fmt.Sprintf("report %d: %s client's latency histogram", i, cr.Kind), cr.LatencyHistogram)
			if err != nil {
				return nil, fmt.Errorf("merge reports: %w", err)
			}
			lag, err := decodeHistogram(fmt.Sprintf("report %d: %s client's schedule lag histogram", i, cr.Kind), cr.ScheduleLagHistogram)
			if err != nil {
				return nil, fmt.Errorf("merge reports: %w", err)
			}
			j := slices.IndexFunc(clients, func(c *client) bool { return c.report.Kind == cr.Kind })
			if j < 0 {
				clients = append(clients, &client{
					report:  ClientReport{Kind: cr.Kind, Pods: map[string]int64{}, Statuses: map[int]int64{}},
					seconds: map[time.Time]*Counts{}, latency: newHistogram(), lag: newHistogram(),
				})
				j = len(clients) - 1
			}
			c := clients[j]
			c.report.Rate += cr.Rate
			c.report.Connections += cr.Connections
			c.report.MaxIdleMS, c.report.MaxLifetimeMS = cr.MaxIdleMS, cr.MaxLifetimeMS
			c.report.Totals.add(&cr.Totals)
			c.report.Absorbed.add(&cr.Absorbed)
			for _, s := range cr.Seconds {
				t := s.Time.UTC()
				if c.seconds[t] == nil {
					c.seconds[t] = new(Counts)
				}
				c.seconds[t].add(&s.Counts)
			}
			for pod, n := range cr.Pods {
				c.report.Pods[pod] += n
			}
			for status, n := range cr.Statuses {
				c.report.Statuses[status] += n
			}
			c.report.ProxyRetried += cr.ProxyRetried
			for reason, n := range cr.ProxyReasons {
				if c.report.ProxyReasons == nil {
					c.report.ProxyReasons = map[proxy.Reason]int64{}
				}
				c.report.ProxyReasons[reason] += n
			}
			c.latency.h.Merge(latency.h)
			c.lag.h.Merge(lag.h)
		}
	}
	for _, c := range clients {
		cr := c.report
		cr.Seconds = []Second{}
		for _, t := range slices.SortedFunc(maps.Keys(c.seconds), time.Time.Compare) {
			cr.Seconds = append(cr.Seconds, Second{Time: t, Counts: *c.seconds[t]})
		}
		cr.Latency, cr.ScheduleLag = c.latency.percentiles(), c.lag.percentiles()
		cr.LatencyHistogram, cr.ScheduleLagHistogram = c.latency.encode(), c.lag.encode()
		merged.Clients = append(merged.Clients, cr)
	}
	return merged, nil
}

// add adds the counts of o to c.
func (c *Counts) add(o *Counts) {
	for class, n := range o {
		c[class] += n
	}
}

// Split divides cfg between n generators that run at once, for a rate
// that one process cannot reach: each gets every client of cfg at 1/n of
// its rate (DefaultRate for a client without one) and a keep-alive pool of
// 1/n of its connections (DefaultConnections if unset), rounded up. The
// generators' reports merge back into one of cfg's rates with [Merge]; a
// merged pool may be up to n-1 connections larger than cfg's. Split
// panics if n is not positive.
func Split(cfg Config, n int) Config {
	if n <= 0 {
		panic("load: Split into a non-positive number of generators")
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []Client{{Kind: NewConn}}
	}
	clients := make([]Client, len(cfg.Clients))
	for i, c := range cfg.Clients {
		c.Rate = cmp.Or(c.Rate, DefaultRate) / float64(n)
		if c.Kind == KeepAlive {
			c.Connections = (cmp.Or(c.Connections, DefaultConnections) + n - 1) / n
		}
		clients[i] = c
	}
	cfg.Clients = clients
	return cfg
}
