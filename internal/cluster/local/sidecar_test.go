package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// sidecar returns a native sidecar named name running script with sh -c:
// an init container with restartPolicy Always.
func sidecar(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: "closingtime", Command: []string{"sh", "-c", script},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
}

// execProbe returns an exec probe of command every second, failing after
// one failure.
func execProbe(command ...string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: command}},
		PeriodSeconds: 1, FailureThreshold: 1}
}

// sleepHook returns a preStop hook that runs sleep for d in the container.
func sleepHook(d string) *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", d}}}}
}

// of matches the events of container name.
func of(name string) func(cluster.Event) bool {
	return func(e cluster.Event) bool { return e.Container == name }
}

// TestSidecarStartsInPlace: a sidecar starts in its place among the init
// containers, and the next starts only once the sidecar's startup probe
// succeeded; the sidecar keeps running beside the app container (C2).
func TestSidecarStartsInPlace(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := initPod("inplace", trapScript("TERM"), "true")
	proxy := sidecar("proxy", "sleep 0.5; touch started; "+trapScript("TERM"))
	proxy.StartupProbe = execProbe("test", "-f", "started")
	proxy.StartupProbe.FailureThreshold = 10
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, proxy,
		corev1.Container{Name: "init-c", Image: "closingtime", Command: []string{"true"}})
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, 0, cluster.PodReady, "inplace")
	var got []string
	for _, e := range log.Events() {
		switch {
		case e.Kind == cluster.ContainerStarted:
			got = append(got, "start "+e.Container)
		case e.Kind == cluster.ContainerExited:
			got = append(got, "exit "+e.Container)
		case e.Kind == cluster.ProbeResult && e.Fields["result"] == "success":
			got = append(got, "started "+e.Container)
		}
	}
	want := "start init-a, exit init-a, start proxy, started proxy, start init-c, exit init-c, start app"
	if strings.Join(got, ", ") != want {
		t.Errorf("containers: %s\nwant %s", strings.Join(got, ", "), want)
	}
	start, _ := nextEvent(t, log, 0, cluster.ContainerStarted, "container proxy", of("proxy"))
	if start.Fields["sidecar"] != "true" || start.Fields["init"] != "" {
		t.Errorf("sidecar's start fields %v, want sidecar=true and no init", start.Fields)
	}
}

