package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// WriteTable writes the comparison table: a row per scenario with its
// requests by outcome summed over its runs, and of its runs the highest p99
// latency, the longest old-pod drain, the old pods' exit codes, the longest
// rollout, the restarts and the lowest capacity; under the row, the
// scenario's description, if it has one. A second table follows for the
// scenarios whose runs had an outage, back-offs, evictions, a drain or a
// rollback, with a column for each.
func WriteTable(w io.Writer, r *results.Results) error {
	var rows []tableLine
	for _, s := range r.Scenarios {
		rows = append(rows, tableLine{cells: s.Name + "\t" + textRow(s), note: s.Description})
	}
	if err := writeLines(w, "scenario\t"+tableColumns, rows); err != nil {
		return err
	}
	return writeDisruptions(w, r)
}

// tableLine is a row of a table, tab-terminated cells, and the note
// written under it; empty for none.
type tableLine struct {
	cells, note string
}

// writeLines writes a table of right-aligned columns: the header, then
// each row with its note on a line of its own under it, from the second
// column on, so that the first column's names stand apart. A note's
// whitespace, line breaks included, is written as single spaces: a note
// stays one line for grep and for a reader.
func writeLines(w io.Writer, header string, rows []tableLine) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, tablePadding, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	first, _, _ := strings.Cut(header, "\t")
	width := utf8.RuneCountInString(first)
	for _, row := range rows {
		fmt.Fprintln(tw, row.cells)
		name, _, _ := strings.Cut(row.cells, "\t")
		width = max(width, utf8.RuneCountInString(name))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	indent := strings.Repeat(" ", width+2*tablePadding)
	lines := strings.SplitAfter(b.String(), "\n")
	var out strings.Builder
	out.WriteString(lines[0])
	for i, row := range rows {
		out.WriteString(lines[i+1])
		if note := strings.Join(strings.Fields(row.note), " "); note != "" {
			out.WriteString(indent + note + "\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// tablePadding is the spaces between two columns of the text tables.
const tablePadding = 2

// tableColumns are the comparison table's columns after the scenario's
// name, tab-terminated; textRow writes them.
const tableColumns = "runs\tsamples\tfailed\trefused\treset\tclosed\ttimeout\t5xx\tabsorbed\tp99\tdrain\texit codes\trollout\trestarts\tcapacity\t"

// textRow returns s's figures in tableColumns, tab-terminated.
func textRow(s results.Result) string {
	t := s.Totals
	m := summarize(s)
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t",
		len(s.Runs), t.Requests, t.Failed(), t.Refused, t.Reset, t.Closed, t.Timeout, t.HTTP5xx, t.Absorbed,
		millis(m.p99), seconds(m.drain), exitCodes(m.codes), seconds(m.rollout), m.restarts, capacity(m.capacity))
}

// summary is what the comparison table shows of a scenario's runs.
type summary struct {
	// p99, drain and rollout are the highest of the runs, in ms.
	p99, drain, rollout float64
	restarts            int
	// codes are the old pods' exit codes, each once, in order.
	codes []int
	// capacity is the runs' lowest; nil if none has one.
	capacity *results.Capacity
}

// summarize returns the table's figures of s's runs.
func summarize(s results.Result) summary {
	var m summary
	for _, run := range s.Runs {
		m.p99 = max(m.p99, run.P99MS)
		m.rollout = max(m.rollout, run.RolloutMS)
		m.restarts += run.Restarts
		for _, p := range run.OldPods {
			m.drain = max(m.drain, p.DrainMS)
			if !slices.Contains(m.codes, p.ExitCode) {
				m.codes = append(m.codes, p.ExitCode)
			}
		}
		if c := run.Capacity; c != nil && (m.capacity == nil || c.MinReady < m.capacity.MinReady) {
			m.capacity = c
		}
	}
	slices.Sort(m.codes)
	return m
}

// writeDisruptions writes the second table: a row per scenario with an
// outage, back-offs, evictions, a drain or a rollback, and of its runs the
// longest recovery, the back-off delays, the evictions summed and the
// outcome of the last run.
func writeDisruptions(w io.Writer, r *results.Results) error {
	tw := tabwriter.NewWriter(w, 0, 0, tablePadding, ' ', tabwriter.AlignRight)
	rows := 0
	for _, s := range r.Scenarios {
		var outage, outcome string
		var recovered float64
		unrecovered := false
		var delays []string
		var ev results.Evictions
		evicted := false
		for _, run := range s.Runs {
			if o := run.Outage; o != nil {
				outage = fmt.Sprintf("%s %s", o.Mode, seconds(o.EndMS-o.StartMS))
				if run.RecoverMS == nil {
					unrecovered = true
				} else {
					recovered = max(recovered, *run.RecoverMS)
				}
			}
			for _, b := range run.BackOffs {
				if d := roundSeconds(b.DelayMS); !slices.Contains(delays, d) {
					delays = append(delays, d)
				}
			}
			if e := run.Evictions; e != nil {
				evicted = true
				ev.Accepted += e.Accepted
				ev.Refused += e.Refused
			}
			if o := runOutcome(run); o != "" {
				outcome = o
			}
		}
		if outage == "" && len(delays) == 0 && !evicted && outcome == "" {
			continue
		}
		if rows == 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "scenario\toutage\trecover\tback-offs\tevictions ok/refused\toutcome\t")
		}
		rows++
		recover := "-"
		switch {
		case unrecovered:
			recover = "not in run"
		case outage != "":
			recover = seconds(recovered)
		}
		evictions := "-"
		if evicted {
			evictions = fmt.Sprintf("%d/%d", ev.Accepted, ev.Refused)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Name, cmp.Or(outage, "-"), recover, cmp.Or(strings.Join(delays, " "), "-"), evictions, cmp.Or(outcome, "-"))
	}
	return tw.Flush()
}

// writeDisruption writes a run's disruption lines.
func writeDisruption(w io.Writer, run results.Run) {
	if c := run.Capacity; c != nil {
		fmt.Fprintf(w, "  capacity: %d of %d pods ready at the fewest", c.MinReady, c.Replicas)
		if c.MinReady < c.Replicas {
			fmt.Fprintf(w, ", from %s", offset(&c.AtMS))
		}
		switch {
		case c.Allowed == nil:
		case belowAllowed(c):
			fmt.Fprintf(w, ", below the %d the rollout strategy allows", *c.Allowed)
		default:
			fmt.Fprintf(w, "; the rollout strategy allows %d", *c.Allowed)
		}
		fmt.Fprintln(w)
	}
	if o := run.Outage; o != nil {
		fmt.Fprintf(w, "  dependency outage (%s) from %s to %s; ", o.Mode, offset(&o.StartMS), offset(&o.EndMS))
		if run.RecoverMS == nil {
			fmt.Fprintln(w, "not recovered within the run")
		} else {
			fmt.Fprintf(w, "recovered %s after its end: every pod ready, no request failing\n", seconds(*run.RecoverMS))
		}
	}
	var pods []string
	byPod := map[string][]string{}
	for _, b := range run.BackOffs {
		if byPod[b.Pod] == nil {
			pods = append(pods, b.Pod)
		}
		byPod[b.Pod] = append(byPod[b.Pod], fmt.Sprintf("%s at %s", seconds(b.DelayMS), offset(&b.AtMS)))
	}
	for _, p := range pods {
		fmt.Fprintf(w, "  back-offs of pod %s: %s\n", p, strings.Join(byPod[p], ", "))
	}
	if e := run.Evictions; e != nil {
		fmt.Fprintf(w, "  evictions: %d accepted, %d refused (429) by a PodDisruptionBudget\n", e.Accepted, e.Refused)
	}
	switch d := run.Drain; {
	case d != nil && d.Drained:
		fmt.Fprintf(w, "  drain of %s: every pod gone at %s\n", d.Node, offset(&d.EndMS))
	case d != nil:
		fmt.Fprintf(w, "  drain of %s: blocked, given up at %s (its timeout %s); the node uncordoned\n", d.Node, offset(&d.EndMS), seconds(d.TimeoutMS))
	}
	if run.RolledBackMS != nil {
		fmt.Fprintf(w, "  rolled back at %s: the rollout had not completed within its timeout\n", offset(run.RolledBackMS))
	}
}

// runOutcome spells, for the table, how a run's drain ended, or its
// rollback; empty if it had neither.
func runOutcome(run results.Run) string {
	switch d := run.Drain; {
	case d != nil && d.Drained:
		return fmt.Sprintf("%s drained in %s", d.Node, seconds(d.EndMS))
	case d != nil:
		return fmt.Sprintf("%s drain blocked, given up at %s", d.Node, seconds(d.EndMS))
	case run.RolledBackMS != nil:
		return "rolled back at " + seconds(*run.RolledBackMS)
	}
	return ""
}

// belowAllowed reports whether a capacity fell below the fewest ready
// pods its rollout's strategy allows: worse than the strategy promises.
// Without an allowance (not a rollout) it never is.
func belowAllowed(c *results.Capacity) bool {
	return c != nil && c.Allowed != nil && c.MinReady < *c.Allowed
}

func capacity(c *results.Capacity) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", c.MinReady, c.Replicas)
}

