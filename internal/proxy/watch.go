package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// endpointWatch is the edge's own watch of its Service's EndpointSlices,
// as an ingress controller keeps one: each change of the Service's ready
// endpoints reaches the balancer after the update delay.
type endpointWatch struct {
	p       *server
	port    string // the EndpointSlices' port name; "" takes a slice's only port
	lister  discoverylisters.EndpointSliceLister
	factory informers.SharedInformerFactory

	// synced: the first list is in; changes before it are the list's.
	synced atomic.Bool

	mu      sync.Mutex
	last    []Endpoint // the endpoints last seen
	seq     uint64     // changes seen
	applied uint64     // the latest change applied
	timers  map[*time.Timer]bool
	stopped bool
}

// watchEndpoints starts the watch of the edge's Service and returns once
// the balancer has the Service's endpoints; the watch ends with ctx.
func (p *server) watchEndpoints(ctx context.Context, bal *balancer) (*endpointWatch, error) {
	cfg := p.cfg
	var restCfg *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		restCfg, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		restCfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the API to watch Service %s: %w", cfg.Service, err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("the API to watch Service %s: %w", cfg.Service, err)
	}
	ns, name, _ := strings.Cut(cfg.Service, "/")
	w := &endpointWatch{p: p, port: cfg.ServicePort, timers: map[*time.Timer]bool{}}
	// The Service and its port must exist: a watch of nothing would serve
	// 503s for ever, as a misspelt backend of an Ingress does.
	svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", cfg.Service, err)
	}
	if w.port, err = servicePort(svc, cfg.ServicePort); err != nil {
		return nil, fmt.Errorf("service %s: %w", cfg.Service, err)
	}
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}).String()
	// The informer would retry a refused list for ever: one list first
	// says at once what stands in the way (an API out of reach, a service
	// account without RBAC to list EndpointSlices).
	if _, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1}); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s: %w", cfg.Service, err)
	}
	w.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	informer := w.factory.Discovery().V1().EndpointSlices()
	w.lister = informer.Lister()
	changed := func(any) {
		if w.synced.Load() {
			w.changed(bal, true)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed, DeleteFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) },
	}); err != nil {
		return nil, err
	}
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		w.factory.Shutdown()
		return nil, fmt.Errorf("watch Service %s: %w", cfg.Service, context.Cause(ctx))
	}
	// What the edge starts with, at once.
	w.synced.Store(true)
	w.changed(bal, false)
	return w, nil
}

// servicePort returns the name under which svc's EndpointSlices carry
// port, a port's name or number; "" for the only port of a Service that
// port leaves empty.
func servicePort(svc *corev1.Service, port string) (string, error) {
	var names []string
	for _, sp := range svc.Spec.Ports {
		if port == sp.Name || port == strconv.Itoa(int(sp.Port)) {
			return sp.Name, nil
		}
		name := strconv.Itoa(int(sp.Port))
		if sp.Name != "" {
			name = sp.Name + " " + name
		}
		names = append(names, name)
	}
	if port == "" && len(svc.Spec.Ports) == 1 {
		return svc.Spec.Ports[0].Name, nil
	}
	if port == "" {
		return "", fmt.Errorf("has %d ports (%s): give one with --port", len(names), strings.Join(names, ", "))
	}
	return "", fmt.Errorf("has no port %q (it has %s)", port, strings.Join(names, ", "))
}

// stop ends the watch, and the changes on their way to the balancer.
func (w *endpointWatch) stop() {
	w.factory.Shutdown()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for t := range w.timers {
		t.Stop()
	}
}

// changed reads the Service's ready endpoints and, if they differ from
// the last seen, gives them to bal after the update delay (at once if
// delayed is false). A change that a later one overtook is not applied.
func (w *endpointWatch) changed(bal *balancer, delayed bool) {
	// The list is read and numbered under one lock, so that a change seen
	// later is never numbered earlier.
	w.mu.Lock()
	defer w.mu.Unlock()
	list, err := w.lister.List(labels.Everything())
	if err != nil || w.stopped {
		return
	}
	eps := readyEndpoints(list, w.port)
	if w.seq > 0 && slices.Equal(eps, w.last) {
		return
	}
	w.last = eps
	w.seq++
	seq := w.seq
	// applyLocked gives bal the change, unless a later one came first.
	applyLocked := func() {
		if seq <= w.applied || w.stopped {
			return
		}
		w.applied = seq
		bal.set(eps)
		w.p.log.Info("endpoints", "service", w.p.cfg.Service, "ready", eps)
	}
	if !delayed {
		applyLocked()
		return
	}
	min, max := w.p.cfg.MinUpdateDelay, w.p.cfg.MaxUpdateDelay
	var t *time.Timer
	t = time.AfterFunc(min+time.Duration(rand.Int64N(int64(max-min)+1)), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.timers, t)
		applyLocked()
	})
	w.timers[t] = true
}

// readyEndpoints returns the ready endpoints of slices on port (by name;
// "" takes a slice's only port), in order, as ingress-NGINX takes a
// Service's endpoints: Ready ones only, terminating ones never, each
// address once.
func readyEndpoints(list []*discoveryv1.EndpointSlice, port string) []Endpoint {
	var out []Endpoint
	seen := map[string]bool{}
	for _, s := range list {
		var number int32
		for _, p := range s.Ports {
			if p.Port != nil && ((p.Name != nil && *p.Name == port) || (port == "" && len(s.Ports) == 1)) {
				number = *p.Port
			}
		}
		if number == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			pod := ""
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				pod = e.TargetRef.Name
			}
			for _, a := range e.Addresses {
				addr := net.JoinHostPort(a, strconv.Itoa(int(number)))
				if !seen[addr] {
					seen[addr] = true
					out = append(out, Endpoint{Addr: addr, Pod: pod})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}
