package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestPodNotices feeds events as the local cluster records them to a
// diagnosis, each case from the start, and checks every notice it gives,
// in order, and its explanation at the end.
func TestPodNotices(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ev := func(s float64, kind cluster.EventKind, pod, container string, fields map[string]string) cluster.Event {
		return cluster.Event{Time: at(s), Kind: kind, Namespace: "default", Pod: pod, Container: container, Node: "node-1", Fields: fields}
	}
	started := func(s float64, pod string, restart string) cluster.Event {
		return ev(s, cluster.ContainerStarted, pod, "web", map[string]string{"pid": "4242", "restart": restart, "pid_namespace": "none"})
	}
	exited := func(s float64, pod, code, reason string) cluster.Event {
		return ev(s, cluster.ContainerExited, pod, "web", map[string]string{"code": code, "reason": reason})
	}
	// probe is a failed run of a probe, the latest of failures in a row.
	probe := func(s float64, pod, kind, failures string) cluster.Event {
		return ev(s, cluster.ProbeFailed, pod, "web", map[string]string{"probe": kind, "failures": failures, "output": "Get \"http://127.1.1.2:8080/ready\": dial tcp 127.1.1.2:8080: connect: connection refused"})
	}
	// logs are the lines of container web of each pod, as the kubelet
	// keeps them: pod web-a's instance 0 wrote a JSON line and then the
	// bind error; its instance 1, one line to standard output only.
	logs := map[string][]cluster.LogLine{
		"web-a": {
			{Stream: "stdout", Restart: 0, Text: `{"event":"started","listen":"0.0.0.0:8080"}`},
			{Stream: "stderr", Restart: 0, Text: "closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use"},
			{Stream: "stdout", Restart: 1, Text: "line 1"},
			{Stream: "stdout", Restart: 1, Text: "line 2"},
			{Stream: "stdout", Restart: 1, Text: "line 3 " + strings.Repeat("é", 150)},
		},
		"web-b": {
			{Stream: "stderr", Restart: 0, Text: "closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use"},
		},
		// Python and Java capitalise the error's text.
		"web-py": {
			{Stream: "stderr", Restart: 0, Text: "OSError: [Errno 98] Address already in use"},
		},
		"web-java": {
			{Stream: "stderr", Restart: 0, Text: "java.net.BindException: Address already in use"},
		},
	}
	refused := `Get "http://127.1.1.2:8080/ready": dial tcp 127.1.1.2:8080: connect: connection refused`
	tests := []struct {
		name   string
		events []cluster.Event
		want   []string
		// why is the explanation at the end; the last of want unless
		// given.
		why string
	}{
		{
			name: "start failed",
			events: []cluster.Event{
				ev(0, cluster.ContainerStartFailed, "web-a", "web", map[string]string{"error": `fork/exec /no/such/app: no such file or directory`}),
				ev(0, cluster.ContainerStartFailed, "web-b", "", map[string]string{"error": `env: pod has no field "spec.nope"`}),
			},
			want: []string{
				"pod web-a: container web failed to start: fork/exec /no/such/app: no such file or directory",
				`pod web-b failed to start: env: pod has no field "spec.nope"`,
			},
		},
		{
			name: "address in use, hinted once",
			events: []cluster.Event{
				started(0, "web-a", "0"), started(0, "web-b", "0"),
				exited(0.1, "web-a", "1", "Error"),
				ev(0.1, cluster.PodUnready, "web-a", "", nil),
				ev(0.1, cluster.BackOff, "web-a", "web", map[string]string{"delay": "9.999941333s"}),
				exited(0.2, "web-b", "1", "Error"),
			},
			want: []string{
				"pod web-a: container web exited with code 1: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use",
				addressInUseHint,
				"pod web-a: container web restarts in 10s (CrashLoopBackOff)",
				"pod web-b: container web exited with code 1: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use",
			},
			why: "pod web-b: container web exited with code 1: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use; " + addressInUseHint,
		},
		{
			name: "address in use on the loopback range",
			events: []cluster.Event{
				ev(0, cluster.PodStarted, "web-a", "", map[string]string{"network": "loopback"}), started(0, "web-a", "0"),
				exited(0.1, "web-a", "1", "Error"),
			},
			want: []string{
				"pod web-a: container web exited with code 1: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use",
				loopbackAddressInUseHint,
			},
			why: "pod web-a: container web exited with code 1: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use; " + loopbackAddressInUseHint,
		},
		{
			name: "address in use, capitalised as Python and Java write it",
			events: []cluster.Event{
				started(0, "web-java", "0"), exited(0.1, "web-java", "1", "Error"),
				started(0.2, "web-py", "0"), exited(0.3, "web-py", "1", "Error"),
			},
			want: []string{
				"pod web-java: container web exited with code 1: java.net.BindException: Address already in use",
				addressInUseHint,
				"pod web-py: container web exited with code 1: OSError: [Errno 98] Address already in use",
			},
			why: "pod web-py: container web exited with code 1: OSError: [Errno 98] Address already in use; " + addressInUseHint,
		},
		{
			name: "the latest instance's last two lines, clipped",
			events: []cluster.Event{
				started(0, "web-a", "0"), exited(1, "web-a", "137", "OOMKilled"),
				started(11, "web-a", "1"), exited(12, "web-a", "2", "Error"),
				started(30, "web-c", "0"), exited(31, "web-c", "0", "Completed"),
				ev(31, cluster.BackOff, "web-c", "web", nil),
			},
			want: []string{
				"pod web-a: container web exited with code 137 (OOMKilled): closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use",
				addressInUseHint,
				"pod web-a: container web exited with code 2: line 2 | line 3 " + strings.Repeat("é", 96) + "…",
				"pod web-c: container web exited with code 0",
				"pod web-c: container web waits to restart (CrashLoopBackOff)",
			},
			why: "pod web-c: container web exited with code 0; " + addressInUseHint,
		},
		{
			name: "a probe failure names its target",
			events: []cluster.Event{
				ev(0, cluster.ProbeFailed, "web-a", "web", map[string]string{"probe": "readiness", "target": "GET :8080/healthz", "failures": "3", "output": "HTTP 404"}),
			},
			want: []string{"pod web-a: container web: readiness probe GET :8080/healthz failed: HTTP 404"},
			why:  "pod web-a: container web: readiness probe GET :8080/healthz failed: HTTP 404",
		},
		{
			name: "probe failures without a count, as a real cluster's Events give them, from 5 s after the first seen",
			events: []cluster.Event{
				ev(0, cluster.ProbeFailed, "web-a", "web", map[string]string{"probe": "readiness", "output": "HTTP 503"}),
				ev(2, cluster.ProbeFailed, "web-a", "web", map[string]string{"probe": "readiness", "output": "HTTP 503"}),
				ev(6, cluster.ProbeFailed, "web-a", "web", map[string]string{"probe": "readiness", "output": "HTTP 503"}),
			},
			want: []string{"pod web-a: container web: readiness probe failed: HTTP 503"},
			why:  "pod web-a: container web: readiness probe failed: HTTP 503",
		},
		{
			name: "probe failures, once failing for 5 s in a row, at most one a pod and probe every 10 s",
			events: []cluster.Event{
				probe(0, "web-a", "readiness", "1"),
				probe(1, "web-a", "readiness", "2"), // a server still starting
				probe(3, "web-b", "readiness", "1"),
				probe(5, "web-a", "readiness", "6"),
				probe(5, "web-a", "liveness", "2"), // its first failure unseen
				ev(5, cluster.ProbeResult, "web-a", "web", map[string]string{"probe": "liveness", "result": "failure", "output": "HTTP 500"}),
				probe(8, "web-b", "readiness", "2"),
				probe(9, "web-a", "readiness", "1"), // a new run of failures
				probe(10, "web-a", "readiness", "2"),
				probe(14, "web-a", "readiness", "6"), // 5 s, but within 10 s of the last notice
				probe(20, "web-a", "readiness", "12"),
				probe(30, "web-a", "readiness", "1"),
			},
			want: []string{
				"pod web-a: container web: readiness probe failed: " + refused,
				"pod web-a: container web: liveness probe failed: " + refused,
				"pod web-b: container web: readiness probe failed: " + refused,
				"pod web-a: container web: readiness probe failed: " + refused,
			},
		},
		{
			name: "an exit explains more than a later probe failure",
			events: []cluster.Event{
				started(0, "web-b", "0"), exited(0.1, "web-b", "3", "Error"),
				probe(0, "web-c", "readiness", "1"), probe(5, "web-c", "readiness", "6"),
			},
			want: []string{
				"pod web-b: container web exited with code 3: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use",
				addressInUseHint,
				"pod web-c: container web: readiness probe failed: " + refused,
			},
			why: "pod web-b: container web exited with code 3: closingtime: serve: listen tcp 0.0.0.0:8080: bind: address already in use; " + addressInUseHint,
		},
		{
			name: "killed by its liveness probe",
			events: []cluster.Event{
				started(0, "web-d", "0"),
				probe(2, "web-d", "liveness", "1"),
				probe(3, "web-d", "liveness", "2"),
				ev(3, cluster.ProbeResult, "web-d", "web", map[string]string{"probe": "liveness", "result": "failure", "output": "HTTP 500"}),
				ev(3, cluster.LivenessKill, "web-d", "web", map[string]string{"probe": "liveness"}),
				ev(3, cluster.SignalSent, "web-d", "web", map[string]string{"signal": "SIGTERM", "grace": "30s"}),
				exited(3.2, "web-d", "143", "Error"),
				started(3.3, "web-d", "1"), exited(4, "web-d", "1", "Error"),
			},
			// The kill comes before the failures are news: the exit tells.
			want: []string{
				"pod web-d: container web exited with code 143, killed after its liveness probe failed",
				"pod web-d: container web exited with code 1",
			},
		},
		{
			name: "a terminating pod's exit and probes are expected",
			events: []cluster.Event{
				started(0, "web-a", "0"),
				ev(5, cluster.PodTerminating, "web-a", "", map[string]string{"grace": "30s"}),
				probe(6, "web-a", "readiness", "3"),
				exited(7, "web-a", "143", "Error"),
				ev(8, cluster.PodDeleted, "web-b", "", map[string]string{"grace": "0s"}),
				ev(8, cluster.BackOff, "web-b", "web", map[string]string{"delay": "10s"}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newPodNotices(func(namespace, pod, container string, restart int32) []cluster.LogLine {
				if namespace != "default" || container != "web" {
					t.Errorf("logs of %s/%s container %s, want default's web", namespace, pod, container)
				}
				return slices.DeleteFunc(slices.Clone(logs[pod]), func(l cluster.LogLine) bool { return l.Restart != restart })
			})
			var got []string
			for _, e := range tt.events {
				got = append(got, d.notices(e)...)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("notices:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			why := tt.why
			if why == "" && len(tt.want) > 0 {
				why = tt.want[len(tt.want)-1]
			}
			if got := d.explanation(); got != why {
				t.Errorf("explanation %q, want %q", got, why)
			}
		})
	}
}

// TestRunnerNotices runs, on the local cluster, Deployments whose
// containers exit, whose pods never become ready, or whose Service never
// answers within the traffic's response timeout, each within a short
// limit: the runner's progress gets a notice that names the container and
// the cause before the run fails, a readiness probe that never passes
// gives one within a few of its periods, a deploy that waits past
// noticeInterval says how many pods are ready and how the Service last
// failed to answer, and the run's error, a *DeployError, quotes the
// cause. A container's exit ends the deploy at once, well within the
// limit.
func TestRunnerNotices(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pods that never become ready, for up to 12 s")
	}
	t.Parallel()
	tests := []struct {
		name string
		args []string
		// sidecar, if not nil, are the args of a second container of
		// the pod, which starts from the same image.
		sidecar []string
		// noPodIP leaves POD_IP out of the container's env.
		noPodIP bool
		traffic Traffic
		limit   time.Duration
		// want are strings that notices must have, each in one notice;
		// early, one that a notice has before the first that says how
		// many pods are ready, after noticeInterval.
		want  []string
		early string
		// why is what the error must quote; exits, that a container's
		// exit ended the deploy.
		why   string
		exits bool
	}{
		{name: "unknown flag", args: []string{"serve", "--no-such-flag"}, limit: noticeInterval + 2*time.Second,
			want: []string{"container app exited with code 2"},
			// The error quotes the exit with its log.
			why:   "container app exited with code 2: closingtime: serve: unknown flag: --no-such-flag",
			exits: true},
		// Two containers of a pod, which share its network, bind one
		// port; the sidecar comes second.
		{name: "address in use", args: []string{"serve", "--listen", "0.0.0.0:8080"},
			sidecar: []string{"serve", "--listen", "0.0.0.0:8080", "--startup-delay", "500ms"}, limit: noticeInterval + 2*time.Second,
			want:  []string{"container sidecar exited with code 4"},
			why:   "bind: address already in use; " + addressInUseHint + ")",
			exits: true},
		// The server listens on a port of its own, not the probe's.
		{name: "probe never passes", args: []string{"serve", "--listen", "$(POD_IP):8081"}, limit: noticeInterval + 2*time.Second,
			want:  []string{"readiness probe GET :8080/ready failed", "s: 0 of 2 pods ready, 2 running but not ready (readiness or startup probe not passed); gives up after 12s"},
			early: ":8080: connect: connection refused",
			why:   "deploy: its pods never all became ready: rollout status of deployment default/app: context deadline exceeded (from the cluster: pod app-"},
		// The app gets "$(POD_IP):8080": the notice says so before the
		// pods start.
		{name: "undefined POD_IP", args: []string{"serve", "--listen", "$(POD_IP):8080"}, noPodIP: true, limit: noticeInterval + 2*time.Second,
			want: []string{"Deployment app: container app: args[2] refers to $(POD_IP), which is not defined in env: it stays as written, and the process gets the text \"$(POD_IP)\"; " +
				"add the env entry {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}", "container app exited with code 4"},
			why:   "lookup $(POD_IP)",
			exits: true},
		// Every pod ready, /work slower than the run's response timeout,
		// though well within the default: the Service never answers.
		{name: "slow answers", args: []string{"serve", "--work", "1s"}, traffic: Traffic{Path: "/work", ResponseTimeout: 200 * time.Millisecond}, limit: noticeInterval + 2*time.Second,
			want: []string{"s: 2 of 2 pods ready, waiting for the Service to answer 10 requests in a row; its last failure: no complete response within 200ms of connecting, the response timeout; gives up after 12s"},
			why:  "wait for the service to answer: wait for http://app.default:80/work to answer 10 requests in a row: context deadline exceeded (last failure: no complete response within 200ms of connecting, the response timeout)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := noticeScenario(t, tt.args, tt.limit)
			s.Traffic = tt.traffic
			d, err := s.Deployment()
			if err != nil {
				t.Fatal(err)
			}
			if tt.noPodIP {
				d.Spec.Template.Spec.Containers[0].Env = nil
			}
			if tt.sidecar != nil {
				sidecar := *d.Spec.Template.Spec.Containers[0].DeepCopy()
				sidecar.Name, sidecar.Args, sidecar.ReadinessProbe = "sidecar", tt.sidecar, nil
				d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, sidecar)
			}
			var mu sync.Mutex
			var notices []string
			failed := false
			r := newRunner(t)
			r.cfg.Progress = func(p Progress) {
				mu.Lock()
				defer mu.Unlock()
				if failed {
					t.Errorf("progress after the run ended: %+v", p)
				}
				if p.Notice != "" {
					if p.Scenario != "inline" || p.Phase != PhaseDeploy {
						t.Errorf("notice %+v, want one of scenario inline in its deploy", p)
					}
					notices = append(notices, p.Notice)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err = r.Run(ctx, s)
			mu.Lock()
			failed = true
			defer mu.Unlock()
			t.Logf("failed after %v: %v\nnotices:\n%s", time.Since(start), err, strings.Join(notices, "\n"))
			var derr *DeployError
			if !errors.As(err, &derr) || !strings.Contains(err.Error(), tt.why) {
				t.Errorf("run error %v, want a *DeployError that quotes %q", err, tt.why)
			}
			if stopped := time.Since(start) < noticeInterval; tt.exits && (!stopped || !strings.Contains(err.Error(), "before the rollout-restart, which was not done: a workload that does not run is not measured")) {
				t.Errorf("run error after %v: %v, want one at the first exit, before the deploy waited %v", time.Since(start), err, noticeInterval)
			}
			for _, w := range tt.want {
				if !slices.ContainsFunc(notices, func(n string) bool { return strings.Contains(n, w) }) {
					t.Errorf("no notice has %q", w)
				}
			}
			if tt.early != "" {
				waited := slices.IndexFunc(notices, func(n string) bool { return strings.HasPrefix(n, "deploying for ") })
				if i := slices.IndexFunc(notices, func(n string) bool { return strings.Contains(n, tt.early) }); i < 0 || waited >= 0 && i > waited {
					t.Errorf("no notice has %q before the first that says how many pods are ready", tt.early)
				}
			}
		})
	}
}

// noticeScenario returns the scenario of testdata/valid-inline.yaml with
// two pods that run closingtime with args, with POD_IP in their
// environment (where serve listens unless args say otherwise), a readiness
// probe on port 8080, the Service's port on it, and a limit of limit.
func noticeScenario(t *testing.T, args []string, limit time.Duration) *Scenario {
	t.Helper()
	s, err := ReadFile(filepath.Join("testdata", "valid-inline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To(int32(2))
	c := &d.Spec.Template.Spec.Containers[0]
	c.Args = args
	c.Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}}
	svc, err := s.Service()
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	s.Limits.Run = limit
	return s
}

// TestWaitingNotice: a long deploy's notice says what it still waits for.
func TestWaitingNotice(t *testing.T) {
	const timeout = "no complete response within 2s of connecting, the response timeout"
	for _, tt := range []struct {
		ready, running int32
		last           string
		want           string
	}{
		{1, 0, "", "deploying for 10s: 1 of 3 pods ready; gives up after 5m0s"},
		{1, 2, "", "deploying for 10s: 1 of 3 pods ready, 2 running but not ready (readiness or startup probe not passed); gives up after 5m0s"},
		{3, 0, "", "deploying for 10s: 3 of 3 pods ready, waiting for the Deployment to be available and the Service to answer; gives up after 5m0s"},
		{3, 0, timeout, "deploying for 10s: 3 of 3 pods ready, waiting for the Service to answer 10 requests in a row; its last failure: " + timeout + "; gives up after 5m0s"},
		{2, 0, "status 503 Service Unavailable", "deploying for 10s: 2 of 3 pods ready; its last failure: status 503 Service Unavailable; gives up after 5m0s"},
	} {
		if got := waitingNotice(10*time.Second, tt.ready, 3, tt.running, tt.last, 5*time.Minute); got != tt.want {
			t.Errorf("waitingNotice(%d ready, %d running, last %q) = %q, want %q", tt.ready, tt.running, tt.last, got, tt.want)
		}
	}
}

// TestLastAnswerAddr: a failure whose connect names its address gives it,
// for the waiting notice to name the pod behind it.
func TestLastAnswerAddr(t *testing.T) {
	var l lastAnswer
	if _, ok := l.addr(); ok {
		t.Error("an address without a failure")
	}
	l.set(fmt.Errorf("wait: %w", &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 244, 1, 4), Port: 8080}, Err: syscall.ECONNREFUSED}))
	if a, ok := l.addr(); !ok || a.String() != "10.244.1.4:8080" {
		t.Errorf("addr = %v, %v; want 10.244.1.4:8080", a, ok)
	}
}
