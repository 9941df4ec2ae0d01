package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// Environment variables that let a process in a pod reach Services through
// a node's routing view: `closingtime load` reads them. [RoutingEnv] gives
// them.
const (
	// KubeconfigEnv names the kubeconfig file of the API server whose
	// Services and EndpointSlices the routing view follows.
	KubeconfigEnv = "CLOSINGTIME_KUBECONFIG"
	// NodeNameEnv names the node whose routing view it is.
	NodeNameEnv = "CLOSINGTIME_NODE_NAME"
	// PropagationDelayEnv is the range of the view's delay in applying an
	// endpoint change, on top of the watch's own latency, as MIN-MAX in
	// Go's duration syntax ([ParsePropagationDelay]): the time kube-proxy
	// takes to write a change into a node's rules. Unset means none.
	PropagationDelayEnv = "CLOSINGTIME_PROPAGATION_DELAY"
)

// RoutingEnv returns the variables that let a container on node reach
// Services through node's routing view, built from the API server that
// kubeconfig, a path on this machine, names, with endpoint changes applied
// min to max after the view sees them; give them to the node's kubelet
// (local.KubeletConfig.Env), as a real kubelet gives every container the
// Service variables.
func RoutingEnv(kubeconfig, node string, min, max time.Duration) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: KubeconfigEnv, Value: kubeconfig}, {Name: NodeNameEnv, Value: node},
		{Name: PropagationDelayEnv, Value: min.String() + "-" + max.String()}}
}

// ParsePropagationDelay parses the value of PropagationDelayEnv, MIN-MAX;
// the empty string is no delay.
func ParsePropagationDelay(s string) (min, max time.Duration, err error) {
	if s == "" {
		return 0, 0, nil
	}
	lo, hi, ok := strings.Cut(s, "-")
	if ok {
		min, err = time.ParseDuration(lo)
	}
	if ok && err == nil {
		max, err = time.ParseDuration(hi)
	}
	if !ok || err != nil || min < 0 || max < min {
		return 0, 0, fmt.Errorf("%s=%q: want MIN-MAX, two non-negative durations in order, such as 100ms-1s", PropagationDelayEnv, s)
	}
	return min, max, nil
}

// PodIPInAPI returns the address by which the API knows a pod that
// listens on addr: 10.B.C.D for a loopback addr 127.B.C.D, addr itself
// otherwise.
//
// A Kubernetes API server refuses an EndpointSlice with an address on the
// loopback range (127.0.0.0/8: "may not be in the loopback range"), and
// the EndpointSlice controller then writes none of a Service's endpoints,
// while pods on this machine can only listen on loopback addresses without
// privileges. So a pod has two addresses that differ in their first byte:
// the one it listens on, 127.B.C.D, and the one the API knows it by,
// 10.B.C.D, in its status and in EndpointSlices. PodIPInAPI and
// [PodIPOnNode] turn one into the other; [Routes] dials the address on the
// node.
func PodIPInAPI(addr netip.Addr) netip.Addr {
	return swapFirstByte(addr, 127, 10)
}

// PodIPOnNode returns the address a pod that the API knows by addr listens
// on, on this machine: 127.B.C.D for an addr 10.B.C.D, addr itself
// otherwise.
func PodIPOnNode(addr netip.Addr) netip.Addr {
	return swapFirstByte(addr, 10, 127)
}

// swapFirstByte returns addr with its first byte to instead of from, if
// it is an IPv4 address whose first byte is from; else addr.
func swapFirstByte(addr netip.Addr, from, to byte) netip.Addr {
	if !addr.Is4() {
		return addr
	}
	b := addr.As4()
	if b[0] != from {
		return addr
	}
	b[0] = to
	return netip.AddrFrom4(b)
}

// RoutesConfig configures [Routes].
type RoutesConfig struct {
	// Client reads Services and EndpointSlices of every namespace; it
	// needs the rights to list and watch them.
	Client kubernetes.Interface
	// NodeName is the node whose view it is, which internalTrafficPolicy
	// Local compares endpoints' nodeName with; required.
	NodeName string
	// MinDelay and MaxDelay bound an extra delay, chosen uniformly for each
	// change, between the watch delivering the change and the view
	// applying it, on top of the real latency of the watch. Both zero means
	// none: the watch's own latency is real.
	MinDelay, MaxDelay time.Duration
	// Recorder receives an EndpointsApplied event each time the view of a
	// Service changes; events are dropped if nil.
	Recorder cluster.Recorder
	// Node, if not nil, is the node's network namespace, where the view
	// is written as kube-proxy's nftables mode writes a node's rules
	// (local.NewNodeProxy), for the node's pods, whose addresses are
	// those of PodCIDR, the cluster's pod range. If nil, the view is the
	// loopback model's: its addresses are on the machine's loopback
	// interface (PodIPOnNode), and it routes only the connections that
	// DialContext makes.
	Node *podnet.NetnsNode
	// PodCIDR is the cluster's pod range, with Node.
	PodCIDR netip.Prefix
}

