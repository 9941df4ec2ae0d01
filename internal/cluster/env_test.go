package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
		Args:    []string{"$(PORT)", "$(HOSTNAME)", "$(UNCLOSED"},
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
