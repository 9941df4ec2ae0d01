package proxy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServicePort: the edge's port resolves by name or number to the
// name the EndpointSlices carry, and a port the Service lacks is an error
// that lists those it has.
func TestServicePort(t *testing.T) {
	t.Parallel()
	two := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "admin", Port: 9901}}}}
	one := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	for _, tt := range []struct {
		name    string
		svc     *corev1.Service
		port    string
		want    string
		wantErr string
	}{
		{"by name", two, "admin", "admin", ""},
		{"by number", two, "80", "http", ""},
		{"the only one", one, "", "", ""},
		{"a name it lacks", two, "nope", "", `has no port "nope" (it has http 80, admin 9901)`},
		{"one of several, unnamed", two, "", "", "has 2 ports (http 80, admin 9901): give one with --port"},
	} {
		got, err := servicePort(tt.svc, tt.port)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: servicePort = %q, %v; want the error %q", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: servicePort = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
