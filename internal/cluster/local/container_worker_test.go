package local

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestKubeletIgnorePID1 is acceptance item 4: a server with no SIGTERM
// handler, as PID 1 of its namespace, ignores the stop signal (I1) and
// is SIGKILLed at the end of the grace period: exit 137, reason Error (I2,
// T14).
func TestKubeletIgnorePID1(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 3 s grace period")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("ignore", 3, "--shutdown=ignore")
	pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	started, i := waitFor(t, log, 0, cluster.ContainerStarted, "ignore")
	if ns := started.Fields["pid_namespace"]; ns != "pid" && ns != "user+pid" {
		t.Skipf("no PID namespace on this system (%s: %s): PID 1's rules cannot apply", ns, started.Fields["pid_namespace_reason"])
	}
	_, i = waitFor(t, log, i, cluster.PodReady, "ignore")

	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	signal, i := waitFor(t, log, i, cluster.SignalSent, "ignore")
	killed, i := waitFor(t, log, i, cluster.Killed, "ignore")
	exited, i := waitFor(t, log, i, cluster.ContainerExited, "ignore")
	terminated, _ := waitFor(t, log, i, cluster.PodTerminated, "ignore")

	if got := signal.Fields["signal"]; got != "SIGTERM" {
		t.Errorf("signal = %s, want SIGTERM", got)
	}
	// No preStop: the whole grace separates the signal from SIGKILL.
	if d := killed.Time.Sub(signal.Time); d < 3*time.Second-50*time.Millisecond || d > 5*time.Second {
		t.Errorf("SIGKILL %v after SIGTERM, want the 3 s grace", d)
	}
	if exited.Fields["code"] != "137" || exited.Fields["reason"] != "Error" {
		t.Errorf("exit %s %s, want 137 Error", exited.Fields["code"], exited.Fields["reason"])
	}
	if terminated.Fields["phase"] != string(corev1.PodFailed) {
		t.Errorf("phase %s, want Failed", terminated.Fields["phase"])
	}
}

// TestKubeletCrashLoopBackOff is acceptance item 6, with the back-off rule
// scaled down: a container that crashes at start is restarted at once, then
// after Initial, 2×Initial, 4×Initial (B2).
func TestKubeletCrashLoopBackOff(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out several back-offs")
	}
	t.Parallel()
	const initial = 400 * time.Millisecond
	// waiting is a status during a back-off.
	var waiting atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: initial, Max: 10 * initial},
		StatusUpdated: func(p *corev1.Pod) {
			if w := p.Status.ContainerStatuses[0].State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
				waiting.Store(p)
			}
		}})
	pod := servePod("crash", 3, "--crash-code=3", "--crash-after=0")
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	var exits, starts []time.Time
	i := 0
	for range 5 {
		var started, exited cluster.Event
		started, i = waitFor(t, log, i, cluster.ContainerStarted, "crash")
		exited, i = waitFor(t, log, i, cluster.ContainerExited, "crash")
		if exited.Fields["code"] != "3" {
			t.Fatalf("exit code %s, want 3", exited.Fields["code"])
		}
		starts, exits = append(starts, started.Time), append(exits, exited.Time)
	}
	// The wait before restart n+1 is from exit n to start n+1.
	wants := []time.Duration{0, initial, 2 * initial, 4 * initial}
	for n, want := range wants {
		got := starts[n+1].Sub(exits[n])
		if got < want-10*time.Millisecond || got > want+time.Second {
			t.Errorf("restart %d after %v, want %v (waits: %v)", n+1, got, want, wants)
		}
	}
	// While it waits, the exit it waits out is its last state (T15).
	if st := waiting.Load(); st == nil {
		t.Error("no status reported the CrashLoopBackOff wait")
	} else if last := st.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
		t.Errorf("last state during the back-off %+v, want the exit with code 3", st.Status.ContainerStatuses[0].LastTerminationState)
	}
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, i, cluster.PodTerminated, "crash")
}

