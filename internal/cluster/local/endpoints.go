package local

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// EndpointsConfig configures an [Endpoints] controller. The zero value
// publishes to no proxy, with no delay.
type EndpointsConfig struct {
	// Proxies are the nodes' routing views that each change is published
	// to.
	Proxies []*Proxy
	// API, if not nil, is the pods' API, where each change is published
	// at the same time, as the controller writes it to the API server.
	API *API
	// SyncDelay is the time from a call of Sync that changes a Service's
	// endpoints to their publication: the controller's latency.
	// cluster.DefaultEndpointSyncDelay if zero.
	SyncDelay time.Duration
	// BatchPeriod, when positive, gathers the changes of a Service made
	// within it, from the first one, into one publication of the latest,
	// as kube-controller-manager's --endpointslice-updates-batch-period
	// does; it adds to SyncDelay. cluster.DefaultEndpointSliceBatchPeriod
	// (no batching) if zero.
	BatchPeriod time.Duration
	// Clock times the delays and stamps events; the real clock if nil.
	Clock clock.Clock
	// Recorder receives an EndpointsPublished event for each publication;
	// events are dropped if nil.
	Recorder cluster.Recorder
}

// Endpoints is the EndpointSlice controller: it turns a Service and its
// pods into EndpointSlices with ready, serving and terminating conditions
// (E1–E4) and publishes each change, after its sync delay, to every
// node's [Proxy], which applies it after its own propagation delay. It is
// safe for concurrent use.
type Endpoints struct {
	cfg   EndpointsConfig
	clock clock.Clock
	queue *delayQueue

	mu      sync.Mutex
	last    map[string]sliceState   // by namespace/name: the endpoints last computed
	pending map[string]*publication // by namespace/name: a batch not yet published
}

// publication is what a Service's next publication sends.
type publication struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
}

