package lint

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// MeasuredMarginSeconds is the time, in seconds, that a preStop delay must
// leave between the last request an old pod received in the measured
// rollouts and its SIGTERM; requests that failed within it of an old pod's
// SIGTERM count against the delay too.
const MeasuredMarginSeconds = 1

var preStopShorterThanMeasured = Rule{
	ID:       "prestop-shorter-than-measured",
	Severity: Error,
	Title:    "The preStop delay is shorter than the traffic tail measured by closingtime rollout",
	Why: "After a pod starts terminating, new connections keep reaching it until every node's proxy has seen it leave " +
		"the endpoints; a rollout of this Deployment measured how long that takes in your cluster, from its requests on " +
		"new connections (kept-alive ones stay on their pod until it closes them, whatever the endpoints say), and a " +
		"preStop delay shorter than that, plus a margin, lets SIGTERM arrive while connections still do, and they fail.",
	Fix: "Set lifecycle.preStop.sleep.seconds to at least the measured tail plus the margin, keep it within " +
		"terminationGracePeriodSeconds, and measure again with closingtime rollout.",
	check: checkPreStopShorterThanMeasured,
}

// Measurement is what rollouts measured of one Deployment's old pods, as
// [Measure] reads it from results, for the rule
// prestop-shorter-than-measured. Times are from each old pod's own events.
type Measurement struct {
	// Deployment is the Deployment's namespace/name.
	Deployment string
	// Runs counts the runs measured, OldPods the old pods sent SIGTERM in
	// them, and Served those of the old pods that answered a request on a
	// new connection.
	Runs, OldPods, Served int
	// Tail is the longest time from an old pod's termination start to the
	// last request on a new connection that reached it: the endpoint
	// propagation. Requests on connections kept alive from before keep
	// reaching a pod until it closes them, whatever the endpoints say, so
	// they do not count. Zero when Served is.
	Tail time.Duration
	// Gap is the shortest time from an old pod's last request on a new
	// connection to its SIGTERM, negative when one reached it after
	// SIGTERM; zero when Served is.
	Gap time.Duration
	// Failed counts the requests that failed within MeasuredMarginSeconds
	// of an old pod's SIGTERM.
	Failed int
	// FailedPreStop is the longest preStop delay (termination start to
	// SIGTERM) of the old pods around whose SIGTERM requests failed.
	FailedPreStop time.Duration
}

// Measure summarises results by Deployment, one Measurement each, in the
// order the results first name them. It returns an error naming the
// scenario, run and pod when results lack what the summary needs: a
// Deployment for each scenario, and the termination start of each old pod
// that was sent SIGTERM.
func Measure(results *results.Results) ([]Measurement, error) {
	if len(results.Scenarios) == 0 {
		return nil, errors.New("no scenarios: not the results of closingtime rollout or lab")
	}
	var out []Measurement
	byDeployment := make(map[string]int)
	for _, s := range results.Scenarios {
		if s.Deployment == "" {
			return nil, fmt.Errorf("scenario %q: no deployment", s.Name)
		}
		ns, name, ok := strings.Cut(s.Deployment, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("scenario %q: deployment %q is not namespace/name", s.Name, s.Deployment)
		}
		i, seen := byDeployment[s.Deployment]
		if !seen {
			i = len(out)
			byDeployment[s.Deployment] = i
			out = append(out, Measurement{Deployment: s.Deployment})
		}
		for _, run := range s.Runs {
			if err := out[i].add(run); err != nil {
				return nil, fmt.Errorf("scenario %q: run %d: %w", s.Name, run.Repetition, err)
			}
		}
	}
	return out, nil
}