// TestSidecarRestartsAndCounts: a sidecar is restarted whenever it exits,
// whatever the pod's restartPolicy; its readiness counts toward the pod's;
// once the app container has ended by itself the sidecar is stopped, and
// its exit code does not fail the pod (C2).
func TestSidecarRestartsAndCounts(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond}})
	pod := shellPod("counted", 3, "while [ ! -f finish ]; do sleep 0.05; done; exit 0")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	// Its first run exits 0 at once; the second runs until SIGTERM, then
	// exits 7.
	proxy := sidecar("proxy", `[ -f ran ] || { touch ran; exit 0; }; trap 'exit 7' TERM; while :; do sleep 0.05; done`)
	proxy.ReadinessProbe = execProbe("test", "-f", "ready")
	pod.Spec.InitContainers = []corev1.Container{proxy}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	restarted, i := nextEvent(t, log, 0, cluster.ContainerStarted, "container proxy", func(e cluster.Event) bool {
		return e.Container == "proxy" && e.Fields["restart"] == "1"
	})
	if restarted.Fields["sidecar"] != "true" {
		t.Errorf("restart %v, want sidecar=true", restarted.Fields)
	}
	// The sidecar has started at once, without a startup probe: the app
	// may start before its first exit.
	nextEvent(t, log, 0, cluster.ContainerStarted, "container app", of("app"))
	// The app has no readiness probe: only the sidecar's keeps the pod
	// unready.
	_, i = nextEvent(t, log, i, cluster.ProbeFailed, "container proxy", of("proxy"))
	for _, e := range log.Events() {
		if e.Kind == cluster.PodReady {
			t.Fatalf("pod ready while its sidecar's readiness probe fails; events: %s", describe(log.Events()))
		}
	}
	if err := os.WriteFile(filepath.Join(k.cfg.WorkingDir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, i = waitFor(t, log, i, cluster.PodReady, "counted")
	if err := os.WriteFile(filepath.Join(k.cfg.WorkingDir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, i = nextEvent(t, log, i, cluster.ContainerExited, "container app", of("app"))
	signal, i := nextEvent(t, log, i, cluster.SignalSent, "container proxy", of("proxy"))
	if signal.Fields["after"] != "" {
		t.Errorf("sidecar's signal %v waited for an app container that had ended", signal.Fields)
	}
	exit, i := nextEvent(t, log, i, cluster.ContainerExited, "container proxy", of("proxy"))
	if exit.Fields["code"] != "7" {
		t.Errorf("sidecar exit %v, want code 7", exit.Fields)
	}
	end, _ := waitFor(t, log, i, cluster.PodTerminated, "counted")
	if end.Fields["phase"] != string(corev1.PodSucceeded) {
		t.Errorf("pod ended %v, want Succeeded: a sidecar's exit code does not count", end.Fields)
	}
	for _, e := range log.Events() {
		if e.Kind == cluster.PodTerminating {
			t.Errorf("pod_terminating recorded for a pod that ended by itself")
		}
	}
}

// TestTerminationOrder pins C3 with two sidecars: the preStop hooks of
// the app container and of a sidecar start together; the app gets its
// signal after its hook; the later sidecar only once the app has exited,
// and the earlier sidecar only once the later one has; each signal says
// whom it waited for, and the grace left.
func TestTerminationOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for hooks and drains of a second or more")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := shellPod("ordered", 10, "trap 'sleep 1; exit 0' TERM; echo waiting; while :; do sleep 0.05; done")
	pod.Spec.Containers[0].Lifecycle = sleepHook("1")
	first := sidecar("first", "trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.05; done")
	first.Lifecycle = sleepHook("1")
	second := sidecar("second", "trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.05; done")
	pod.Spec.InitContainers = []corev1.Container{first, second}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, k, "ordered", "waiting")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	end, _ := waitFor(t, log, 0, cluster.PodTerminated, "ordered")
	at := map[string]cluster.Event{}
	for _, e := range log.Events() {
		if e.Container != "" {
			at[e.Container+" "+string(e.Kind)] = e
		}
	}
	appHook, firstHook := at["app "+string(cluster.PreStopStarted)], at["first "+string(cluster.PreStopStarted)]
	if appHook.Time.IsZero() || firstHook.Time.IsZero() {
		t.Fatalf("preStop hooks of app and first not both started; events: %s", describe(log.Events()))
	}
	if d := firstHook.Time.Sub(appHook.Time).Abs(); d > time.Second {
		t.Errorf("preStop hooks of app and sidecar started %v apart, want together", d)
	}
	// Each signal comes after what it waits for.
	for _, step := range []struct{ container, after, afterExit string }{
		{"app", "", ""},
		{"second", "app", "app"},
		{"first", "app,second", "second"},
	} {
		sig := at[step.container+" "+string(cluster.SignalSent)]
		if sig.Time.IsZero() {
			t.Fatalf("no signal to %s; events: %s", step.container, describe(log.Events()))
		}
		if sig.Fields["after"] != step.after {
			t.Errorf("signal to %s waited for %q, want %q", step.container, sig.Fields["after"], step.after)
		}
		if step.afterExit == "" {
			continue
		}
		exit := at[step.afterExit+" "+string(cluster.ContainerExited)]
		if exit.Time.IsZero() || sig.Time.Before(exit.Time) {
			t.Errorf("signal to %s at %v, before %s exited at %v", step.container, sig.Time, step.afterExit, exit.Time)
		}
		// The wait is whole seconds off the grace of 10 s: the app's
		// hook and drain took 2 s or more.
		if g, err := time.ParseDuration(sig.Fields["grace"]); err != nil || g > 8*time.Second || g < 2*time.Second {
			t.Errorf("signal to %s: grace %q, want 2 s to 8 s", step.container, sig.Fields["grace"])
		}
	}
	if sig := at["app "+string(cluster.SignalSent)]; sig.Time.Before(at["app "+string(cluster.PreStopFinished)].Time) {
		t.Error("app signalled before its preStop hook ended")
	}
	if end.Fields["phase"] != string(corev1.PodSucceeded) {
		t.Errorf("pod ended %v, want Succeeded", end.Fields)
	}
}

// TestSidecarGraceFloor: an app container that uses the whole grace
// leaves its sidecar the 2 s floor (C3, T7c), not nothing.
func TestSidecarGraceFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 3 s grace")
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := shellPod("floored", 3, "trap '' TERM; echo waiting; while :; do sleep 0.05; done")
	pod.Spec.InitContainers = []corev1.Container{sidecar("proxy", "trap 'exit 0' TERM; while :; do sleep 0.05; done")}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, k, "floored", "waiting")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	_, i := nextEvent(t, log, 0, cluster.Killed, "container app", of("app"))
	sig, _ := nextEvent(t, log, 0, cluster.SignalSent, "container proxy", of("proxy"))
	// The sidecar's wait ends with the grace, by its own deadline or by
	// the exit of the app, killed as the grace ends.
	if w, err := time.ParseDuration(sig.Fields["waited"]); err != nil || w < 2*time.Second {
		t.Errorf("sidecar's signal after a wait of %q, want the whole grace of 3 s", sig.Fields["waited"])
	}
	if sig.Fields["grace"] != "2s" || sig.Fields["after"] != "app" {
		t.Errorf("sidecar's signal %v, want grace 2s after app", sig.Fields)
	}
	waitFor(t, log, i, cluster.PodTerminated, "floored")
	for _, e := range log.Events() {
		if e.Kind == cluster.Killed && e.Container == "proxy" {
			t.Error("sidecar killed: it had 2 s to exit and exits at once")
		}
	}
}