// TestKubeletLivenessRestart: a liveness probe that fails kills the
// container, which restarts (P7), and the restart count goes up.
func TestKubeletLivenessRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for probes")
	}
	t.Parallel()
	var statuses atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
	pod := servePod("live", 2, "--shutdown=exit")
	pod.Spec.Containers[0].LivenessProbe = httpProbe("/no-such-path", 2)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	kill, i := waitFor(t, log, 0, cluster.LivenessKill, "live")
	if kill.Fields["probe"] != "liveness" {
		t.Errorf("kill by %s probe, want liveness", kill.Fields["probe"])
	}
	_, i = waitFor(t, log, i, cluster.SignalSent, "live")
	_, i = waitFor(t, log, i, cluster.ContainerExited, "live")
	started, i := waitFor(t, log, i, cluster.ContainerStarted, "live")
	if started.Fields["restart"] != "1" {
		t.Errorf("restart %s, want 1", started.Fields["restart"])
	}
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, i, cluster.PodTerminated, "live")
	st := statuses.Load()
	if cs := st.Status.ContainerStatuses[0]; cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil {
		t.Errorf("container status %+v, want a restart and a last state", cs)
	}
}

// TestKubeletHostage is acceptance item 5: a server that, like Node's
// server.close(), keeps serving a connection that was busy at SIGTERM
// lives, with a busy keep-alive client, to the end of the grace period;
// SIGKILL then ends the request in flight (T7, E10).
func TestKubeletHostage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 3 s grace period")
	}
	t.Parallel()
	var statuses atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
	pod := servePod("hostage", 3, "--shutdown=hostage", "--work=300ms", "--idle-timeout=5s")
	pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodReady, "hostage")
	conn, err := net.Dial("tcp", statuses.Load().Status.PodIP+":8080")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)

	// A busy keep-alive client: one request after the other, until one
	// fails.
	type outcome struct {
		served int // requests answered after SIGTERM was sent
		err    error
	}
	var sigterm atomic.Bool
	result := make(chan outcome, 1)
	go func() {
		var o outcome
		// Bounded: SIGKILL ends the connection within the grace period.
		for {
			if _, err := io.WriteString(conn, "GET /work HTTP/1.1\r\nHost: pod\r\n\r\n"); err != nil {
				o.err = err
				break
			}
			conn.SetReadDeadline(time.Now().Add(waitLimit))
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil {
				o.err = err
				break
			}
			if sigterm.Load() {
				o.served++
			}
		}
		result <- o
	}()
	time.Sleep(500 * time.Millisecond)
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	signal, i := waitFor(t, log, i, cluster.SignalSent, "hostage")
	sigterm.Store(true)
	killed, i := waitFor(t, log, i, cluster.Killed, "hostage")
	exited, _ := waitFor(t, log, i, cluster.ContainerExited, "hostage")
	o := <-result

	if d := killed.Time.Sub(signal.Time); d < 3*time.Second-50*time.Millisecond {
		t.Errorf("SIGKILL %v after SIGTERM, want the 3 s grace", d)
	}
	if exited.Fields["code"] != "137" {
		t.Errorf("exit code %s, want 137", exited.Fields["code"])
	}
	if o.served < 3 {
		t.Errorf("%d requests served on the busy connection after SIGTERM, want it kept serving", o.served)
	}
	if o.err == nil || errors.Is(o.err, os.ErrDeadlineExceeded) {
		t.Errorf("request in flight at SIGKILL ended with %v, want the connection broken", o.err)
	}
	t.Logf("in flight at SIGKILL: %v", o.err)
}

