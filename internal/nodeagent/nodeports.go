package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// NodeInternalIP is the address every node registers as its InternalIP:
// the machine's loopback address, where the API server reaches the nodes'
// kubelet APIs and clients reach the Services' node ports.
const NodeInternalIP = "127.0.0.1"

// FailedToListen is the reason of the Warning Event that [NodePorts] posts
// on a Service whose node port it cannot listen on.
const FailedToListen = "FailedToListen"

// NodePortsConfig configures [NodePorts].
type NodePortsConfig struct {
	// Client reads Services and EndpointSlices of every namespace, as
	// RoutesConfig.Client, and posts Events; required.
	Client kubernetes.Interface
	// NodeName is the node whose routing view forwards the connections,
	// and the host of the Events; required.
	NodeName string
	// MinDelay and MaxDelay bound the view's extra delay in applying an
	// endpoint change, as RoutesConfig's.
	MinDelay, MaxDelay time.Duration
	// Routes, if not nil, is node NodeName's routing view, which the
	// caller closes after NodePorts; if nil, NodePorts starts one of its
	// own from Client, with the delays above, and closes it.
	Routes *Routes
	// Logf, if not nil, receives a line each time a node port starts or
	// stops being served, or cannot be.
	Logf func(format string, args ...any)
}

// NodePorts serves the node ports of a real API server's Services on
// NodeInternalIP, as kube-proxy serves them on every node of a cluster:
// each port of a Service of type NodePort or LoadBalancer that has a
// nodePort (which the API server allocates, from 30000–32767 by default)
// gets a TCP listener on NodeInternalIP:nodePort, and each connection it
// accepts goes to one of the Service's endpoints through the routing view
// of node NodePortsConfig.NodeName ([Routes]), by the rules kube-proxy
// applies to a client on the node ([local.Proxy.ServeNodePort]): among the
// endpoints of every node, whatever the Service's traffic policies. A
// Service of type ClusterIP has no node port, and no listener.
//
// The listeners follow the Services as the view's informer sees them: a
// new node port is listened on, a changed one moves, and the listener of a
// port that is gone (its Service deleted, its type changed, its port
// removed) is closed, so that new connections are refused, while the
// connections it forwarded carry on until one side closes them, as
// conntrack keeps an established flow on its backend. A port that another
// program holds is not served: NodePorts logs it, posts a Warning Event of
// reason FailedToListen on the Service, and tries again at the Service's
// next change. Connections are forwarded in user space, so a connection
// that kube-proxy would refuse (no usable endpoint, or a pod that no
// longer listens) is accepted and then reset; see [local.Proxy.Serve].
// UDP and SCTP ports are not served, nor the health check node port of
// externalTrafficPolicy Local.
//
// Close stops it.
type NodePorts struct {
	cfg     NodePortsConfig
	routes  *Routes
	handler cache.ResourceEventHandlerRegistration // on the Services of routes
	events  record.EventBroadcaster
	api     record.EventRecorder
	ctx     context.Context // ends at Close, with every forwarded connection
	cancel  context.CancelFunc
	served  sync.WaitGroup // the listeners' Serve calls, draining ones too

	mu        sync.Mutex
	closed    bool
	listeners map[string]map[int32]*nodePortListener // by Service (namespace/name), then node port
}

// ServedNodePorts returns the ports of svc whose node ports [NodePorts]
// serves: those with a nodePort, of a Service of type NodePort or
// LoadBalancer, over TCP.
func ServedNodePorts(svc *corev1.Service) []corev1.ServicePort {
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	var served []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			served = append(served, p)
		}
	}
	return served
}

// nodePortListener is the listener of one node port.
type nodePortListener struct {
	address string // the Service port it forwards to, "name.namespace:port"
	ln      net.Listener
}