// add adds a run's old pods to m.
func (m *Measurement) add(run results.Run) error {
	m.Runs++
	terminating := make(map[string]float64)
	var failures []float64
	for _, e := range run.Timeline {
		switch {
		case e.Source == results.SourceCluster && e.Kind == string(cluster.PodTerminating):
			terminating[e.Pod] = e.AtMS
		case e.Source == results.SourceClient:
			failures = append(failures, e.AtMS)
		}
	}
	margin := float64(MeasuredMarginSeconds * 1000) // in milliseconds, as the timeline
	counted := make([]bool, len(failures))
	for _, p := range run.OldPods {
		if p.SigtermMS == nil {
			continue
		}
		start, ok := terminating[p.Name]
		if !ok {
			return fmt.Errorf("old pod %s: no %s event in the timeline", p.Name, cluster.PodTerminating)
		}
		m.OldPods++
		preStop := load.DurationMS(*p.SigtermMS - start)
		if last := p.LastNewConnectionMS; last != nil {
			tail, gap := load.DurationMS(*last-start), load.DurationMS(*p.SigtermMS-*last)
			if m.Served == 0 || tail > m.Tail {
				m.Tail = tail
			}
			if m.Served == 0 || gap < m.Gap {
				m.Gap = gap
			}
			m.Served++
		}
		failed := false
		for i, at := range failures {
			if !counted[i] && math.Abs(at-*p.SigtermMS) <= margin {
				counted[i], failed = true, true
				m.Failed++
			}
		}
		if failed {
			m.FailedPreStop = max(m.FailedPreStop, preStop)
		}
	}
	return nil
}

// measures reports whether m is a measurement of workload w.
func (m Measurement) measures(w *workload) bool {
	return w.obj.Kind() == "Deployment" && m.Deployment == namespace(w.obj)+"/"+w.obj.Meta().GetName()
}

// Unmatched returns the measurements of l's Config that concern no
// Deployment of in, which the rule prestop-shorter-than-measured therefore
// compares with nothing.
func (l *Linter) Unmatched(in Input) []Measurement {
	var out []Measurement
	ixs := newIndexes(in)
	for _, m := range l.measured {
		found := false
		for _, ix := range ixs {
			for _, w := range ix.workloads {
				found = found || m.measures(w)
			}
		}
		if !found {
			out = append(out, m)
		}
	}
	return out
}

func checkPreStopShorterThanMeasured(ix *index) []finding {
	var out []finding
	ix.eachMeasured(func(m Measurement, w *workload, i int) {
		c := w.template.Spec.Containers[i]
		seconds, known := preStopSeconds(c)
		if !known || lacksPreStopDelay(w, c) {
			// Unknown, or no delay at all, which prestop-delay-missing
			// reports.
			return
		}
		if f, ok := m.judge(seconds); ok {
			f.at, f.field = object{w.obj}, w.containerPath(i)+".lifecycle.preStop"
			f.message = fmt.Sprintf("container %q: %s", c.Name, f.message)
			out = append(out, f)
		}
	})
	return out
}

// eachMeasured calls f with each measurement of ix, each Deployment of
// ix it measures, and the index of each of its serving containers.
func (ix *index) eachMeasured(f func(m Measurement, w *workload, container int)) {
	for _, m := range ix.measured {
		for _, w := range ix.workloads {
			if !m.measures(w) {
				continue
			}
			for _, i := range w.servingContainers() {
				f(m, w, i)
			}
		}
	}
}

// MeasuredChecks says, one sentence for each serving container of each
// Deployment of in that a measurement of l's Config concerns, what
// prestop-shorter-than-measured compared with what and what it concluded,
// so that a run without a finding still shows the measurement was used.
// It returns none when l does not run that rule.
func (l *Linter) MeasuredChecks(in Input) []string {
	if !slices.Contains(l.rules, &preStopShorterThanMeasured) {
		return nil
	}
	var out []string
	for _, ix := range newIndexes(in) {
		ix.measured = l.measured
		ix.eachMeasured(func(m Measurement, w *workload, i int) {
			out = append(out, m.check(w, w.template.Spec.Containers[i]))
		})
	}
	return out
}