// TestKubeletStopSignal: lifecycle.stopSignal replaces SIGTERM as the
// signal the kubelet sends first (T11, T12); it reaches a first
// process that handles it, even as PID 1, which exits 0: reason Completed
// (T14).
func TestKubeletStopSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	t.Parallel()
	for _, sig := range []corev1.Signal{corev1.SIGINT, corev1.SIGQUIT} {
		t.Run(string(sig), func(t *testing.T) {
			t.Parallel()
			var statuses atomic.Pointer[corev1.Pod]
			k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
			// The handler of the stop signal only: SIGTERM would be
			// ignored by PID 1.
			short := strings.TrimPrefix(string(sig), "SIG")
			pod := shellPod("stop", 10, trapScript(short))
			pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{StopSignal: &sig}
			if err := k.SyncPod(pod); err != nil {
				t.Fatal(err)
			}
			started, i := waitFor(t, log, 0, cluster.ContainerStarted, "stop")
			waitLogLine(t, k, "stop", "waiting")
			if err := k.SyncPod(deleting(pod)); err != nil {
				t.Fatal(err)
			}
			signal, i := waitFor(t, log, i, cluster.SignalSent, "stop")
			exited, _ := waitFor(t, log, i, cluster.ContainerExited, "stop")
			if got := signal.Fields["signal"]; got != string(sig) {
				t.Errorf("signal %s, want %s", got, sig)
			}
			if exited.Fields["code"] != "0" || exited.Fields["reason"] != "Completed" {
				t.Errorf("exit %s %s, want 0 Completed", exited.Fields["code"], exited.Fields["reason"])
			}
			if d := exited.Time.Sub(signal.Time); d > 5*time.Second {
				t.Errorf("exit %v after the signal, want the handler's exit, not SIGKILL's", d)
			}
			waitLogLine(t, k, "stop", "got "+short)
			t.Logf("first process isolated by %s", started.Fields["pid_namespace"])
		})
	}
}

// TestKubeletExitReasons pins the exit code and reason pairs of T14
// and I2 in the container's status: a handler that exits 0 is Completed;
// SIGTERM's default action on a process that is not PID 1 is 143, Error;
// SIGKILL at the end of the grace period of a PID 1 without a handler is
// 137, Error.
func TestKubeletExitReasons(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a grace period")
	}
	t.Parallel()
	tests := []struct {
		name       string
		pidNS      PIDNamespaceMode
		pod        *corev1.Pod
		wantCode   int32
		wantReason string
		wantKilled bool
	}{
		{name: "handler exits 0", pod: shellPod("p", 3, trapScript("TERM")), wantCode: 0, wantReason: "Completed"},
		{name: "default action", pidNS: PIDNamespaceNone, pod: servePod("p", 3, "--shutdown=ignore"), wantCode: 143, wantReason: "Error"},
		{name: "grace expiry", pod: servePod("p", 2, "--shutdown=ignore"), wantCode: 137, wantReason: "Error", wantKilled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var statuses atomic.Pointer[corev1.Pod]
			k, log := newKubelet(t, KubeletConfig{PIDNamespace: tt.pidNS, StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
			if err := k.SyncPod(tt.pod); err != nil {
				t.Fatal(err)
			}
			started, i := waitFor(t, log, 0, cluster.ContainerStarted, "p")
			if tt.pidNS == PIDNamespaceAuto && started.Fields["pid_namespace"] == "none" {
				t.Skipf("no PID namespace on this system: %s", started.Fields["pid_namespace_reason"])
			}
			// Let the process install its handlers before it is signalled.
			time.Sleep(500 * time.Millisecond)
			if err := k.SyncPod(deleting(tt.pod)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, log, i, cluster.PodTerminated, "p")
			// The status reaches StatusUpdated on a goroutine of its own.
			term := waitStatus(t, &statuses, func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			}).Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != tt.wantCode || term.Reason != tt.wantReason {
				t.Errorf("terminated state %+v, want exit %d, reason %s", term, tt.wantCode, tt.wantReason)
			}
			if killed := slices.Contains(kinds(log, i, "p"), cluster.Killed); killed != tt.wantKilled {
				t.Errorf("SIGKILL sent: %v, want %v", killed, tt.wantKilled)
			}
		})
	}
}

