package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// initPod returns shellPod's pod with init containers, each running its
// script with sh -c.
func initPod(name string, app string, inits ...string) *corev1.Pod {
	pod := shellPod(name, 1, app)
	for i, script := range inits {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
			Name: "init-" + string(rune('a'+i)), Image: "closingtime", Command: []string{"sh", "-c", script}})
	}
	return pod
}

// appStarted reports whether container app started in the first n events
// of log.
func appStarted(log *cluster.EventLog, n int) bool {
	return slices.ContainsFunc(log.Events()[:n], func(e cluster.Event) bool {
		return e.Kind == cluster.ContainerStarted && e.Container == "app"
	})
}

// TestInitContainersRunInOrder: init containers run one at a time, in
// order, each to its end, before the app container starts (C1); the pod
// is Initialized only then, and each start says which of the init
// containers it is.
func TestInitContainersRunInOrder(t *testing.T) {
	t.Parallel()
	var statuses atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) }})
	pod := initPod("ordered", "echo app >> order; "+trapScript("TERM"),
		"echo a >> order; sleep 0.3", "echo b >> order")
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	_, i := nextEvent(t, log, 0, cluster.ContainerStarted, "container app", func(e cluster.Event) bool { return e.Container == "app" })
	var got []string
	for _, e := range log.Events()[:i] {
		switch e.Kind {
		case cluster.ContainerStarted:
			got = append(got, "start "+e.Container+" "+e.Fields["init"])
		case cluster.ContainerExited:
			got = append(got, "exit "+e.Container+" "+e.Fields["code"]+" "+e.Fields["init"])
		}
	}
	want := []string{"start init-a 1/2", "exit init-a 0 1/2", "start init-b 2/2", "exit init-b 0 2/2", "start app "}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("containers: %q, want %q", got, want)
	}
	waitLogLine(t, k, "ordered", "waiting")
	order, err := os.ReadFile(filepath.Join(k.cfg.WorkingDir, "order"))
	if err != nil {
		t.Fatal(err)
	}
	if string(order) != "a\nb\napp\n" {
		t.Errorf("order file %q, want a, b, app", order)
	}
	// The status comes after the start: wait for the one that has it.
	deadline := time.Now().Add(waitLimit)
	for {
		st := statuses.Load()
		if st != nil && len(st.Status.ContainerStatuses) == 1 && st.Status.ContainerStatuses[0].State.Running != nil {
			if c := st.Status.Conditions[0]; c.Type != corev1.PodInitialized || c.Status != corev1.ConditionTrue {
				t.Errorf("condition %s %s, want Initialized True", c.Type, c.Status)
			}
			if n := len(st.Status.InitContainerStatuses); n != 2 {
				t.Fatalf("%d init container statuses, want 2", n)
			}
			for _, s := range st.Status.InitContainerStatuses {
				if term := s.State.Terminated; term == nil || term.Reason != "Completed" {
					t.Errorf("init container %s: state %+v, want terminated, Completed", s.Name, s.State)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status with app running within %s: %+v", waitLimit, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestInitContainerRestarts: an init container that fails is restarted
// after its back-off, the pod Pending and not Initialized meanwhile, and
// the app container starts only once it succeeded (C1).
func TestInitContainerRestarts(t *testing.T) {
	t.Parallel()
	var statuses atomic.Pointer[corev1.Pod]
	k, log := newKubelet(t, KubeletConfig{StatusUpdated: func(p *corev1.Pod) { statuses.Store(p) },
		CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: 300 * time.Millisecond, Max: time.Second}})
	// Fails twice: the first restart is at once, the second after a
	// back-off.
	pod := initPod("retried", trapScript("TERM"), `n=$(cat tries 2>/dev/null || echo 0); echo $((n+1)) > tries; [ "$n" -ge 2 ]`)
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	onInit := func(e cluster.Event) bool { return e.Container == "init-a" }
	exit, i := nextEvent(t, log, 0, cluster.ContainerExited, "container init-a", onInit)
	if exit.Fields["code"] != "1" {
		t.Fatalf("first exit %v, want code 1", exit.Fields)
	}
	_, i = nextEvent(t, log, i, cluster.BackOff, "container init-a", onInit)
	if st := statuses.Load(); st == nil || st.Status.Phase != corev1.PodPending || st.Status.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("status in back-off: %+v, want Pending, not Initialized", st)
	}
	start, i := nextEvent(t, log, i, cluster.ContainerStarted, "container init-a", onInit)
	if start.Fields["restart"] != "2" {
		t.Errorf("start after the back-off %v, want restart 2", start.Fields)
	}
	nextEvent(t, log, i, cluster.ContainerStarted, "container app", func(e cluster.Event) bool { return e.Container == "app" })
	if appStarted(log, i) {
		t.Error("app started before its init container succeeded")
	}
}

// TestInitContainerFailsPod: under restartPolicy Never, an init container
// that fails fails the pod, and no app container starts (C1).
func TestInitContainerFailsPod(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := initPod("failed", trapScript("TERM"), "exit 3", "true")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	e, i := waitFor(t, log, 0, cluster.PodTerminated, "failed")
	if e.Fields["phase"] != string(corev1.PodFailed) {
		t.Errorf("pod ended %v, want phase Failed", e.Fields)
	}
	if appStarted(log, i) || slices.ContainsFunc(log.Events(), of("init-b")) {
		t.Error("app or init-b started though init-a failed")
	}
}

// TestInitContainerTerminated: a pod deleted while an init container runs
// stops it within the grace, and its app container never starts.
func TestInitContainerTerminated(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := initPod("deleted", trapScript("TERM"), trapScript("TERM"), "true")
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, log, 0, cluster.ContainerStarted, "container init-a", func(e cluster.Event) bool { return e.Container == "init-a" })
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	_, i := waitFor(t, log, 0, cluster.PodTerminated, "deleted")
	if appStarted(log, i) || slices.ContainsFunc(log.Events(), of("init-b")) {
		t.Error("app or init-b started in a pod deleted during init-a")
	}
}

// TestKubeletRefusesWhatItDoesNotRun: a postStart hook, what the API
// refuses in an init container, a shared PID namespace where the kubelet
// has no pause process, the node's network, volumes, variables from
// ConfigMaps and Secrets, and named ports a container lacks
// are refused at admission with the field named, not run as something
// else.
func TestKubeletRefusesWhatItDoesNotRun(t *testing.T) {
	t.Parallel()
	k, _ := newKubelet(t, KubeletConfig{})
	for _, tt := range []struct {
		change func(*corev1.Pod)
		field  string
	}{
		{func(p *corev1.Pod) {
			p.Spec.InitContainers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyOnFailure)
		}, "spec.initContainers[0].restartPolicy: init container init-a: restartPolicy OnFailure"},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, "spec.containers[0].lifecycle.postStart: "},
		{func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }, "spec.shareProcessNamespace: "},
		{func(p *corev1.Pod) { p.Spec.InitContainers[0].ReadinessProbe = httpProbe("/", 1) }, "spec.initContainers[0]: init container init-a: only a sidecar (restartPolicy Always) may have probes"},
		{func(p *corev1.Pod) { p.Spec.InitContainers[0].Command = nil }, "spec.initContainers[0]: container init-a has no command"},
		{func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "spec.hostNetwork: "},
		{func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, "spec.volumes[0]: volume conf: "},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/app"}}
		}, "spec.containers[0].volumeMounts[0]: "},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
		}, "spec.containers[0].envFrom: "},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
		}, "spec.containers[0].env[1].valueFrom: container app: env KEY: "},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}}
		}, "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: container app: env IP: fieldRef status.hostIP is not filled"},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("admin")}}}
		}, `spec.containers[0].livenessProbe.tcpSocket.port: container app has no port named "admin"`},
		{func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("admin")}}}
		}, "spec.containers[0].lifecycle.preStop.httpGet.port: "},
	} {
		pod := initPod("refused", "true", "true")
		// What a ServiceAccount admission adds every pod passes.
		pod.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-x1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		tt.change(pod)
		err := k.SyncPod(pod)
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("SyncPod() error = %v, want one with %q", err, tt.field)
		}
	}
}
