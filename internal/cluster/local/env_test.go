package local

import (
	"slices"
	"strings"
	"testing"

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
		if got := expand(tt.in, vars); got != tt.want {
			t.Errorf("expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}}
	c := &corev1.Container{
		Name:    "app",
		Command: []string{"serve", "--listen=$(LISTEN)"},
		Args:    []string{"--pod=$(POD_NAME)", "$(LATER)"},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			// An entry sees the entries before it only.
			{Name: "LISTEN", Value: "$(POD_IP):8080 $(LATER)"},
			{Name: "LATER", Value: "x"},
		},
	}
	vars, entries, err := containerEnv(pod, c, "127.77.0.9")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POD_NAME=web-1", "POD_NAMESPACE=shop", "POD_IP=127.77.0.9", "LISTEN=127.77.0.9:8080 $(LATER)", "HOSTNAME=web-1"} {
		if !slices.Contains(entries, want) {
			t.Errorf("env %q missing from %q", want, entries)
		}
	}
	argv, err := commandLine(c, vars, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serve", "--listen=127.77.0.9:8080 $(LATER)", "--pod=web-1", "x"}
	if !slices.Equal(argv, want) {
		t.Errorf("commandLine() = %q, want %q", argv, want)
	}
}

func TestContainerEnvUnsupported(t *testing.T) {
	t.Parallel()
	c := &corev1.Container{Name: "app", Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{Key: "token"}}}}}
	if _, _, err := containerEnv(&corev1.Pod{}, c, ""); err == nil || !strings.Contains(err.Error(), "TOKEN") {
		t.Errorf("containerEnv() error = %v, want one naming TOKEN", err)
	}
}

func TestCommandLineImage(t *testing.T) {
	t.Parallel()
	c := &corev1.Container{Name: "web", Image: "nginx:1.27", Args: []string{"-g", "daemon off;"}}
	if _, err := commandLine(c, nil, nil); err == nil || !strings.Contains(err.Error(), "container web") || !strings.Contains(err.Error(), "nginx:1.27") {
		t.Errorf("commandLine() error = %v, want one naming the container and the image", err)
	}
	argv, err := commandLine(c, nil, map[string][]string{"nginx:1.27": {"/usr/sbin/nginx"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/sbin/nginx", "-g", "daemon off;"}; !slices.Equal(argv, want) {
		t.Errorf("commandLine() = %q, want %q", argv, want)
	}
}
