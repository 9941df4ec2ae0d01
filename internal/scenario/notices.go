package scenario

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// noticeInterval is the least time between two notices of one pod's
// failing probe, and between two notices of the pods a deploy waits for:
// often enough to show that a run waits and why, seldom enough never to
// flood the display.
const noticeInterval = 10 * time.Second

// probeNoticeAfter is how long a pod's probe must have failed, from the
// first of its failed runs in a row, before a notice tells: a server that
// starts listening a few seconds after its container starts fails a few
// runs of a short-period probe, and that is not news. With the default
// period of 10 s, the second failed run comes later than this.
const probeNoticeAfter = 5 * time.Second

// addressInUse is what a server's error says when the address it binds is
// taken (EADDRINUSE's text), in lower case: Go writes it so, Python and
// Java as "Address already in use".
const addressInUse = "address already in use"

// addressInUseHint is the notice given, once a run, when a container's log
// says addressInUse: the likely cause is another container of the pod that
// binds the same port, since a pod's containers share its network.
const addressInUseHint = `hint: "` + addressInUse + `": another process holds the address; ` +
	`a pod's containers share its network, so no two of them can listen on one port`

// loopbackAddressInUseHint is addressInUseHint for a pod of the local
// cluster without network namespaces: the likely cause is an app that binds
// a fixed address that every pod binds too.
const loopbackAddressInUseHint = `hint: "` + addressInUse + `": another process holds the address; ` +
	`the local cluster's pods share the machine's network here, each with a loopback address of its own: ` +
	`listen on $(POD_IP), not 0.0.0.0 or a fixed address (docs/local-cluster.md)`

// maxQuoted bounds the length of a log line that a notice quotes.
const maxQuoted = 200

// podNotices turns the cluster's events that explain why pods do not start,
// keep running or become ready into notices, the short messages that the
// runner reports as [Progress.Notice]:
//
//   - a container whose start failed (ContainerStartFailed), with the
//     error;
//   - a container that exited while its pod was not terminating
//     (ContainerExited), with its exit code, the probe whose failure killed
//     it if one did (LivenessKill), and the last lines it wrote, standard
//     error's if it wrote any there;
//   - a container that waits to restart (BackOff), with the delay;
//   - a failing probe (ProbeFailed), from the failed run that comes
//     probeNoticeAfter or more after the first of its failed runs in a row,
//     and then at most one notice of a pod's probe a noticeInterval, by the
//     events' times. Failed runs at the start are common and change
//     nothing: the kubelet probes a container as soon as it starts, and
//     the first runs usually find the port not yet open;
//   - once a run, a hint when an exited container's log says "address
//     already in use", in any case; what it says depends on whether the
//     pod had a network of its own.
//
// Exits and probe failures of a pod that terminates are expected, and not
// reported. A podNotices is not safe for concurrent use.
type podNotices struct {
	// logs returns the lines that instance restart of container wrote in
	// pod namespace/name, oldest first; nil if the cluster has none.
	logs func(namespace, pod, container string, restart int32) []cluster.LogLine
	// restarts holds, by pod/container, the restart count of the latest
	// instance started.
	restarts map[string]int32
	// ending holds the pods that terminate.
	ending map[string]bool
	// killed holds, by pod/container, the probe whose failure made the
	// kubelet kill the container's running instance.
	killed map[string]string
	// probed holds, by pod/probe, the time of the last notice of a failure.
	probed map[string]time.Time
	// failing holds, by pod/probe, the time of the first failed run of the
	// probe's current run of failures.
	failing map[string]time.Time
	// loopback holds the pods whose pod_started event says they share
	// the machine's network.
	loopback map[string]bool
	// hint is the addressInUse hint once given.
	hint string
	// cause is the latest notice of a failed start or an exit, and
	// probeCause the latest of a failed probe.
	cause, probeCause string
}

// newPodNotices returns a podNotices that reads containers' logs with logs.
func newPodNotices(logs func(namespace, pod, container string, restart int32) []cluster.LogLine) *podNotices {
	return &podNotices{logs: logs, restarts: map[string]int32{}, ending: map[string]bool{}, killed: map[string]string{},
		probed: map[string]time.Time{}, failing: map[string]time.Time{}, loopback: map[string]bool{}}
}

// explanation returns the latest notice of a failed start or an exit,
// or, if there was none, of a failed probe, followed by the hint if it
// was given; "" if there was none. A container that fails to run is the
// plainer cause of a deploy that waits, whichever came last: a probe may
// fail meanwhile, of another pod. It changes only with an event whose
// notices are not empty.
func (d *podNotices) explanation() string {
	cause := d.cause
	if cause == "" {
		cause = d.probeCause
	}
	if d.hint != "" {
		return cause + "; " + d.hint
	}
	return cause
}

