package lint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestLivenessSameAsReadiness(t *testing.T) { testRule(t, &livenessSameAsReadiness) }

func TestLocalCheck(t *testing.T) {
	t.Parallel()
	exec := func(argv ...string) corev1.ProbeHandler {
		return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: argv}}
	}
	tests := []struct {
		name string
		h    corev1.ProbeHandler
		want bool
	}{
		{name: "tcpSocket", h: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}, want: true},
		{name: "grpc", h: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9555}}, want: true},
		{name: "httpGet", h: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}, want: false},
		{name: "grpc_health_probe, own port", h: exec("/bin/grpc_health_probe", "-addr=:9555"), want: true},
		{name: "grpc_health_probe, flag and value apart", h: exec("grpc_health_probe", "--addr", "127.0.0.1:9555", "-connect-timeout=2s"), want: true},
		{name: "grpc_health_probe, another host", h: exec("grpc_health_probe", "-addr=cart:7070"), want: false},
		{name: "grpc_health_probe without an address", h: exec("grpc_health_probe"), want: false},
		{name: "file check", h: exec("cat", "/tmp/healthy"), want: true},
		{name: "own command", h: exec("/web", "check"), want: false},
		{name: "shell script", h: exec("sh", "-c", "cat /tmp/healthy && curl db:5432"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := localCheck(tt.h); got != tt.want {
				t.Errorf("localCheck(%+v) = %v, want %v", tt.h, got, tt.want)
			}
		})
	}
}