// TestKubeletStartupProbe: until the startup probe succeeds, the liveness
// and readiness probes do not run and the pod is not Ready; then they run
// (P6). A startup probe that reaches its failure threshold kills the
// container, which restarts.
func TestKubeletStartupProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for probes")
	}
	t.Parallel()
	t.Run("gates", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		k, log := newKubelet(t, KubeletConfig{})
		pod := servePod("gated", 2, "--shutdown=exit")
		ctr := &pod.Spec.Containers[0]
		ctr.StartupProbe = &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", filepath.Join(dir, "started")}}},
			PeriodSeconds:    1,
			FailureThreshold: 30,
		}
		ctr.ReadinessProbe = httpProbe("/ready", 1)
		// A liveness probe that always fails: run before the start, it
		// would record failures and kill the container. Its threshold of 3
		// leaves the readiness probe two periods after the start to make
		// the pod ready before the kill.
		ctr.LivenessProbe = httpProbe("/no-such-path", 3)
		if err := k.SyncPod(pod); err != nil {
			t.Fatal(err)
		}
		_, i := waitFor(t, log, 0, cluster.ContainerStarted, "gated")
		// Three probe periods with the server up and the startup probe
		// failing.
		time.Sleep(3 * time.Second)
		startupFailed := 0
		for _, e := range log.Events()[i:] {
			switch {
			case e.Pod != "gated":
			case e.Kind == cluster.ProbeFailed && e.Fields["probe"] == "startup":
				startupFailed++
			case e.Kind == cluster.ProbeFailed, e.Kind == cluster.ProbeResult, e.Kind == cluster.PodReady, e.Kind == cluster.LivenessKill:
				t.Errorf("%s %v before the startup probe succeeded", e.Kind, e.Fields)
			}
		}
		if startupFailed < 2 {
			t.Errorf("%d failed startup runs in 3 s, want one a period", startupFailed)
		}
		if err := os.WriteFile(filepath.Join(dir, "started"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		startup, j := waitFor(t, log, i, cluster.ProbeResult, "gated")
		if startup.Fields["probe"] != "startup" || startup.Fields["result"] != "success" {
			t.Fatalf("first probe result %v, want the startup probe's success", startup.Fields)
		}
		_, j = waitFor(t, log, j, cluster.PodReady, "gated")
		kill, _ := waitFor(t, log, j, cluster.LivenessKill, "gated")
		if kill.Fields["probe"] != "liveness" {
			t.Errorf("kill by %s probe, want liveness once started", kill.Fields["probe"])
		}
	})
	t.Run("kills at threshold", func(t *testing.T) {
		t.Parallel()
		k, log := newKubelet(t, KubeletConfig{})
		pod := servePod("slow", 2, "--shutdown=exit")
		pod.Spec.Containers[0].StartupProbe = httpProbe("/no-such-path", 2)
		if err := k.SyncPod(pod); err != nil {
			t.Fatal(err)
		}
		first, i := waitFor(t, log, 0, cluster.ContainerStarted, "slow")
		result, i := waitFor(t, log, i, cluster.ProbeResult, "slow")
		kill, i := waitFor(t, log, i, cluster.LivenessKill, "slow")
		again, _ := waitFor(t, log, i, cluster.ContainerStarted, "slow")
		if result.Fields["probe"] != "startup" || result.Fields["result"] != "failure" || kill.Fields["probe"] != "startup" {
			t.Errorf("probe result %v, kill %v; want the startup probe's failure and kill", result.Fields, kill.Fields)
		}
		// Two failures a period apart: the kill comes no sooner than one
		// period after the start.
		if d := kill.Time.Sub(first.Time); d < time.Second-50*time.Millisecond {
			t.Errorf("killed %v after the start, before failureThreshold 2 × periodSeconds 1", d)
		}
		if again.Fields["restart"] != "1" {
			t.Errorf("restart %s, want 1", again.Fields["restart"])
		}
	})
}

