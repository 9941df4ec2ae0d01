package local

import (
	"context"
	"fmt"
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

// TestMain builds the closingtime command, or, run again by
// TestClusterLeavesNothing, is the process that runs its cluster.
func TestMain(m *testing.M) {
	if path := os.Getenv(clusterProcessEnv); path != "" {
		os.Exit(clusterProcess(path))
	}
	os.Exit(testbinary.Main(m, &binary))
}

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
// with the pod's own grace (T1, T2).
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
	return nextEvent(t, log, from, kind, "pod "+pod, func(e cluster.Event) bool { return e.Pod == pod })
}

// nextEvent returns the first event of kind at or after index from that
// match accepts, and the index after it; it fails after waitLimit, naming
// kind and what, the event it waited for.
func nextEvent(tb testing.TB, log *cluster.EventLog, from int, kind cluster.EventKind, what string, match func(cluster.Event) bool) (cluster.Event, int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// Bounded by ctx.
	for i := from; ; i++ {
		e, err := log.Next(ctx, i)
		if err != nil {
			tb.Fatalf("no %s event of %s within %s; events: %s", kind, what, waitLimit, describe(log.Events()))
		}
		if e.Kind == kind && match(e) {
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
		fmt.Fprintf(&b, "\n  +%6.3fs %s %s %s %v", e.Time.Sub(start).Seconds(), e.Pod, e.Container, e.Kind, e.Fields)
		if e.Kind == cluster.EndpointsPublished || e.Kind == cluster.EndpointsApplied {
			fmt.Fprintf(&b, " %s %s %s", e.Node, e.Object, e.Endpoints)
		}
	}
	return b.String()
}

// TestKubeletPodCIDR: a kubelet without a pod range takes DefaultPodCIDR,
// and one given a range with host bits takes its network.
func TestKubeletPodCIDR(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cidr netip.Prefix
		want string
	}{
		{name: "default", want: DefaultPodCIDR},
		{name: "masked", cidr: netip.MustParsePrefix("127.80.3.7/24"), want: "127.80.3.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := NewKubelet(KubeletConfig{PodCIDR: tt.cidr})
			if err != nil {
				t.Fatal(err)
			}
			if got := k.PodCIDR().String(); got != tt.want {
				t.Errorf("PodCIDR() = %s, want %s", got, tt.want)
			}
			if err := k.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
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

// shellPod returns a pod whose container "app" runs script with sh -c, as
// its first process.
func shellPod(name string, grace int64, script string) *corev1.Pod {
	pod := servePod(name, grace)
	pod.Spec.Containers[0].Command = []string{"sh", "-c", script}
	pod.Spec.Containers[0].Args = nil
	return pod
}

// trapScript is a shell that, on each of signals, says so and exits 0,
// and otherwise waits.
func trapScript(signals ...string) string {
	var b strings.Builder
	for _, s := range signals {
		fmt.Fprintf(&b, "trap 'echo got %[1]s; exit 0' %[1]s; ", s)
	}
	b.WriteString("echo waiting; while :; do sleep 0.05; done")
	return b.String()
}

// kinds returns the kinds of pod's events from index from, in order.
func kinds(log *cluster.EventLog, from int, pod string) []cluster.EventKind {
	var out []cluster.EventKind
	for _, e := range log.Events()[from:] {
		if e.Pod == pod {
			out = append(out, e.Kind)
		}
	}
	return out
}

// waitLogLine waits until container app of pod has written a line that
// holds text.
func waitLogLine(t *testing.T, k *Kubelet, pod, text string) {
	t.Helper()
	waitContainerLine(t, k, pod, "app", text)
}

// waitContainerLine waits until container of pod has written a line that
// holds text.
func waitContainerLine(t *testing.T, k *Kubelet, pod, container, text string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	// One look per round; bounded by waitLimit.
	for time.Now().Before(deadline) {
		lines, _ := k.Logs("default", pod, container)
		for _, l := range lines {
			if strings.Contains(l.Text, text) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	lines, _ := k.Logs("default", pod, container)
	t.Fatalf("container %s of pod %s never wrote %q; it wrote %v", container, pod, text, lines)
}

// waitStatus waits until the latest status in statuses satisfies ok and
// returns it.
func waitStatus(t *testing.T, statuses *atomic.Pointer[corev1.Pod], ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	// One look per round; bounded by waitLimit.
	for time.Now().Before(deadline) {
		if p := statuses.Load(); p != nil && ok(p) {
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no such status within %s; the latest: %+v", waitLimit, statuses.Load())
	return nil
}

// TestKubeletPIDNamespaceFallback runs PID 1's rule through each level of
// isolation the kubelet falls back to (I1, I2). In a user namespace
// with a PID namespace in it, where an unprivileged kubelet lands, a
// server without a SIGTERM handler is PID 1: SIGTERM is ignored and
// SIGKILL ends it, 137. With no namespace it is not PID 1, and SIGTERM's
// default action kills it, 143.
func TestKubeletPIDNamespaceFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a grace period")
	}
	t.Parallel()
	tests := []struct {
		mode     PIDNamespaceMode
		wantNS   string
		wantCode string
	}{
		{mode: PIDNamespaceUser, wantNS: "user+pid", wantCode: "137"},
		{mode: PIDNamespaceNone, wantNS: "none", wantCode: "143"},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			k, log := newKubelet(t, KubeletConfig{PIDNamespace: tt.mode})
			pod := servePod("iso", 2, "--shutdown=ignore")
			pod.Spec.Containers[0].ReadinessProbe = httpProbe("/ready", 3)
			if err := k.SyncPod(pod); err != nil {
				t.Fatal(err)
			}
			started, i := waitFor(t, log, 0, cluster.ContainerStarted, "iso")
			if got := started.Fields["pid_namespace"]; got != tt.wantNS {
				if tt.mode == PIDNamespaceUser && got == "none" {
					t.Skipf("this system refuses user namespaces: %s", started.Fields["pid_namespace_reason"])
				}
				t.Fatalf("isolation %s, want %s", got, tt.wantNS)
			}
			_, i = waitFor(t, log, i, cluster.PodReady, "iso")
			if err := k.SyncPod(deleting(pod)); err != nil {
				t.Fatal(err)
			}
			exited, _ := waitFor(t, log, i, cluster.ContainerExited, "iso")
			if exited.Fields["code"] != tt.wantCode {
				t.Errorf("exit code %s, want %s; events: %s", exited.Fields["code"], tt.wantCode, describe(log.Events()))
			}
		})
	}
	if _, err := NewKubelet(KubeletConfig{PIDNamespace: "host"}); err == nil {
		t.Errorf("NewKubelet() with an unknown PID namespace mode = nil error, want one")
	}
}