// roundSeconds spells a back-off delay in whole seconds: the kubelet's
// wait is the back-off less the few milliseconds since the exit.
func roundSeconds(ms float64) string {
	return strconv.FormatFloat(math.Round(ms/1000), 'f', 0, 64) + "s"
}

// WriteText writes the tables, then for each run the requests of each
// client by class, the seconds that had failures, in the style of seed
// 001's load script ("+3s ok=33 refused=12"), a line per old pod, the
// run's disruption figures (its capacity, outage and recovery, back-offs
// per pod, evictions, drain outcome and rollback) and its diagnosis: a
// line per cause of its failed and absorbed requests, with the cause's
// fix, and a line per pod finding (docs/diagnosis.md). A scenario of
// several runs gives the fixes once, under its causes summed over its
// runs.
func WriteText(w io.Writer, r *results.Results) error {
	if err := WriteTable(w, r); err != nil {
		return err
	}
	for _, s := range r.Scenarios {
		if s.Target != "" {
			fmt.Fprintf(w, "\n%s: traffic to %s, %s\n", s.Name, s.Target, load.DescribeTarget(s.Target))
		}
		for _, run := range s.Runs {
			fmt.Fprintln(w)
			writeRun(w, s.Name, run, len(s.Runs) == 1)
		}
		writeScenarioCauses(w, s)
	}
	return nil
}