// Routes is a node's routing view of the Services of a real API server,
// as that node's kube-proxy holds it: informers on Services and
// EndpointSlices of every namespace feed a [local.Proxy], the routing view
// of the embedded cluster, so that connections pick endpoints by the same
// rules (Ready ones, else serving and terminating ones, refused when there
// are none, internalTrafficPolicy Local, sessionAffinity ClientIP). The
// EndpointSlices of a Service are those labelled kubernetes.io/service-name
// with its name, whoever wrote them. With a RoutesConfig.Node, the view is
// written into the node's kernel, and the pods' own connections to cluster
// IPs follow it; without, the addresses reach the view, and its events, as
// [PodIPOnNode] gives them, and only DialContext's connections follow it.
// It is safe for concurrent use; Close stops it.
type Routes struct {
	kernel   bool // written into a node's namespace: addresses are the API's
	proxy    *local.Proxy
	factory  informers.SharedInformerFactory
	stop     chan struct{}
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister

	closeOnce sync.Once

	mu      sync.Mutex // orders the reads of the caches and the changes they make
	started bool       // the view holds what the informers first listed
}

// StartRoutes starts the informers of cfg.Client and returns once they have
// listed every Service and EndpointSlice and the view holds them, or an
// error if ctx ends first. ctx bounds the start only; Close stops the
// routes.
func StartRoutes(ctx context.Context, cfg RoutesConfig) (*Routes, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("routes: RoutesConfig.Client and RoutesConfig.NodeName are required")
	}
	pc := local.ProxyConfig{NodeName: cfg.NodeName, MinPropagationDelay: cfg.MinDelay, MaxPropagationDelay: cfg.MaxDelay, Recorder: cfg.Recorder}
	var proxy *local.Proxy
	var err error
	if cfg.Node != nil {
		proxy, err = local.NewNodeProxy(pc, cfg.Node, cfg.PodCIDR)
	} else {
		proxy, err = local.NewProxy(pc)
	}
	if err != nil {
		return nil, fmt.Errorf("routes: RoutesConfig.MinDelay, MaxDelay, Node: %w", err)
	}
	factory := informers.NewSharedInformerFactory(cfg.Client, 0)
	r := &Routes{kernel: cfg.Node != nil, proxy: proxy, factory: factory, stop: make(chan struct{}),
		services: factory.Core().V1().Services().Lister(), slices: factory.Discovery().V1().EndpointSlices().Lister()}
	svcHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.serviceChanged(obj) },
		UpdateFunc: func(_, obj any) { r.serviceChanged(obj) },
		DeleteFunc: func(obj any) { r.serviceChanged(obj) },
	}
	sliceHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.sliceChanged(obj) },
		UpdateFunc: func(old, obj any) {
			// A new label moves the slice from one Service to another.
			if serviceOf(old) != serviceOf(obj) {
				r.sliceChanged(old)
			}
			r.sliceChanged(obj)
		},
		DeleteFunc: func(obj any) { r.sliceChanged(obj) },
	}
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(svcHandler); err != nil {
		r.Close()
		return nil, fmt.Errorf("routes: %w", err)
	}
	if _, err := factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(sliceHandler); err != nil {
		r.Close()
		return nil, fmt.Errorf("routes: %w", err)
	}
	factory.Start(r.stop)
	for _, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			r.Close()
			return nil, fmt.Errorf("routes: list Services and EndpointSlices: %w", ctx.Err())
		}
	}
	if err := r.load(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// load sets the view to what the caches hold, at once, and lets the event
// handlers publish the changes that come after. Events handled before it
// are in the caches it reads: an informer updates its cache before it
// calls the handlers.
func (r *Routes) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	services, err := r.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("routes: list Services: %w", err)
	}
	for _, svc := range services {
		slices, err := r.slicesOf(svc.Namespace, svc.Name)
		if err != nil {
			return err
		}
		r.proxy.Load(svc, slices)
	}
	r.started = true
	return nil
}

// serviceChanged syncs the Service that obj, a Service or the tombstone of
// one, is.
func (r *Routes) serviceChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if svc, ok := obj.(*corev1.Service); ok {
		r.sync(svc.Namespace, svc.Name)
	}
}

// sliceChanged syncs the Service that obj, an EndpointSlice or the
// tombstone of one, belongs to.
func (r *Routes) sliceChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok && serviceOf(s) != "" {
		r.sync(s.Namespace, serviceOf(s))
	}
}

// serviceOf returns the name of the Service that obj, an EndpointSlice,
// belongs to, from its kubernetes.io/service-name label.
func serviceOf(obj any) string {
	s, _ := obj.(*discoveryv1.EndpointSlice)
	if s == nil {
		return ""
	}
	return s.Labels[discoveryv1.LabelServiceName]
}

// sync publishes the Service namespace/name as the caches hold it now, with
// its EndpointSlices, or its removal if it is gone. Syncs run one at a
// time, so that the last one reads the latest caches and the view ends on
// the latest state, whichever informer saw its change first.
func (r *Routes) sync(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return // load reads the caches later
	}
	svc, err := r.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		r.proxy.Remove(namespace, name)
		return
	}
	if err != nil {
		return // a lister reads a local cache: only NotFound happens
	}
	slices, err := r.slicesOf(namespace, name)
	if err != nil {
		return
	}
	r.proxy.Publish(svc, slices)
}