// TestRegularContainersStopTogether: containers of containers[], a proxy
// beside its app among them, get no order: both are signalled before
// either has exited (C4).
func TestRegularContainersStopTogether(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	script := "trap 'sleep 1; exit 0' TERM; echo waiting; while :; do sleep 0.05; done"
	pod := shellPod("together", 5, script)
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "proxy", Image: "closingtime", Command: []string{"sh", "-c", script}})
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, k, "together", "waiting")
	nextEvent(t, log, 0, cluster.ContainerStarted, "container proxy", of("proxy"))
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodTerminated, "together")
	var signals []string
	for _, e := range log.Events()[:i] {
		switch e.Kind {
		case cluster.SignalSent:
			if e.Fields["after"] != "" {
				t.Errorf("signal to %s waited for %s", e.Container, e.Fields["after"])
			}
			signals = append(signals, e.Container)
		case cluster.ContainerExited:
			if len(signals) != 2 {
				t.Errorf("%s exited after signals to %v only, want both containers signalled first", e.Container, signals)
			}
		}
	}
}

// TestSidecarPodDeletedDuringStart: a pod deleted while its sidecar has
// not yet started (its startup probe fails) ends; nothing after the
// sidecar starts.
func TestSidecarPodDeletedDuringStart(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := initPod("unstarted", trapScript("TERM"))
	proxy := sidecar("proxy", trapScript("TERM"))
	proxy.StartupProbe = execProbe("false")
	proxy.StartupProbe.FailureThreshold = 100
	pod.Spec.InitContainers = []corev1.Container{proxy,
		{Name: "init-b", Image: "closingtime", Command: []string{"true"}}}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, log, 0, cluster.ProbeFailed, "container proxy", of("proxy"))
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodTerminated, "unstarted")
	for _, e := range log.Events()[:i] {
		if e.Kind == cluster.ContainerStarted && e.Container != "proxy" {
			t.Errorf("%s started though the sidecar before it never did", e.Container)
		}
	}
}