// NewEndpoints returns an endpoints controller configured by cfg, or an
// error for a negative delay. Close stops it.
func NewEndpoints(cfg EndpointsConfig) (*Endpoints, error) {
	if cfg.SyncDelay == 0 {
		cfg.SyncDelay = cluster.DefaultEndpointSyncDelay
	}
	if cfg.BatchPeriod == 0 {
		cfg.BatchPeriod = cluster.DefaultEndpointSliceBatchPeriod
	}
	if cfg.SyncDelay < 0 || cfg.BatchPeriod < 0 {
		return nil, fmt.Errorf("endpoint sync delay %s, batch period %s: want non-negative durations", cfg.SyncDelay, cfg.BatchPeriod)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Endpoints{cfg: cfg, clock: cfg.Clock, queue: newDelayQueue(cfg.Clock),
		last: map[string]sliceState{}, pending: map[string]*publication{}}, nil
}

// sliceState is what tells one version of a Service's EndpointSlices
// from another: their endpoints, and their port sets (portsKey).
type sliceState struct {
	endpoints []cluster.Endpoint
	ports     string
}

// equal reports whether s and o are the same state.
func (s sliceState) equal(o sliceState) bool {
	return s.ports == o.ports && slices.Equal(s.endpoints, o.endpoints)
}

// Close stops the controller; changes not yet published are dropped.
func (e *Endpoints) Close() {
	e.queue.close()
}

// Sync computes the EndpointSlices of svc from pods, as the API holds them
// now (those of other namespaces are skipped), and publishes them after
// the sync delay if they changed; changes are published in order. Within
// a batch period, the latest change is published, once. Sync reads pods
// only during the call and keeps none of them.
func (e *Endpoints) Sync(svc *corev1.Service, pods []*corev1.Pod) {
	slices := EndpointSlices(svc, pods)
	key := svc.Namespace + "/" + svc.Name
	state := sliceState{endpoints: cluster.EndpointsOf(slices...), ports: portsKey(slices)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, ok := e.last[key]; ok && prev.equal(state) {
		return
	}
	e.last[key] = state
	if pub := e.pending[key]; pub != nil {
		pub.svc, pub.slices = svc, slices
		return
	}
	pub := &publication{svc: svc, slices: slices}
	if e.cfg.BatchPeriod > 0 {
		e.pending[key] = pub
	}
	e.queue.push(e.cfg.SyncDelay+e.cfg.BatchPeriod, func() {
		e.mu.Lock()
		if e.pending[key] == pub {
			delete(e.pending, key)
		}
		svc, slices := pub.svc, pub.slices
		e.mu.Unlock()
		if e.cfg.Recorder != nil {
			e.cfg.Recorder.Record(cluster.Event{Time: e.clock.Now(), Kind: cluster.EndpointsPublished, Object: "Service/" + key,
				Endpoints: cluster.Endpoints{List: cluster.EndpointsOf(slices...)}})
		}
		if e.cfg.API != nil {
			e.cfg.API.Publish(svc, slices)
		}
		for _, p := range e.cfg.Proxies {
			p.Publish(svc, slices)
		}
	})
}

// EndpointSlices returns the EndpointSlices of svc, as the EndpointSlice
// controller computes them from pods (k8s.io/kubernetes
// staging/src/k8s.io/endpointslice/reconciler.go and utils.go,
// podToEndpoint): one endpoint for each pod of svc's namespace that its
// selector matches, that has an address and is not terminal, terminating
// ones included (E1), with serving = Ready, terminating = being deleted,
// ready = serving and not terminating, or publishNotReadyAddresses (E2, E4).
// Pods whose ports resolve the Service's target ports alike share a slice.
// A Service without a selector has none.
func EndpointSlices(svc *corev1.Service, pods []*corev1.Pod) []*discoveryv1.EndpointSlice {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	selector := labels.SelectorFromSet(svc.Spec.Selector)
	byPorts := map[string]*discoveryv1.EndpointSlice{}
	var out []*discoveryv1.EndpointSlice
	for _, pod := range pods {
		if pod.Namespace != svc.Namespace || !selector.Matches(labels.Set(pod.Labels)) || pod.Status.PodIP == "" ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		ports := slicePorts(svc, pod)
		key := portsKey([]*discoveryv1.EndpointSlice{{Ports: ports}})
		s := byPorts[key]
		if s == nil {
			s = &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%d", svc.Name, len(out)), Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       ports,
			}
			byPorts[key] = s
			out = append(out, s)
		}
		serving := podReady(pod)
		terminating := pod.DeletionTimestamp != nil
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr.To(svc.Spec.PublishNotReadyAddresses || (serving && !terminating)),
				Serving:     ptr.To(serving),
				Terminating: ptr.To(terminating),
			},
			NodeName:  ptr.To(pod.Spec.NodeName),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	return out
}

// slicePorts resolves svc's ports against pod: a numeric targetPort as it
// is (the port itself when unset), a named one from the pod's container
// ports (namedPort). A name the pod does not have leaves the port out.
func slicePorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		var port int32
		switch {
		case sp.TargetPort.StrVal != "":
			port = namedPort(pod, sp.TargetPort.StrVal)
		case sp.TargetPort.IntVal != 0:
			port = sp.TargetPort.IntVal
		default:
			port = sp.Port
		}
		if port == 0 {
			continue
		}
		protocol := sp.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		out = append(out, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: &protocol})
	}
	return out
}

// namedPort returns the port that pod's containers name name: the first
// of its app containers' ports, then of its sidecars', as Kubernetes'
// FindPort looks (a native sidecar's port can be a Service's target); 0
// if none.
func namedPort(pod *corev1.Pod, name string) int32 {
	containers := slices.Concat(pod.Spec.Containers, slices.DeleteFunc(slices.Clone(pod.Spec.InitContainers),
		func(c corev1.Container) bool { return !cluster.IsSidecar(&c) }))
	for _, c := range containers {
		for _, cp := range c.Ports {
			if cp.Name == name {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// portsKey identifies the port sets of slices.
func portsKey(slices []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, s := range slices {
		for _, p := range s.Ports {
			b.WriteString(";" + *p.Name + ":" + strconv.Itoa(int(*p.Port)))
		}
		b.WriteString("|")
	}
	return b.String()
}

// podReady reports whether pod's Ready condition is True
// (k8s.io/kubernetes pkg/api/v1/pod/util.go, IsPodReady).
func podReady(pod *corev1.Pod) bool {
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	return i >= 0 && pod.Status.Conditions[i].Status == corev1.ConditionTrue
}