// TestKubeletGRPCProbe: a grpc readiness probe asks the pod's
// grpc.health.v1 service (P2): it fails while the server has not opened its
// port, makes the pod ready once the server says SERVING, and fails again
// once a graceful server's health turns NOT_SERVING at SIGTERM, its port
// still open through its pre-stop delay.
func TestKubeletGRPCProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for probes")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("grpc", 10, "--grpc", "--startup-delay=2s", "--shutdown=graceful", "--pre-stop-delay=4s")
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	failed, i := waitFor(t, log, 0, cluster.ProbeFailed, "grpc")
	if got := cluster.ProbeFailure(failed); got != "readiness probe gRPC :8080 failed" {
		t.Errorf("probe failure %q, want the gRPC probe of port 8080", got)
	}
	_, i = waitFor(t, log, i, cluster.PodReady, "grpc")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	_, i = waitFor(t, log, i, cluster.SignalSent, "grpc")
	unready, _ := waitFor(t, log, i, cluster.ProbeFailed, "grpc")
	if !strings.Contains(unready.Fields["output"], "NOT_SERVING") {
		t.Errorf("probe failure after SIGTERM %v, want the NOT_SERVING of the server's health", unready.Fields)
	}
}

// TestKubeletProbeFailedEachRun: every failed run of a probe is recorded
// (probe_failed), as the kubelet posts Unhealthy at each, while the stored
// result changes only at the threshold (P5). A readiness probe of a
// closed port fails once a period from initialDelaySeconds on (P3) and
// never changes its stored result, a failure from the start (P4); a
// liveness probe of a closed port fails failureThreshold times before its
// result changes and the container is killed (P7).
func TestKubeletProbeFailedEachRun(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for probes")
	}
	t.Parallel()
	closed := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}
	t.Run("readiness", func(t *testing.T) {
		t.Parallel()
		k, log := newKubelet(t, KubeletConfig{})
		pod := servePod("unready", 2, "--shutdown=exit")
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: closed, InitialDelaySeconds: 2, PeriodSeconds: 1}
		if err := k.SyncPod(pod); err != nil {
			t.Fatal(err)
		}
		started, i := waitFor(t, log, 0, cluster.ContainerStarted, "unready")
		const n = 5
		var failed []cluster.Event
		for len(failed) < n {
			var e cluster.Event
			e, i = waitFor(t, log, i, cluster.ProbeFailed, "unready")
			failed = append(failed, e)
		}
		for j, e := range failed {
			if e.Fields["probe"] != "readiness" || e.Fields["target"] != "TCP :8081" || e.Fields["failures"] != strconv.Itoa(j+1) || !strings.Contains(e.Fields["output"], "connection refused") {
				t.Errorf("probe_failed %v, want the readiness probe's refused connection, failure %d in a row", e.Fields, j+1)
			}
		}
		// No run before initialDelaySeconds 2; then one a period.
		if d := failed[0].Time.Sub(started.Time); d < 1900*time.Millisecond || d > 10*time.Second {
			t.Errorf("first failed run %v after the start, want from initialDelaySeconds 2 on, within a few periods", d)
		}
		if d := failed[n-1].Time.Sub(failed[0].Time); d < time.Duration(n-1)*time.Second-500*time.Millisecond || d > 4*time.Duration(n-1)*time.Second {
			t.Errorf("%d failed runs in %v, want one a periodSeconds 1", n, d)
		}
		for _, e := range log.Events() {
			if e.Pod == "unready" && (e.Kind == cluster.ProbeResult || e.Kind == cluster.PodReady) {
				t.Errorf("%s %v: the readiness result stays the initial failure", e.Kind, e.Fields)
			}
		}
	})
	t.Run("liveness threshold", func(t *testing.T) {
		t.Parallel()
		k, log := newKubelet(t, KubeletConfig{})
		pod := servePod("dead", 2, "--shutdown=exit")
		pod.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: closed, PeriodSeconds: 1, FailureThreshold: 3}
		if err := k.SyncPod(pod); err != nil {
			t.Fatal(err)
		}
		_, from := waitFor(t, log, 0, cluster.ContainerStarted, "dead")
		result, i := waitFor(t, log, from, cluster.ProbeResult, "dead")
		kill, _ := waitFor(t, log, i, cluster.LivenessKill, "dead")
		if result.Fields["probe"] != "liveness" || result.Fields["result"] != "failure" || kill.Fields["probe"] != "liveness" {
			t.Errorf("probe result %v, kill %v; want the liveness probe's failure and kill", result.Fields, kill.Fields)
		}
		var failures []string
		for _, e := range log.Events()[from : i-1] {
			if e.Pod == "dead" && e.Kind == cluster.ProbeFailed && e.Fields["probe"] == "liveness" {
				failures = append(failures, e.Fields["failures"])
			}
		}
		if !slices.Equal(failures, []string{"1", "2", "3"}) {
			t.Errorf("failed liveness runs %v in a row before the result changed, want 1 2 3 (failureThreshold 3); events: %s",
				failures, describe(log.Events()))
		}
	})
}

