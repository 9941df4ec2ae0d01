package report

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// WriteTable writes the comparison table: a row per scenario with its
// requests by outcome summed over its runs, and of its runs the highest p99
// latency, the longest old-pod drain, the old pods' exit codes, the longest
// rollout and the restarts.
func WriteTable(w io.Writer, r *scenario.Results) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tsamples\tfailed\trefused\treset\tclosed\ttimeout\t5xx\tabsorbed\tp99\tdrain\texit codes\trollout\trestarts\t")
	for _, s := range r.Scenarios {
		t := s.Totals
		var p99, drain, rollout float64
		restarts := 0
		var codes []int
		for _, run := range s.Runs {
			p99 = max(p99, run.P99MS)
			rollout = max(rollout, run.RolloutMS)
			restarts += run.Restarts
			for _, p := range run.OldPods {
				drain = max(drain, p.DrainMS)
				if !slices.Contains(codes, p.ExitCode) {
					codes = append(codes, p.ExitCode)
				}
			}
		}
		slices.Sort(codes)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t\n",
			s.Name, len(s.Runs), t.Requests, t.Failed(), t.Refused, t.Reset, t.Closed, t.Timeout, t.HTTP5xx, t.Absorbed,
			millis(p99), seconds(drain), exitCodes(codes), seconds(rollout), restarts)
	}
	return tw.Flush()
}

// WriteText writes the table, then for each run the requests of each
// client by class, the seconds that had failures, in the style of seed 001's load script ("+3s ok=33
// refused=12"), and a line per old pod.
func WriteText(w io.Writer, r *scenario.Results) error {
	if err := WriteTable(w, r); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		for _, run := range s.Runs {
			fmt.Fprintf(w, "\n%s, run %d (action at %s UTC): %d requests, %d failed\n",
				s.Name, run.Repetition, run.Start.UTC().Format("15:04:05.000"), run.Totals.Requests, run.Totals.Failed())
			for _, c := range run.Clients {
				fmt.Fprintf(w, "  %s at %g/s: %s", c.Kind, c.Rate, counts(c.Totals))
				if n := c.Absorbed.Total(); n > 0 {
					fmt.Fprintf(w, ", absorbed %s", counts(c.Absorbed))
				}
				fmt.Fprintln(w)
			}
			for _, sec := range run.FailedSeconds {
				fmt.Fprintf(w, "  %+4ds %s\n", sec.Second, counts(sec.Counts))
			}
			for _, p := range run.OldPods {
				fmt.Fprintf(w, "  old pod %s: SIGTERM %s, last request %s%s, %d requests after SIGTERM, exit %s %s after termination began\n",
					p.Name, offset(p.SigtermMS), offset(p.LastRequestMS), gap(p.GapMS), p.AfterSigterm, exitCodes([]int{p.ExitCode}), seconds(p.DrainMS))
			}
		}
	}
	return nil
}

// counts spells the classes with requests, in load's order.
func counts(c load.Counts) string {
	var parts []string
	for class, n := range c {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", load.Class(class), n))
		}
	}
	return strings.Join(parts, " ")
}

func millis(ms float64) string { return strconv.FormatFloat(ms, 'f', 0, 64) + "ms" }

func seconds(ms float64) string { return strconv.FormatFloat(ms/1000, 'f', 1, 64) + "s" }

func offset(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return fmt.Sprintf("%+.2fs", *ms/1000)
}

// gap spells the time between a pod's last request and its SIGTERM.
func gap(ms *float64) string {
	switch {
	case ms == nil:
		return ""
	case *ms < 0:
		return fmt.Sprintf(" (%.2fs after SIGTERM)", -*ms/1000)
	}
	return fmt.Sprintf(" (%.2fs before SIGTERM)", *ms/1000)
}

func exitCodes(codes []int) string {
	var parts []string
	for _, c := range codes {
		if c < 0 {
			parts = append(parts, "none")
			continue
		}
		parts = append(parts, strconv.Itoa(c))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}
