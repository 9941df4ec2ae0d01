package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// requireSupervisordEnv names the variable that turns a missing
// supervisord into a failure instead of a skip; CI sets it to 1.
const requireSupervisordEnv = "CLOSINGTIME_REQUIRE_SUPERVISORD"

// supervisordConf runs two programs that take their time to stop: envoy
// at priority 1 and grpc at 999, so that supervisord stops grpc first.
const supervisordConf = `[supervisord]
nodaemon=true
logfile=/dev/null
logfile_maxbytes=0
pidfile=%(here)s/%(ENV_POD_NAME)s.pid

[program:envoy]
command=sh -c "trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.05; done"
priority=1
stopwaitsecs=10

[program:grpc]
command=sh -c "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.05; done"
priority=999
stopwaitsecs=10
`

// supervisordLine matches a line of supervisord's log: its local time, the
// level and the message.
var supervisordLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (.*)$`)

// TestSupervisordStopsInPriorityOrder runs real supervisord as a pod's
// container: deleted, the pod's SIGTERM reaches supervisord, its first
// process, which stops grpc (priority 999) and, once grpc has stopped,
// envoy (priority 1), each by its own signal handler within its
// stopwaitsecs, and exits 0 within the grace period.
func TestSupervisordStopsInPriorityOrder(t *testing.T) {
	path, err := exec.LookPath("supervisord")
	if err != nil && os.Getenv(requireSupervisordEnv) == "1" {
		t.Fatalf("no supervisord in PATH, and %s=1", requireSupervisordEnv)
	}
	if err != nil {
		t.Skipf("no supervisord in PATH (apt-get install supervisor; set %s=1 to fail instead)", requireSupervisordEnv)
	}
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	conf := filepath.Join(k.cfg.WorkingDir, "supervisord.conf")
	if err := os.WriteFile(conf, []byte(supervisordConf), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := shellPod("supervised", 30, "")
	c := &pod.Spec.Containers[0]
	c.Command = []string{path, "-n", "-c", conf}
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, k, "supervised", "success: grpc entered RUNNING state")
	if err := k.SyncPod(deleting(pod)); err != nil {
		t.Fatal(err)
	}
	signal, i := waitFor(t, log, 0, cluster.SignalSent, "supervised")
	exit, _ := waitFor(t, log, i, cluster.ContainerExited, "supervised")
	if exit.Fields["code"] != "0" {
		t.Errorf("supervisord exited %v, want 0 once its programs stopped", exit.Fields)
	}
	lines, err := k.Logs("default", "supervised", "app")
	if err != nil {
		t.Fatal(err)
	}
	stopped := map[string]time.Time{}
	var order []string
	for _, l := range lines {
		m := supervisordLine.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05,000", m[1], time.Local)
		if err != nil {
			t.Fatalf("supervisord's time %q: %v", m[1], err)
		}
		if name, ok := strings.CutPrefix(m[2], "stopped: "); ok {
			name, _, _ = strings.Cut(name, " ")
			stopped[name] = at
			order = append(order, m[2])
		}
	}
	if len(order) != 2 || !strings.HasPrefix(order[0], "stopped: grpc (exit status 0)") || !strings.HasPrefix(order[1], "stopped: envoy (exit status 0)") {
		t.Fatalf("supervisord stopped %q, want grpc then envoy, each by its handler (exit status 0); log: %v", order, lines)
	}
	// grpc's handler takes 1 s and envoy's 0.5 s: envoy stops half a
	// second or more after grpc, as it got its signal only then. The
	// log's milliseconds are supervisord's clock, the signal's the
	// kubelet's: the same machine's.
	if d := stopped["envoy"].Sub(stopped["grpc"]); d < 400*time.Millisecond {
		t.Errorf("envoy stopped %v after grpc, want its 0.5 s handler to start after grpc stopped", d)
	}
	if d := stopped["grpc"].Sub(signal.Time); d < 900*time.Millisecond || d > 8*time.Second {
		t.Errorf("grpc stopped %v after the pod's SIGTERM, want its 1 s handler, well within its stopwaitsecs of 10 s", d)
	}
}
