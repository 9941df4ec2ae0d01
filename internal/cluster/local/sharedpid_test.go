package local

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestSharedPIDNamespace: the containers of a pod with
// shareProcessNamespace run in one PID namespace whose PID 1 is the pause
// process, so none of them is PID 1 (I6): a server that installs no
// SIGTERM handler, which as PID 1 of its own namespace would wait for
// SIGKILL (TestKubeletIgnoredSIGTERM), dies of SIGTERM at once; a
// second container's shell sees the first's process; and the first's
// exec preStop hook signals the second's by its PID in the namespace.
func TestSharedPIDNamespace(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{PauseCommand: []string{binary, "pause"}})
	pod := servePod("shared", 3, "--shutdown=ignore")
	pod.Spec.ShareProcessNamespace = ptr.To(true)
	pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
	pidFile := filepath.Join(t.TempDir(), "peer.pid")
	// The shell finds the server among the namespace's processes: kill -0
	// of its PID, which only the namespace that holds it knows.
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "peer", Image: "closingtime",
		// $$$$ is the shell's $$ once the kubelet has expanded the command.
		Command: []string{"sh", "-c", `echo "peer pid $$$$"; echo $$$$ > ` + pidFile + `; trap 'echo got USR1' USR1; ` +
			`while :; do for p in 2 3 4 5 6; do kill -0 $p 2>/dev/null && [ $p != $$$$ ] && echo "sees $p"; done; sleep 0.2; done`},
		// Its own SIGTERM waits, so that the app's hook finds it.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}})
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "kill -USR1 `cat " + pidFile + "`"}}}}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	started, i := waitFor(t, log, 0, cluster.ContainerStarted, "shared")
	if ns := started.Fields["pid_namespace"]; ns != "pod" {
		t.Skipf("no PID namespace of the pod's on this system (%s: %s)", ns, started.Fields["pid_namespace_reason"])
	}
	_, i = waitFor(t, log, i, cluster.PodReady, "shared")
	waitContainerLine(t, k, "shared", "peer", "sees ")
	lines, _ := k.Logs("default", "shared", "peer")
	if pid, found := strings.CutPrefix(lines[0].Text, "peer pid "); !found || pid == "1" || strings.Trim(pid, "0123456789") != "" {
		t.Errorf("the peer's first line %v, want its PID, not 1", lines)
	}

	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	signal, i := nextEvent(t, log, i, cluster.SignalSent, "the app's SIGTERM", func(e cluster.Event) bool { return e.Container == "app" })
	exited, i := nextEvent(t, log, i, cluster.ContainerExited, "the app's exit", func(e cluster.Event) bool { return e.Container == "app" })
	waitFor(t, log, i, cluster.PodTerminated, "shared")
	waitContainerLine(t, k, "shared", "peer", "got USR1")
	if code := exited.Fields["code"]; code != "143" {
		t.Errorf("the app, which handles no SIGTERM, exited %s, want 143: killed by the signal, as a process that is not PID 1", code)
	}
	if d := exited.Time.Sub(signal.Time); d > 2*time.Second {
		t.Errorf("the app exited %v after SIGTERM, want at once, before the 3 s grace ends", d)
	}
	for _, e := range log.Events() {
		if e.Kind == cluster.Killed && e.Pod == "shared" {
			t.Errorf("%s was SIGKILLed: every container ends by SIGTERM", e.Container)
		}
	}
}