// notices takes the next event of the cluster, in order, and returns the
// notices it gives, if any.
func (d *podNotices) notices(e cluster.Event) []string {
	who := "pod " + e.Pod
	if e.Container != "" {
		who += ": container " + e.Container
	}
	switch e.Kind {
	case cluster.PodStarted:
		if strings.HasPrefix(e.Fields["network"], "loopback") {
			d.loopback[e.Pod] = true
		}
	case cluster.ContainerStarted:
		if n, err := strconv.ParseInt(e.Fields["restart"], 10, 32); err == nil {
			d.restarts[e.Pod+"/"+e.Container] = int32(n)
		}
	case cluster.PodTerminating, cluster.PodDeleted:
		d.ending[e.Pod] = true
	case cluster.LivenessKill:
		d.killed[e.Pod+"/"+e.Container] = e.Fields["probe"]
	case cluster.ContainerStartFailed:
		d.cause = who + " failed to start: " + e.Fields["error"]
		return []string{d.cause}
	case cluster.ContainerExited:
		if d.ending[e.Pod] || cluster.InitDone(e.Kind, e.Fields) {
			return nil
		}
		msg := who + " exited with code " + e.Fields["code"]
		if r := e.Fields["reason"]; r != "" && r != "Error" && r != "Completed" {
			msg += " (" + r + ")"
		}
		if probe, ok := d.killed[e.Pod+"/"+e.Container]; ok {
			delete(d.killed, e.Pod+"/"+e.Container)
			msg += ", killed after its " + probe + " probe failed"
		}
		lines := d.logs(e.Namespace, e.Pod, e.Container, d.restarts[e.Pod+"/"+e.Container])
		if q := quote(lines); q != "" {
			msg += ": " + q
		}
		d.cause = msg
		out := []string{msg}
		if d.hint == "" && slices.ContainsFunc(lines, func(l cluster.LogLine) bool { return strings.Contains(strings.ToLower(l.Text), addressInUse) }) {
			d.hint = addressInUseHint
			if d.loopback[e.Pod] {
				d.hint = loopbackAddressInUseHint
			}
			out = append(out, d.hint)
		}
		return out
	case cluster.BackOff:
		if d.ending[e.Pod] {
			return nil
		}
		if delay, err := time.ParseDuration(e.Fields["delay"]); err == nil {
			return []string{who + " restarts in " + delay.Round(100*time.Millisecond).String() + " (CrashLoopBackOff)"}
		}
		return []string{who + " waits to restart (CrashLoopBackOff)"}
	case cluster.ProbeFailed:
		probe := e.Fields["probe"]
		key := e.Pod + "/" + probe
		n, err := strconv.Atoi(e.Fields["failures"])
		if _, started := d.failing[key]; (err == nil && n == 1) || (err != nil && !started) {
			// A real cluster's Events do not count the failed runs in a
			// row: the first one seen starts the run.
			d.failing[key] = e.Time
		}
		if since, ok := d.failing[key]; (ok && e.Time.Sub(since) < probeNoticeAfter) || d.ending[e.Pod] {
			return nil
		}
		if last, ok := d.probed[key]; ok && e.Time.Sub(last) < noticeInterval {
			return nil
		}
		d.probed[key] = e.Time
		msg := who + ": " + cluster.ProbeFailure(e)
		if out := strings.TrimSpace(e.Fields["output"]); out != "" {
			msg += ": " + clip(out)
		}
		d.probeCause = msg
		return []string{msg}
	}
	return nil
}

// quote returns the last lines, at most two, of lines as a notice quotes
// them: standard error's if it has any, each clipped, joined by " | ".
func quote(lines []cluster.LogLine) string {
	stderr := slices.DeleteFunc(slices.Clone(lines), func(l cluster.LogLine) bool { return l.Stream != "stderr" })
	if len(stderr) > 0 {
		lines = stderr
	}
	var texts []string
	for _, l := range lines[max(0, len(lines)-2):] {
		if t := strings.TrimSpace(l.Text); t != "" {
			texts = append(texts, clip(t))
		}
	}
	return strings.Join(texts, " | ")
}

// clip shortens s to maxQuoted bytes, on a rune boundary, marking the cut
// with "…".
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// waitingNotice is the notice of a deploy that has waited for elapsed and
// gives up after limit, when ready of the want pods of its Deployment are
// ready, and running others run without being ready: those whose
// readiness or startup probe has not passed yet, whether or not a failed
// run of it gave a notice. With every pod ready, the deploy waits for the
// rollout's end (minReadySeconds) and for the Service to answer; last,
// when not empty, is how the Service last failed to.
func waitingNotice(elapsed time.Duration, ready, want, running int32, last string, limit time.Duration) string {
	msg := fmt.Sprintf("deploying for %s: %d of %d pods ready", elapsed.Round(time.Second), ready, want)
	switch {
	case running > 0:
		msg += fmt.Sprintf(", %d running but not ready (readiness or startup probe not passed)", running)
	case ready >= want && last != "":
		msg += fmt.Sprintf(", waiting for the Service to answer %d requests in a row", load.ServingInARow)
	case ready >= want:
		msg += ", waiting for the Deployment to be available and the Service to answer"
	}
	if last != "" {
		msg += "; its last failure: " + clip(last)
	}
	return msg + fmt.Sprintf("; gives up after %s", limit)
}

// waitingPods returns how many of Deployment d's pods are ready, and how
// many run but are not ready, after events.
func waitingPods(events []cluster.Event, d string) (ready, running int32) {
	tr := newReadiness(d)
	containers := map[string]int{} // by pod, the containers running
	for _, e := range events {
		tr.add(e)
		switch e.Kind {
		case cluster.ContainerStarted:
			containers[e.Pod]++
		case cluster.ContainerExited:
			containers[e.Pod]--
		}
	}
	for pod, n := range containers {
		if n > 0 && tr.ours[pod] && !tr.ended[pod] && !tr.readyNow[pod] {
			running++
		}
	}
	return int32(tr.ready()), running
}
