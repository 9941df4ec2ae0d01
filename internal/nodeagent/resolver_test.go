package nodeagent

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestResolverDialFromPod: a Service's name, in each of the forms a pod
// writes it, reaches its cluster IP (here a loopback address, so that the
// test dials nothing but loopback); a Service that does not exist, and one
// without a cluster IP, fail as a lookup that found nothing; any other
// address is dialed as it is.
func TestResolverDialFromPod(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		// One connection per round; the loop ends when ln is closed.
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	client := fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{ClusterIP: "127.0.0.1"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "shop"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
	)
	ctx := context.Background()
	r, err := StartResolver(ctx, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, address := range []string{"web.shop:" + port, "web.shop.svc:" + port, "web.shop.svc.cluster.local.:" + port, "127.0.0.1:" + port} {
		c, err := r.DialFromPod(ctx, "tcp", address)
		if err != nil {
			t.Errorf("DialFromPod(%s): %v", address, err)
			continue
		}
		if got := c.RemoteAddr().String(); got != ln.Addr().String() {
			t.Errorf("DialFromPod(%s) reached %s, want %s", address, got, ln.Addr())
		}
		c.Close()
	}
	for _, address := range []string{"db.shop:" + port, "headless.shop:" + port} {
		_, err := r.DialFromPod(ctx, "tcp", address)
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("DialFromPod(%s): %v, want a lookup that found nothing", address, err)
		}
	}
	r.Close()
	r.Close() // Close may be called again.
}