// ServicesOf returns the Services of namespace that the view holds, by
// name: those whose variables a kubelet gives a container
// (local.KubeletConfig.Services).
func (r *Routes) ServicesOf(namespace string) []*corev1.Service {
	list, err := r.services.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil // a lister reads a local cache: it does not fail
	}
	slices.SortFunc(list, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	for i, svc := range list {
		list[i] = svc.DeepCopy()
	}
	return list
}

// slicesOf returns the EndpointSlices of Service namespace/name in the
// cache, by name, so that the events describe their endpoints in a stable
// order, each a copy, with its addresses on the node (PodIPOnNode) in the
// loopback model.
func (r *Routes) slicesOf(namespace, name string) ([]*discoveryv1.EndpointSlice, error) {
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	list, err := r.slices.EndpointSlices(namespace).List(selector)
	if err != nil {
		return nil, fmt.Errorf("routes: list EndpointSlices of Service %s/%s: %w", namespace, name, err)
	}
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for i, s := range list {
		// The cache's objects are shared: change copies only.
		list[i] = s.DeepCopy()
		if r.kernel {
			continue
		}
		for _, ep := range list[i].Endpoints {
			for j, a := range ep.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil {
					ep.Addresses[j] = PodIPOnNode(addr).String()
				}
			}
		}
	}
	return list, nil
}

// DialContext connects to a Service through the view, as a client on the
// node would through its kube-proxy's rules: address is
// "name.namespace:port", optionally with ".svc" or ".svc.cluster.local"
// before the port. See [local.Proxy.DialContext] for how it picks an
// endpoint and how it fails: refused (an error that wraps
// syscall.ECONNREFUSED) when the Service has no usable endpoint, a lookup
// failure (*net.DNSError) for a Service the view does not hold.
//
// The connection's RemoteAddr is the pod's address as the API knows it
// (PodIPInAPI), the one in its status and its pod_started event; it
// reaches the address on the node. A connect to a pod that fails names
// that address too, in its *net.OpError's Addr. With a RoutesConfig.Node,
// the connection comes from a client pod on the node, through the node's
// rules, and the address is the endpoint that conntrack saw the rules
// pick.
func (r *Routes) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := r.proxy.DialContext(ctx, network, address)
	if r.kernel {
		return c, err
	}
	if err != nil {
		return nil, dialErrorInAPI(err)
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	return &apiAddrConn{TCPConn: tc, remote: tcpAddrInAPI(tc.RemoteAddr().(*net.TCPAddr))}, nil
}

// tcpAddrInAPI returns a, the address of a pod on the node, as the API
// knows it (PodIPInAPI).
func tcpAddrInAPI(a *net.TCPAddr) *net.TCPAddr {
	ap := a.AddrPort()
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(PodIPInAPI(ap.Addr().Unmap()), ap.Port()))
}

// dialErrorInAPI returns err, the error of a connect to a pod on the node,
// with the TCP address that its *net.OpError names, if any, as the API
// knows it. The error is changed in place: a dialer makes a new one for
// each connect.
func dialErrorInAPI(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		if a, ok := oe.Addr.(*net.TCPAddr); ok && a != nil {
			oe.Addr = tcpAddrInAPI(a)
		}
	}
	return err
}

// DialFromPod connects to address as a process in a pod on the view's node
// connects: a Service host, name.namespace with ".svc" or
// ".svc.cluster.local" optional (local.SplitServiceHost), through the view
// as through the node's kube-proxy ([Routes.DialContext]), and any other
// address directly, as net.Dialer does. It is the dialer of `closingtime
// load` in a pod of `closingtime cluster`, which finds its node's view in
// the variables of [RoutingEnv]; a real pod resolves the names through the
// cluster's DNS instead.
func (r *Routes) DialFromPod(ctx context.Context, network, address string) (net.Conn, error) {
	if host, _, err := net.SplitHostPort(address); err == nil {
		if _, _, ok := local.SplitServiceHost(host); ok {
			return r.DialContext(ctx, network, address)
		}
	}
	var direct net.Dialer
	return direct.DialContext(ctx, network, address)
}

// apiAddrConn is a connection to a pod whose RemoteAddr is the pod's
// address in the API. It is a *net.TCPConn otherwise, so that a client
// still reaches the socket (syscall.Conn) to check an idle connection.
type apiAddrConn struct {
	*net.TCPConn
	remote net.Addr
}

func (c *apiAddrConn) RemoteAddr() net.Addr { return c.remote }

// Close stops the informers and the changes still on their way; the view
// stays as it was, and dialing goes on working, but with a
// RoutesConfig.Node, whose rules and client pod go. Close may be called
// again.
func (r *Routes) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		r.factory.Shutdown()
		r.proxy.Close()
	})
}
