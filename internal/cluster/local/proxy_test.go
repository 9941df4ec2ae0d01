package local

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestProxyPropagation drives a proxy's propagation delay with a fake
// clock: a change is invisible until its delay has passed, then new
// connections follow it.
func TestProxyPropagation(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	log := &cluster.EventLog{}
	p, err := NewProxy(ProxyConfig{MinPropagationDelay: time.Second, MaxPropagationDelay: time.Second, Clock: fc, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}}}}
	slice := func(ready bool) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{{
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)}}},
		}}
	}
	dial := func() error {
		conn, err := p.DialContext(context.Background(), "tcp", "web.default.svc:"+strconv.Itoa(80))
		if err == nil {
			conn.Close()
		}
		return err
	}
	// step advances the clock once the proxy waits on it, and waits for
	// the n-th EndpointsApplied event when want is true.
	step := func(d time.Duration, n int, want bool) {
		t.Helper()
		deadline := time.Now().Add(waitLimit)
		for !fc.HasWaiters() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		fc.Step(d)
		if !want {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := log.Next(ctx, n-1); err != nil {
			t.Fatalf("change %d never applied", n)
		}
	}

	p.Publish(svc, slice(true))
	step(999*time.Millisecond, 1, false)
	var dnsErr *net.DNSError
	if err := dial(); !errors.As(err, &dnsErr) {
		t.Errorf("dial before the Service reached the view: %v, want a lookup failure", err)
	}
	step(time.Millisecond, 1, true)
	if err := dial(); err != nil {
		t.Errorf("dial once the change applied: %v", err)
	}

	p.Publish(svc, slice(false))
	step(500*time.Millisecond, 2, false)
	if err := dial(); err != nil {
		t.Errorf("dial before the removal reached the view: %v", err)
	}
	step(500*time.Millisecond, 2, true)
	if err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial with no usable endpoint: %v, want connection refused", err)
	}
}