// TestKubeletPreStopHandlers runs each preStop handler kind that works
// (T9): exec in the container's environment and httpGet, both waited
// for before the stop signal, their time taken from the grace period in
// whole seconds (T7 b).
func TestKubeletPreStopHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs preStop hooks")
	}
	t.Parallel()
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		k, log := newKubelet(t, KubeletConfig{})
		pod := shellPod("exec", 5, trapScript("TERM"))
		ctr := &pod.Spec.Containers[0]
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "HOOK_DIR", Value: dir})
		ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{"sh", "-c", `echo "$POD_NAME" > "$HOOK_DIR/ran"; sleep 1.5`}}}}
		checkPreStop(t, k, log, pod)
		if got, err := os.ReadFile(filepath.Join(dir, "ran")); err != nil || strings.TrimSpace(string(got)) != "exec" {
			t.Errorf("hook output %q, %v; want the pod's name from its environment", got, err)
		}
	})
	t.Run("httpGet", func(t *testing.T) {
		t.Parallel()
		var agent atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			agent.Store(r.Header.Get("User-Agent") + " " + r.URL.Path)
			time.Sleep(1500 * time.Millisecond)
		}))
		defer srv.Close()
		host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		portNum, _ := strconv.Atoi(port)
		k, log := newKubelet(t, KubeletConfig{})
		pod := shellPod("http", 5, trapScript("TERM"))
		pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: host, Port: intstr.FromInt(portNum), Path: "/drain"}}}
		checkPreStop(t, k, log, pod)
		if got, _ := agent.Load().(string); !strings.HasPrefix(got, "kube-lifecycle/") || !strings.HasSuffix(got, " /drain") {
			t.Errorf("hook request %q, want a kube-lifecycle GET of /drain", got)
		}
	})
}

// checkPreStop deletes pod, whose hook takes 1.5 s, and checks that the
// stop signal waited for it and got what the hook left of the grace.
func checkPreStop(t *testing.T, k *Kubelet, log *cluster.EventLog, pod *corev1.Pod) {
	t.Helper()
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.ContainerStarted, pod.Name)
	waitLogLine(t, k, pod.Name, "waiting")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	start, i := waitFor(t, log, i, cluster.PreStopStarted, pod.Name)
	end, i := waitFor(t, log, i, cluster.PreStopFinished, pod.Name)
	signal, i := waitFor(t, log, i, cluster.SignalSent, pod.Name)
	exited, _ := waitFor(t, log, i, cluster.ContainerExited, pod.Name)
	if err := end.Fields["error"]; err != "" {
		t.Errorf("hook failed: %s", err)
	}
	if d := end.Time.Sub(start.Time); d < 1500*time.Millisecond-50*time.Millisecond {
		t.Errorf("hook of 1.5 s over after %v", d)
	}
	checkGraceAfterPreStop(t, pod, 1500*time.Millisecond, start, signal)
	if exited.Fields["code"] != "0" {
		t.Errorf("exit %s, want the handler's 0", exited.Fields["code"])
	}
}

