package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// NodeNetnsEnv names, in the pods of a network of namespaces, the path of
// their node's network namespace (podnet.Netns.Path), which lives as long
// as the node: `closingtime load` in a pod reads the node's connection
// tracking there (podnet.NewTracker), to name the endpoint that each of
// its connections to a cluster IP reached, as the embedded cluster's
// load does. A process of the pod needs CAP_NET_ADMIN to read it; a
// process of a real cluster's pod sees only the cluster IP.
const NodeNetnsEnv = "CLOSINGTIME_NODE_NETNS"

// Resolver gives a process in a pod of a network of namespaces the part of
// a cluster's DNS it needs to reach Services by name: the cluster IP of
// each Service of a real API server, from an informer on the Services of
// every namespace. The kernel's rules of the pod's node route the cluster
// IP (RoutesConfig.Node), so a connection through it is the pod's own,
// as in a cluster. It is safe for concurrent use; Close stops it.
type Resolver struct {
	backend   func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool)
	factory   informers.SharedInformerFactory
	services  corelisters.ServiceLister
	stop      chan struct{}
	closeOnce sync.Once
}

// StartResolver starts an informer on client's Services and returns once
// it has listed them, or an error if ctx ends first. backend, if not nil,
// tells where the node's rules sent a connection (podnet.Tracker.Backend
// of the pod's node, [NodeNetnsEnv]), so that a connection's RemoteAddr,
// or a failed connect's *net.OpError Addr, is the endpoint it reached
// (local.DialTracked). ctx bounds the start only; Close stops the
// resolver.
func StartResolver(ctx context.Context, client kubernetes.Interface, backend func(from, to netip.AddrPort, since time.Time) (netip.AddrPort, bool)) (*Resolver, error) {
	factory := informers.NewSharedInformerFactory(client, 0)
	r := &Resolver{backend: backend, factory: factory, services: factory.Core().V1().Services().Lister(), stop: make(chan struct{})}
	factory.Core().V1().Services().Informer()
	factory.Start(r.stop)
	for _, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			r.Close()
			return nil, fmt.Errorf("resolver: list Services: %w", ctx.Err())
		}
	}
	return r, nil
}

// DialFromPod connects to address as a process in a pod connects: a
// Service host, name.namespace with ".svc" or ".svc.cluster.local"
// optional (local.SplitServiceHost), at the Service's cluster IP, as the
// cluster's DNS would resolve it, tracked where the resolver has a
// backend; any other address directly, as net.Dialer does. A Service that does not exist, or that has no cluster
// IP (headless, ExternalName), fails as a lookup does (*net.DNSError with
// IsNotFound).
func (r *Resolver) DialFromPod(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return d.DialContext(ctx, network, address)
	}
	name, namespace, ok := local.SplitServiceHost(host)
	if !ok {
		return d.DialContext(ctx, network, address)
	}
	svc, err := r.services.Services(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if err != nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, &net.OpError{Op: "dial", Net: network,
			Err: &net.DNSError{Err: "no Service with a cluster IP", Name: host, IsNotFound: true}}
	}
	// podnet's dialer names a failed connect's source, by which the
	// node's connection tracking tells where it went.
	return local.DialTracked(ctx, podnet.DialContext, r.backend, network, net.JoinHostPort(svc.Spec.ClusterIP, port))
}

// Close stops the informer. Close may be called again.
func (r *Resolver) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		r.factory.Shutdown()
	})
}