// check says what the measurement m says of the preStop delay of
// container c of w, for MeasuredChecks.
func (m Measurement) check(w *workload, c corev1.Container) string {
	s := fmt.Sprintf("%s (%d %s, %d %s): ", w.obj, m.Runs, plural(m.Runs, "run"), m.OldPods, plural(m.OldPods, "old pod"))
	if m.Served > 0 {
		s += "its old pods got new connections until " + when(m.Tail, "their termination started")
	} else {
		s += "no old pod got a request on a new connection after its termination started"
	}
	if m.Failed > 0 {
		s += fmt.Sprintf(", and %d %s failed within %d s of a SIGTERM", m.Failed, plural(m.Failed, "request"), MeasuredMarginSeconds)
	}
	seconds, known := preStopSeconds(c)
	switch {
	case !known:
		return s + fmt.Sprintf("; container %q's preStop delay cannot be told from its hook, so it was not judged", c.Name)
	case lacksPreStopDelay(w, c):
		return s + fmt.Sprintf("; container %q has no preStop delay (%s)", c.Name, preStopDelayMissing.ID)
	}
	has := fmt.Sprintf("container %q's preStop of %d s", c.Name, seconds)
	if seconds == 0 {
		has = fmt.Sprintf("container %q, without a preStop delay,", c.Name)
	}
	if _, short := m.judge(seconds); short {
		return s + fmt.Sprintf("; %s falls short (%s)", has, preStopShorterThanMeasured.ID)
	}
	return s + fmt.Sprintf("; %s covers it, with the %d s margin", has, MeasuredMarginSeconds)
}

// judge compares a preStop delay of seconds with m, and returns the
// finding's message and fix when the delay is too short.
func (m Measurement) judge(seconds int64) (finding, bool) {
	preStop := time.Duration(seconds) * time.Second
	margin := MeasuredMarginSeconds * time.Second
	measured := fmt.Sprintf("in the measured rollouts of Deployment %s (%d %s, %d %s)",
		m.Deployment, m.Runs, plural(m.Runs, "run"), m.OldPods, plural(m.OldPods, "old pod"))
	has := fmt.Sprintf("preStop is %d s", seconds)
	if seconds == 0 {
		has = "the container has no preStop delay"
	}
	if need := m.Tail + margin; m.Served > 0 && preStop < need {
		return finding{
			message: fmt.Sprintf("%s, new connections reached old pods until %s and %s; %s, and that tail and the %d s margin need %.2f s",
				measured, when(m.Tail, "their termination started"), when(-m.Gap, "SIGTERM"), has, MeasuredMarginSeconds, need.Seconds()),
			fix: fmt.Sprintf("Set lifecycle.preStop.sleep.seconds to at least %d, keep it within terminationGracePeriodSeconds, "+
				"and measure again with closingtime rollout.", int64(math.Ceil(need.Seconds()))),
		}, true
	}
	// A delay longer than the measured ones was not measured: the
	// failures say nothing of it.
	if m.Failed > 0 && preStop <= m.FailedPreStop.Round(time.Second) {
		sigterm := "an old pod's SIGTERM"
		if m.FailedPreStop.Round(10*time.Millisecond) > 0 {
			sigterm += fmt.Sprintf(", which came %.2f s after its termination started", m.FailedPreStop.Seconds())
		}
		f := finding{
			message: fmt.Sprintf("%s, %d %s failed within %d s of %s; %s",
				measured, m.Failed, plural(m.Failed, "request"), MeasuredMarginSeconds, sigterm, has),
			fix: fmt.Sprintf("Lengthen lifecycle.preStop.sleep.seconds beyond %d s and measure again with closingtime rollout; "+
				"failures that stay at SIGTERM come from the server's shutdown, not from the delay.", seconds),
		}
		if seconds == 0 {
			f.fix = "Add lifecycle.preStop.sleep.seconds of a few seconds, longer than the endpoint propagation the rollouts " +
				"show, keep it within terminationGracePeriodSeconds, and measure again with closingtime rollout."
		}
		return f, true
	}
	return finding{}, false
}

// when says when a request came relative to event, d after it (before it
// when negative), for messages.
func when(d time.Duration, event string) string {
	if d < 0 {
		return fmt.Sprintf("%.2f s before %s", -d.Seconds(), event)
	}
	return fmt.Sprintf("%.2f s after %s", d.Seconds(), event)
}