// StartNodePorts starts the routing view of cfg.NodeName and returns once
// it has listened on the node ports of every Service the view holds (or
// logged those it cannot listen on), or an error if ctx ends first. ctx
// bounds the start only; Close stops it.
func StartNodePorts(ctx context.Context, cfg NodePortsConfig) (*NodePorts, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("node ports: NodePortsConfig.Client and NodePortsConfig.NodeName are required")
	}
	routes := cfg.Routes
	if routes == nil {
		var err error
		if routes, err = StartRoutes(ctx, RoutesConfig{Client: cfg.Client, NodeName: cfg.NodeName, MinDelay: cfg.MinDelay, MaxDelay: cfg.MaxDelay}); err != nil {
			return nil, fmt.Errorf("node ports: %w", err)
		}
	}
	n := &NodePorts{cfg: cfg, routes: routes, listeners: map[string]map[int32]*nodePortListener{}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.events = record.NewBroadcaster(record.WithContext(n.ctx))
	n.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	n.api = n.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kube-proxy", Host: cfg.NodeName})
	// The Services' informer of the view, already synced, calls the
	// handler for every Service it holds, then for each change.
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.serviceChanged(obj) },
		UpdateFunc: func(_, obj any) { n.serviceChanged(obj) },
		DeleteFunc: func(obj any) { n.serviceChanged(obj) },
	}
	var err error
	n.handler, err = routes.factory.Core().V1().Services().Informer().AddEventHandler(handler)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("node ports: %w", err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), n.handler.HasSynced) {
		n.Close()
		return nil, fmt.Errorf("node ports: listen on the Services' node ports: %w", ctx.Err())
	}
	return n, nil
}

// serviceChanged syncs the listeners of the Service that obj, a Service or
// the tombstone of one, is.
func (n *NodePorts) serviceChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if svc, ok := obj.(*corev1.Service); ok {
		n.sync(svc.Namespace, svc.Name)
	}
}

// sync makes the listeners of Service namespace/name those of its node
// ports as the informer's cache holds it now: none if it is gone. A node
// port without a listener is listened on again, so that a port that was
// taken is tried again at each change of its Service.
func (n *NodePorts) sync(namespace, name string) {
	key := namespace + "/" + name
	want := map[int32]int32{} // node port → Service port
	svc, err := n.routes.services.Services(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return // a lister reads a local cache: only NotFound happens
	}
	if err == nil {
		for _, p := range ServedNodePorts(svc) {
			want[p.NodePort] = p.Port
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	have := n.listeners[key]
	target := func(port int32) string { return net.JoinHostPort(name+"."+namespace, strconv.Itoa(int(port))) }
	for port, l := range have {
		if sp, ok := want[port]; !ok || target(sp) != l.address {
			// Its connections carry on; Serve returns once they end.
			l.ln.Close()
			delete(have, port)
			n.logf("node port %d of Service %s closed", port, key)
		}
	}
	for port, sp := range want {
		if have[port] != nil {
			continue
		}
		address := target(sp)
		hostPort := net.JoinHostPort(NodeInternalIP, strconv.Itoa(int(port)))
		ln, err := net.Listen("tcp", hostPort)
		if err != nil {
			n.logf("node port %d of Service %s (%s) not served: %v", port, key, address, err)
			n.api.Eventf(svc, corev1.EventTypeWarning, FailedToListen, "Node port %d of port %d/TCP is not served on %s: %v; tried again when the Service changes",
				port, sp, n.cfg.NodeName, err)
			continue
		}
		if have == nil {
			have = map[int32]*nodePortListener{}
			n.listeners[key] = have
		}
		have[port] = &nodePortListener{address: address, ln: ln}
		n.logf("node port %d of Service %s serves %s on %s", port, key, address, hostPort)
		n.served.Go(func() {
			err := n.routes.proxy.ServeNodePort(n.ctx, ln, address)
			if err != nil && !errors.Is(err, net.ErrClosed) {
				n.logf("node port %d of Service %s: %v", port, key, err)
			}
		})
	}
	if len(have) == 0 {
		delete(n.listeners, key)
	}
}

// logf logs through cfg.Logf, if set.
func (n *NodePorts) logf(format string, args ...any) {
	if n.cfg.Logf != nil {
		n.cfg.Logf(format, args...)
	}
}

// Close closes every listener and every connection it forwarded, stops
// the routing view (unless NodePortsConfig.Routes gave it) and the Events,
// and returns when all of them are gone.
// Close may be called again.
func (n *NodePorts) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	for _, ports := range n.listeners {
		for _, l := range ports {
			l.ln.Close()
		}
	}
	n.listeners = nil
	n.mu.Unlock()
	n.cancel()
	// The informer stops calling sync, which the lock above made a no-op.
	if n.cfg.Routes == nil {
		n.routes.Close()
	} else if n.handler != nil {
		n.routes.factory.Core().V1().Services().Informer().RemoveEventHandler(n.handler)
	}
	n.served.Wait()
	n.events.Shutdown()
}
