package local

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClusterIPs: Services get addresses in order from the third of the
// range; one asked for is kept if the range hands it out and it is free;
// a Service keeps its address, and headless or ExternalName ones get none.
func TestClusterIPs(t *testing.T) {
	a := newClusterIPs(netip.MustParsePrefix("10.96.0.0/29"))
	svc := func(name, ip string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Type: typ}}
	}
	web := svc("web", "", "")
	if err := a.assign(web, nil); err != nil || web.Spec.ClusterIP != "10.96.0.2" {
		t.Errorf("first Service: %q, %v; want 10.96.0.2", web.Spec.ClusterIP, err)
	}
	again := svc("web", "", "")
	if err := a.assign(again, web); err != nil || again.Spec.ClusterIP != "10.96.0.2" {
		t.Errorf("the Service applied again: %q, %v; want its 10.96.0.2", again.Spec.ClusterIP, err)
	}
	if err := a.assign(svc("web", "10.96.0.5", ""), web); err == nil {
		t.Error("a Service's cluster IP changed")
	}
	if err := a.assign(svc("web", corev1.ClusterIPNone, ""), web); err == nil {
		t.Error("a Service with a cluster IP made headless")
	}
	for _, ip := range []string{"10.96.0.0", "10.96.0.1", "10.96.0.7", "10.97.0.3", "10.96.0.2"} {
		if err := a.assign(svc("db", ip, ""), nil); err == nil {
			t.Errorf("Service db got %s, which the range does not hand out or web holds", ip)
		}
	}
	db := svc("db", "10.96.0.6", "")
	if err := a.assign(db, nil); err != nil {
		t.Errorf("Service db asking for a free 10.96.0.6: %v", err)
	}
	for _, s := range []*corev1.Service{svc("headless", corev1.ClusterIPNone, ""), svc("ext", "", corev1.ServiceTypeExternalName)} {
		if err := a.assign(s, nil); err != nil || (s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone) {
			t.Errorf("Service %s: %q, %v; want no address", s.Name, s.Spec.ClusterIP, err)
		}
	}
	next := svc("next", "", "")
	if err := a.assign(next, nil); err != nil || next.Spec.ClusterIP != "10.96.0.3" {
		t.Errorf("third Service: %q, %v; want 10.96.0.3", next.Spec.ClusterIP, err)
	}
}

// TestValidService: a Service the node proxies could not write is refused
// at Apply, with its field named.
func TestValidService(t *testing.T) {
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}}}
	others := map[string]*corev1.Service{"default/web": web}
	for _, tt := range []struct {
		ports []corev1.ServicePort
		want  string // the error's start; "" for none
	}{
		{[]corev1.ServicePort{{Port: 80}}, ""},
		{[]corev1.ServicePort{{Port: 0}}, "spec.ports[0].port: 0"},
		{[]corev1.ServicePort{{Name: "a", Port: 80}, {Port: 81}}, "spec.ports[1].name: a Service of several ports"},
		{[]corev1.ServicePort{{Name: "a", Port: 80}, {Name: "a", Port: 81}}, `spec.ports[1].name: "a"`},
		{[]corev1.ServicePort{{Name: "a", Port: 80, NodePort: 30080}}, "spec.ports[0].nodePort: 30080: Service default/web has it"},
		{[]corev1.ServicePort{{Name: "a", Port: 80, NodePort: 30081}, {Name: "b", Port: 81, NodePort: 30081}}, "spec.ports[1].nodePort: 30081: port 0"},
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, Spec: corev1.ServiceSpec{Ports: tt.ports}}
		err := validService(svc, others)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v, want no error", tt.ports, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("%+v: %v, want an error beginning %q", tt.ports, err, tt.want)
		}
	}
	if err := validService(web, others); err != nil {
		t.Errorf("a Service applied again: %v", err)
	}
}
