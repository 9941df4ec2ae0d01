package local

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestKubeletPreStopThenSignal follows a pod deletion with a preStop sleep
// (T7, T9): readiness goes on during termination (T6) and the graceful
// server's /ready fails after SIGTERM; the server exits by itself before
// SIGKILL, and its log is kept after the pod is gone.
func TestKubeletPreStopThenSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 1 s preStop sleep and probes")
	}
	t.Parallel()
	var statuses atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
	pod := servePod("prestop", 5, "--shutdown=graceful", "--pre-stop-delay=1500ms", "--drain-timeout=1s")
	pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 1)
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodReady, "prestop")
	st := statuses.Load()
	if st == nil || st.Status.PodIP == "" {
		t.Fatalf("no status with a pod IP delivered: %v", st)
	}
	resp, err := http.Get("http://" + st.Status.PodIP + ":8080/work")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Pod-Name"); got != "prestop" {
		t.Errorf("X-Pod-Name = %q, want the downward API's pod name", got)
	}

	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	preStart, i := waitFor(t, log, i, cluster.PreStopStarted, "prestop")
	preEnd, i := waitFor(t, log, i, cluster.PreStopFinished, "prestop")
	signal, i := waitFor(t, log, i, cluster.SignalSent, "prestop")
	unready, i := waitFor(t, log, i, cluster.PodUnready, "prestop")
	exited, i := waitFor(t, log, i, cluster.ContainerExited, "prestop")
	waitFor(t, log, i, cluster.PodTerminated, "prestop")

	if d := preEnd.Time.Sub(preStart.Time); d < time.Second-50*time.Millisecond {
		t.Errorf("preStop sleep of 1 s took %v", d)
	}
	checkGraceAfterPreStop(t, pod, time.Second, preStart, signal)
	if unready.Time.Before(signal.Time) {
		t.Errorf("pod unready at %v, before SIGTERM at %v", unready.Time, signal.Time)
	}
	if exited.Fields["code"] != "143" {
		t.Errorf("exit code %s, want 143", exited.Fields["code"])
	}
	for _, e := range log.Events() {
		if e.Kind == cluster.Killed {
			t.Errorf("SIGKILL sent to a server that exited by itself")
		}
	}
	lines, err := k.Logs("default", "prestop", "app")
	if err != nil {
		t.Fatal(err)
	}
	var sawSigterm bool
	for _, l := range lines {
		sawSigterm = sawSigterm || strings.Contains(l.Text, `"event":"sigterm"`)
	}
	if !sawSigterm {
		t.Errorf("logs after the pod is gone lack the sigterm event: %v", lines)
	}
}

// TestKubeletRestartNever: with restartPolicy Never, a container that
// exits stays down and the pod ends Failed, without a deletion (B1,
// T16).
func TestKubeletRestartNever(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("never", 1, "--crash-code=3", "--crash-after=0")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	terminated, _ := waitFor(t, log, 0, cluster.PodTerminated, "never")
	if terminated.Fields["phase"] != string(corev1.PodFailed) {
		t.Errorf("phase %s, want Failed", terminated.Fields["phase"])
	}
	starts := 0
	for _, e := range log.Events() {
		if e.Kind == cluster.ContainerStarted {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d starts, want 1", starts)
	}
}

// TestKubeletProbesDuringTermination: once the pod terminates, the
// liveness probe stops while the readiness probe goes on (T6, P9). A
// graceful server fails both probes' path after SIGTERM and serves on: the
// pod turns unready, the readiness probe's failed runs are recorded, and
// the liveness probe records none and does not kill the container.
func TestKubeletProbesDuringTermination(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for probes")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("term", 10, "--shutdown=graceful", "--pre-stop-delay=3s", "--drain-timeout=1s")
	ctr := &pod.Spec.Containers[0]
	ctr.ReadinessProbe = httpProbe("/ready", 1)
	// Two failures in a row kill: the first probe, at once, may find the
	// port still closed; during termination /ready fails every time.
	ctr.LivenessProbe = httpProbe("/ready", 2)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodReady, "term")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	signal, i := waitFor(t, log, i, cluster.SignalSent, "term")
	unready, i := waitFor(t, log, i, cluster.PodUnready, "term")
	exited, _ := waitFor(t, log, i, cluster.ContainerExited, "term")
	// The readiness probe, not the exit, made the pod unready: within the
	// 3 s the server serves on.
	if unready.Time.Sub(signal.Time) > exited.Time.Sub(signal.Time)-500*time.Millisecond {
		t.Errorf("unready %v and exit %v after SIGTERM: want the readiness probe to see /ready fail before the exit",
			unready.Time.Sub(signal.Time), exited.Time.Sub(signal.Time))
	}
	events := log.Events()
	terminating := slices.IndexFunc(events, func(e cluster.Event) bool { return e.Pod == "term" && e.Kind == cluster.PodTerminating })
	readinessFailed := 0
	for _, e := range events[terminating:] {
		switch {
		case e.Pod != "term":
		case e.Kind == cluster.ProbeFailed && e.Fields["probe"] == "readiness":
			readinessFailed++
		case e.Kind == cluster.LivenessKill, e.Kind == cluster.ProbeFailed,
			e.Kind == cluster.ProbeResult && e.Fields["probe"] == "liveness" && e.Fields["result"] == "failure":
			t.Errorf("%s %v during termination: the liveness probe should have stopped", e.Kind, e.Fields)
		}
	}
	if readinessFailed == 0 {
		t.Error("no failed readiness run during termination, want the probe that made the pod unready")
	}
	if exited.Fields["code"] != "143" {
		t.Errorf("exit code %s, want the graceful server's 143", exited.Fields["code"])
	}
}
