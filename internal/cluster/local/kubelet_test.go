package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests
// run as pods.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// waitLimit bounds every wait of these tests; reaching it is a failure, so it
// is far longer than anything should take.
const waitLimit = 30 * time.Second

// subnets gives each test's kubelet or cluster a pod range of its own, so
// that parallel tests' pods never share an address. Ranges are reused only
// after a hundred others, long after their tests ended (-count).
var subnets atomic.Int32

// newKubelet returns a kubelet on its own /24 of 127.77.0.0/16 that records
// into the returned log (cfg.Recorder if it is one), and closes it when the
// test ends.
func newKubelet(t *testing.T, cfg KubeletConfig) (*Kubelet, *cluster.EventLog) {
	t.Helper()
	log, ok := cfg.Recorder.(*cluster.EventLog)
	if !ok {
		log = &cluster.EventLog{}
	}
	n := subnets.Add(1)
	cfg.PodCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 77, byte(100 + n%150), 0}), 24)
	cfg.Recorder = log
	cfg.WorkingDir = t.TempDir()
	k, err := NewKubelet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := k.Close(ctx); err != nil {
			t.Errorf("close kubelet: %v", err)
		}
	})
	return k, log
}

var uids atomic.Int64

// servePod returns a pod whose container "app" runs `closingtime serve` on
// $(POD_IP):8080 with args, named for its pod by the downward API.
func servePod(name string, grace int64, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", uids.Add(1)))},
		Spec: corev1.PodSpec{
			NodeName:                      "node",
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "closingtime",
				Command: []string{binary, "serve", "--listen=$(POD_IP):8080"},
				Args:    args,
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	}
}

// httpProbe returns an httpGet probe of path on the "http" port every
// second, failing after failureThreshold failures in a row.
func httpProbe(path string, failureThreshold int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
		PeriodSeconds:    1,
		FailureThreshold: failureThreshold,
	}
}

// deleting returns pod as the API server leaves it after a graceful DELETE
// with the pod's own grace (spec T1, T2).
func deleting(pod *corev1.Pod) *corev1.Pod {
	d := pod.DeepCopy()
	now := metav1.Now()
	d.DeletionTimestamp = &now
	d.DeletionGracePeriodSeconds = pod.Spec.TerminationGracePeriodSeconds
	return d
}

// waitFor returns the first event at or after index from that matches
// kind and pod, and the index after it; it fails the test after waitLimit.
func waitFor(t *testing.T, log *cluster.EventLog, from int, kind cluster.EventKind, pod string) (cluster.Event, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// Bounded by ctx.
	for i := from; ; i++ {
		e, err := log.Next(ctx, i)
		if err != nil {
			t.Fatalf("no %s event of pod %s within %s; events: %s", kind, pod, waitLimit, describe(log.Events()))
		}
		if e.Kind == kind && e.Pod == pod {
			return e, i + 1
		}
	}
}

// describe renders events for failure messages.
func describe(events []cluster.Event) string {
	var b strings.Builder
	var start time.Time
	for _, e := range events {
		if start.IsZero() {
			start = e.Time
		}
		fmt.Fprintf(&b, "\n  +%6.3fs %s %s %v", e.Time.Sub(start).Seconds(), e.Pod, e.Kind, e.Fields)
	}
	return b.String()
}

// TestKubeletIgnorePID1 is acceptance item 4: a server with no SIGTERM
// handler, as PID 1 of its namespace, ignores the stop signal (spec I1) and
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

// TestKubeletPreStopThenSignal follows a pod deletion with a preStop sleep
// (spec T7, T9): readiness goes on during termination (T6) and the graceful
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
	// 5 s of grace less the 1 s the hook took.
	if got := signal.Fields["grace"]; got != "4s" {
		t.Errorf("grace after preStop = %s, want 4s", got)
	}
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

// TestKubeletCrashLoopBackOff is acceptance item 6, with the back-off rule
// scaled down: a container that crashes at start is restarted at once, then
// after Initial, 2×Initial, 4×Initial (spec B2).
func TestKubeletCrashLoopBackOff(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out several back-offs")
	}
	t.Parallel()
	const initial = 400 * time.Millisecond
	k, log := newKubelet(t, KubeletConfig{CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: initial, Max: 10 * initial}})
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
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, i, cluster.PodTerminated, "crash")
}

// TestKubeletLivenessRestart: a liveness probe that fails kills the
// container, which restarts (spec P7), and the restart count goes up.
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

// TestKubeletNoCommand: a container without a command whose image maps to
// no local command is refused at admission, with an error that names it.
func TestKubeletNoCommand(t *testing.T) {
	t.Parallel()
	k, _ := newKubelet(t, KubeletConfig{})
	pod := servePod("nocmd", 1)
	pod.Spec.Containers[0].Command = nil
	err := k.SyncPod(pod)
	if err == nil || !strings.Contains(err.Error(), "container app") {
		t.Errorf("SyncPod() error = %v, want one naming the container", err)
	}
}

// TestKubeletHostage is acceptance item 5: a server that, like Node's
// server.close(), keeps serving a connection that was busy at SIGTERM
// lives, with a busy keep-alive client, to the end of the grace period;
// SIGKILL then ends the request in flight (spec T7, E10).
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

// TestKubeletRestartNever: with restartPolicy Never, a container that
// exits stays down and the pod ends Failed, without a deletion (spec B1,
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
