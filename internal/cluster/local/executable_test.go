package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestExecutable: a command resolves as the kubelet starts it, a bare
// name in $PATH and a relative path in the working directory, and the
// error of one that does not says what was looked up where.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "myapp"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, tt := range []struct {
		name, dir, want, wantErr string
	}{
		{name: "app", want: filepath.Join(dir, "app")},
		{name: "./app", dir: dir, want: filepath.Join(dir, "app")},
		{name: filepath.Join(dir, "app"), want: filepath.Join(dir, "app")},
		{name: "myapp", wantErr: `command "myapp": no executable file of that name in $PATH (` + dir + ")"},
		{name: "./myapp", dir: dir, wantErr: `command "./myapp": ` + filepath.Join(dir, "myapp") + ` (in working directory "` + dir + `") is a directory, not an executable file`},
		{name: "./data", dir: dir, wantErr: `command "./data": ` + filepath.Join(dir, "data") + ` (in working directory "` + dir + `") is not an executable file (mode -rw-r--r--)`},
		{name: "/no/such/app", wantErr: `command "/no/such/app": no file /no/such/app`},
	} {
		got, err := Executable(tt.name, tt.dir)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Executable(%q, %q) = %q, %v; want the error %q", tt.name, tt.dir, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Executable(%q, %q) = %q, %v; want %q", tt.name, tt.dir, got, err, tt.want)
		}
	}
	// The kubelet starts a container by the same resolution.
	if _, _, err := startProcess(nil, &isolator{}, nil, nil, nil, []string{"./myapp"}, nil, dir, nil, 0); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("startProcess(./myapp) = %v, want the error of Executable", err)
	}
}

// TestProbeTarget: a failed probe names what it probed, a named port
// resolved, in the text of notices and Unhealthy Events.
func TestProbeTarget(t *testing.T) {
	c := &containerWorker{spec: &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}
	for _, tt := range []struct {
		h    corev1.ProbeHandler
		want string
	}{
		{corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, "readiness probe GET :8080/healthz failed"},
		{corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(9090)}}, "readiness probe TCP 127.0.0.1:9090 failed"},
		{corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}}, "readiness probe exec cat /tmp/ready failed"},
		{corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 50051}}, "readiness probe gRPC :50051 failed"},
		{corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 50051, Service: ptr.To("shop.v1.Cart")}}, "readiness probe gRPC :50051 shop.v1.Cart failed"},
	} {
		e := cluster.Event{Kind: cluster.ProbeFailed, Fields: map[string]string{"probe": "readiness", "target": c.probeTarget(tt.h)}}
		if got := cluster.ProbeFailure(e); got != tt.want {
			t.Errorf("ProbeFailure = %q, want %q", got, tt.want)
		}
	}
}
