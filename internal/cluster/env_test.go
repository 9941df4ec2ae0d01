package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"POD_IP": "127.77.0.5", "EMPTY": ""}
	tests := []struct{ in, want string }{
		{"$(POD_IP):8080", "127.77.0.5:8080"},
		{"a$(EMPTY)b", "ab"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(POD_IP)", "$(POD_IP)"},
		{"$$$(POD_IP)", "$127.77.0.5"},
		{"$(POD_IP", "$(POD_IP"},
		{"cost $5", "cost $5"},
		{"end $", "end $"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Expand(tt.in, vars); got != tt.want {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestUnresolvedRefs: an env value sees the entries before it, whatever
// their source; command and args see every entry; an escaped $$( is no
// reference; a container with envFrom has none.
func TestUnresolvedRefs(t *testing.T) {
	t.Parallel()
	fieldRef := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := &corev1.Container{
		Name: "app",
		Env: []corev1.EnvVar{
			{Name: "LISTEN_ADDR", Value: "$(POD_IP):8080"},
			{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
			{Name: "URL", Value: "http://$(POD_IP):$(PORT)/$$(NOT_A_REF) $(PORT)"},
			{Name: "PORT", Value: "8080"},
		},
		Command: []string{"app", "--listen=$(LISTEN_ADDR)", "--pod=$(POD_NAME)"},
		Args: []string{"$(PORT)", "$(HOSTNAME)", "$(UNCLOSED",
			// A shell's command substitution and arithmetic: no env name.
			"n=$(cat $f 2>/dev/null || echo 0); echo $((n+1))"},
	}
	want := []UnresolvedRef{
		{Field: "env[0]", Env: "LISTEN_ADDR", Name: "POD_IP"},
		{Field: "env[2]", Env: "URL", Name: "PORT"},
		{Field: "command[2]", Name: "POD_NAME"},
		// The container runtime sets HOSTNAME, after the kubelet expands.
		{Field: "args[1]", Name: "HOSTNAME"},
	}
	if diff := cmp.Diff(want, UnresolvedRefs(c)); diff != "" {
		t.Errorf("UnresolvedRefs (-want +got):\n%s", diff)
	}
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}}}}
	if got := UnresolvedRefs(c); got != nil {
		t.Errorf("UnresolvedRefs with envFrom = %v, want none", got)
	}
}

// TestServiceEnv: the variables of a Service with two ports, one named, as
// a kubelet writes them; none for a headless Service.
func TestServiceEnv(t *testing.T) {
	services := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "my-web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Port: 9090, Protocol: corev1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Port: 80}}}},
	}
	got := map[string]string{}
	for _, e := range ServiceEnv(services) {
		got[e.Name] = e.Value
	}
	want := map[string]string{
		"MY_WEB_SERVICE_HOST":        "10.96.0.10",
		"MY_WEB_SERVICE_PORT":        "80",
		"MY_WEB_SERVICE_PORT_HTTP":   "80",
		"MY_WEB_PORT":                "tcp://10.96.0.10:80",
		"MY_WEB_PORT_80_TCP":         "tcp://10.96.0.10:80",
		"MY_WEB_PORT_80_TCP_PROTO":   "tcp",
		"MY_WEB_PORT_80_TCP_PORT":    "80",
		"MY_WEB_PORT_80_TCP_ADDR":    "10.96.0.10",
		"MY_WEB_PORT_9090_TCP":       "tcp://10.96.0.10:9090",
		"MY_WEB_PORT_9090_TCP_PROTO": "tcp",
		"MY_WEB_PORT_9090_TCP_PORT":  "9090",
		"MY_WEB_PORT_9090_TCP_ADDR":  "10.96.0.10",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ServiceEnv() (-want +got):\n%s", diff)
	}
}