// checkGraceAfterPreStop checks the grace of the stop signal sent after
// pod's preStop hook, which lasts at least hook: the pod's grace period
// less the whole seconds the hook took, at least
// cluster.MinimumGracePeriodSeconds (T7 b, T8). The kubelet measures
// the hook from its start event to a moment before the signal's event; on a
// loaded machine a hook of 1.5 s can take 2, so the check accepts the grace
// left by any time from hook to that span. A grace the hook did not shorten,
// or shortened by a fraction, fails. The slack covers the log raising an
// event's time to the one before it.
func checkGraceAfterPreStop(t *testing.T, pod *corev1.Pod, hook time.Duration, start, signal cluster.Event) {
	t.Helper()
	const slack = 100 * time.Millisecond
	grace := *pod.Spec.TerminationGracePeriodSeconds
	left := func(took time.Duration) time.Duration {
		return time.Duration(max(grace-int64(took/time.Second), cluster.MinimumGracePeriodSeconds)) * time.Second
	}
	most, least := left(hook), left(signal.Time.Sub(start.Time)+slack)
	got, err := time.ParseDuration(signal.Fields["grace"])
	if err != nil || got < least || got > most {
		t.Errorf("grace after a preStop hook of %v, %v to the signal: %q, want the %ds grace period less the hook's whole seconds, %v to %v",
			hook, signal.Time.Sub(start.Time), signal.Fields["grace"], grace, least, most)
	}
}

// TestKubeletPreStopOutlivesGrace: a preStop hook longer than the grace
// period is waited for only as long as the grace period, and the stop
// signal still gets 2 s before SIGKILL: about grace + 2 s in all (T7,
// T8). The hook is not cancelled; it ends with the container.
func TestKubeletPreStopOutlivesGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a grace period")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("long", 2, "--shutdown=ignore")
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: []string{"sleep", "30"}}}}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	started, i := waitFor(t, log, 0, cluster.ContainerStarted, "long")
	if ns := started.Fields["pid_namespace"]; ns == "none" {
		t.Skipf("no PID namespace on this system (%s): SIGTERM would kill", started.Fields["pid_namespace_reason"])
	}
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	start, i := waitFor(t, log, i, cluster.PreStopStarted, "long")
	end, i := waitFor(t, log, i, cluster.PreStopFinished, "long")
	signal, i := waitFor(t, log, i, cluster.SignalSent, "long")
	killed, i := waitFor(t, log, i, cluster.Killed, "long")
	exited, i := waitFor(t, log, i, cluster.ContainerExited, "long")
	waitFor(t, log, i, cluster.PodTerminated, "long")
	if d := end.Time.Sub(start.Time); d < 2*time.Second-50*time.Millisecond || d > 4*time.Second {
		t.Errorf("hook waited for %v, want the 2 s grace period", d)
	}
	if !strings.Contains(end.Fields["error"], "still running") {
		t.Errorf("hook end %v, want it reported still running", end.Fields)
	}
	if got := signal.Fields["grace"]; got != "2s" {
		t.Errorf("grace after the hook %s, want the 2 s minimum", got)
	}
	if d := killed.Time.Sub(signal.Time); d < 2*time.Second-50*time.Millisecond {
		t.Errorf("SIGKILL %v after the stop signal, want at least 2 s", d)
	}
	if d := killed.Time.Sub(start.Time); d < 4*time.Second-100*time.Millisecond || d > 7*time.Second {
		t.Errorf("SIGKILL %v after the hook started, want about grace + 2 s = 4 s", d)
	}
	if exited.Fields["code"] != "137" {
		t.Errorf("exit %s, want 137", exited.Fields["code"])
	}
}