// writeRun writes run, of scenario name: its headline, the requests of
// each client by class, the seconds that had failures, a line per old
// pod, its disruption figures and its diagnosis, with the fixes when
// fixes is true.
func writeRun(w io.Writer, name string, run results.Run, fixes bool) {
	fmt.Fprintf(w, "%s, run %d (action at %s UTC): %d requests, %d failed\n",
		name, run.Repetition, run.Start.UTC().Format("15:04:05.000"), run.Totals.Requests, run.Totals.Failed())
	for _, c := range run.Clients {
		fmt.Fprintf(w, "  %s\n", clientLine(c))
		if len(c.Pods) > 0 {
			fmt.Fprintf(w, "    answered by pod: %s\n", load.PodCounts(c.Pods))
		}
	}
	if len(run.FailedSeconds) > 0 {
		fmt.Fprintln(w, "  seconds with failures, every client's requests, from the action:")
	}
	for _, sec := range run.FailedSeconds {
		fmt.Fprintf(w, "  %+6ds %s\n", sec.Second, counts(sec.Counts))
	}
	for _, p := range run.OldPods {
		if p.SigtermMS == nil && p.ExitCode < 0 {
			// A pod in CrashLoopBackOff has no process to signal.
			fmt.Fprintf(w, "  old pod %s: ended with no container running\n", p.Name)
			continue
		}
		fmt.Fprintf(w, "  old pod %s: SIGTERM %s, last answered request %s%s, %s after SIGTERM, exit %s %s after termination began\n",
			p.Name, offset(p.SigtermMS), offset(p.LastRequestMS), gap(p.GapMS), requests(p.AfterSigterm), exitCodes([]int{p.ExitCode}), seconds(p.DrainMS))
	}
	if unattributed(run) {
		fmt.Fprintf(w, "  %s\n", unattributedNote)
	}
	writeDisruption(w, run)
	writeDiagnosis(w, run.Diagnosis, fixes)
}

// clientLine spells a client's kind, rate and requests by class, its 5xx
// by status and by the reason of the proxy that answered them, the
// requests that failed and then succeeded on a retry, if any, and those
// that an ingress tried again on another upstream before it answered.
func clientLine(c load.ClientReport) string {
	line := fmt.Sprintf("%s at %g/s: %s", c.Kind, c.Rate, counts(c.Totals))
	var statuses []string
	for _, code := range slices.Sorted(maps.Keys(c.Statuses)) {
		if code >= 500 {
			statuses = append(statuses, fmt.Sprintf("%d=%d", code, c.Statuses[code]))
		}
	}
	if len(statuses) > 0 {
		line += " (" + strings.Join(statuses, " ")
		if len(c.ProxyReasons) > 0 {
			var reasons []string
			for _, r := range slices.Sorted(maps.Keys(c.ProxyReasons)) {
				reasons = append(reasons, fmt.Sprintf("%s=%d", r, c.ProxyReasons[r]))
			}
			line += "; the proxy's: " + strings.Join(reasons, " ")
		}
		line += ")"
	}
	if n := c.Absorbed.Total(); n > 0 {
		line += ", absorbed " + counts(c.Absorbed)
	}
	if c.ProxyRetried > 0 {
		line += fmt.Sprintf(", retried by the ingress %d", c.ProxyRetried)
	}
	return line
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

// unattributedNote says why a run's old pods have no request figures.
const unattributedNote = "requests per pod unknown: a request is attributed to a pod by the X-Pod-Name header or by the pod's address its connection reached, and none of this run's could be (through a real cluster's kube-proxy, connections reach the Service's address)"

// unattributed reports whether a run has old pods whose request figures
// are unknown because none of its requests could be attributed to a pod;
// they are unknown for every old pod of the run, or for none.
func unattributed(run results.Run) bool {
	return slices.ContainsFunc(run.OldPods, func(p results.OldPod) bool { return p.AfterSigterm == nil })
}

// count spells a count, "-" when it is unknown.
func count(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

// requests spells a count of requests: "1 request", "3 requests", "-
// requests" when it is unknown.
func requests(n *int) string {
	if n == nil {
		return "- requests"
	}
	return count(n) + " " + nounFor(*n, "request", "requests")
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
