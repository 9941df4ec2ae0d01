package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// DefaultNodes is how many nodes a Cluster runs when Config.Nodes is zero:
// two, so that each node's routing view differs as in the seeds' clusters.
const DefaultNodes = 2

// Config configures a [Cluster]. The zero value is a two-node cluster with
// Kubernetes' defaults.
type Config struct {
	// Nodes is the number of nodes, named node-1, node-2…; DefaultNodes if
	// zero.
	Nodes int
	// Network is how pods are networked: NetworkAuto if empty.
	Network NetworkMode
	// PodCIDR is the range of pod addresses, split into a /24 per node.
	// With network namespaces, podnet.DefaultPodCIDR if zero: it exists
	// only inside the cluster's namespaces. A range of 127.0.0.0/8 puts
	// the pods on the loopback range whatever Network says; it must
	// be a /16 or larger of 127.0.0.0/8 that no other cluster on the
	// machine uses: a cluster claims its range for as long as it runs,
	// across processes. If it is zero, New claims the first free /16 from
	// 127.100.0.0/16 to 127.254.0.0/16.
	PodCIDR netip.Prefix
	// Kubelet configures every node's kubelet. Its NodeName, PodCIDR,
	// Clock, Recorder and StatusUpdated are set by the cluster.
	Kubelet KubeletConfig
	// MinPropagationDelay and MaxPropagationDelay bound each node's delay
	// in applying endpoint changes; see ProxyConfig. Both zero means
	// cluster.DefaultMinPropagationDelay and
	// cluster.DefaultMaxPropagationDelay.
	MinPropagationDelay, MaxPropagationDelay time.Duration
	// KubeletObserveDelay is the time from a change of a pod in the store
	// (its binding to a node, its deletion) to the node's kubelet acting
	// on it; the grace period of a deleted pod starts after it
	// (T17). cluster.DefaultKubeletObserveDelay if zero.
	KubeletObserveDelay time.Duration
	// StatusPushDelay is the time from a kubelet's change of a pod's
	// status (Ready after a probe, a container's exit) to the store
	// holding it, where the controllers see it (E5).
	// cluster.DefaultStatusPushDelay if zero.
	StatusPushDelay time.Duration
	// EndpointSyncDelay and EndpointBatchPeriod are the EndpointSlice
	// controller's delay from a pod change to its publication, and the
	// period it gathers a Service's changes over; see EndpointsConfig.
	EndpointSyncDelay, EndpointBatchPeriod time.Duration
	// Clock is the clock of every component; the real clock if nil.
	Clock clock.Clock
}

// NetworkMode is how a cluster's pods are networked.
type NetworkMode string

const (
	// NetworkAuto gives each pod a network namespace of its own where the
	// system allows (NetworkNamespaces), and falls back to
	// NetworkLoopback where it does not, saying why in Cluster.Network
	// and in each pod's pod_started event.
	NetworkAuto NetworkMode = ""
	// NetworkNamespaces gives each pod a network namespace on its node's
	// bridge (package podnet); New fails where the system allows none.
	NetworkNamespaces NetworkMode = "netns"
	// NetworkLoopback has pods share the machine's network, each with an
	// address of its own on the loopback range.
	NetworkLoopback NetworkMode = "loopback"
)

// Cluster is the embedded local cluster: an object store standing in for
// the API server, a deployment and ReplicaSet controller, a scheduler, an
// EndpointSlice controller, the disruption rules of the eviction API, and
// per node a [Kubelet] and a [Proxy]. Every component records into one
// event stream, stamped by one clock. It implements [cluster.Backend] and
// is safe for concurrent use.
type Cluster struct {
	clock         clock.Clock
	imageCommands map[string][]string
	pauses        bool // the kubelets have a pause command (KubeletConfig.PauseCommand)
	observeDelay  time.Duration
	statusDelay   time.Duration
	log           cluster.EventLog
	nodes         []*node
	endpoints     *Endpoints
	statuses      *delayQueue // pod statuses on their way from the kubelets
	ctx           context.Context
	stop          context.CancelFunc
	done          chan struct{}
	wake          chan struct{}
	serving       sync.WaitGroup // the Serve calls
	podCIDR       netip.Prefix
	claim         io.Closer       // holds podCIDR (claimRange) on the loopback range
	network       *podnet.Network // nil on the loopback range
	clusterIPs    *clusterIPs     // with a network
	api           *API
	fallback      string // why the pods are on the loopback range where namespaces were wanted

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced at every change of the store
	deployments map[string]*deployment
	rss         map[string]*appsv1.ReplicaSet
	pods        map[string]*corev1.Pod
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	pdbObserve  map[string]time.Time // when the disruption controller observes a budget's latest generation, by key
	nextWake    time.Time            // when a controller has work: minReadySeconds, a progress deadline, a budget
}

var _ cluster.Backend = (*Cluster)(nil)

// node is one node: its kubelet and the watch that feeds it, its routing
// view, its schedulability.
type node struct {
	name          string
	kubelet       *Kubelet
	watch         *delayQueue // pods on their way to the kubelet
	proxy         *Proxy
	unschedulable bool // guarded by Cluster.mu
}

// New starts a cluster configured by cfg. Close stops it.
func New(cfg Config) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes || (cfg.PodCIDR.IsValid() && cfg.PodCIDR.Bits() > 16) {
		return nil, fmt.Errorf("%d nodes in %s: want 1 to %d nodes in a /16 or larger", cfg.Nodes, cfg.PodCIDR, MaxNodes)
	}
	if cfg.KubeletObserveDelay == 0 {
		cfg.KubeletObserveDelay = cluster.DefaultKubeletObserveDelay
	}
	if cfg.StatusPushDelay == 0 {
		cfg.StatusPushDelay = cluster.DefaultStatusPushDelay
	}
	if cfg.MinPropagationDelay == 0 && cfg.MaxPropagationDelay == 0 {
		cfg.MinPropagationDelay, cfg.MaxPropagationDelay = cluster.DefaultMinPropagationDelay, cluster.DefaultMaxPropagationDelay
	}
	if cfg.KubeletObserveDelay < 0 || cfg.StatusPushDelay < 0 {
		return nil, fmt.Errorf("kubelet observe delay %s, status push delay %s: want non-negative durations", cfg.KubeletObserveDelay, cfg.StatusPushDelay)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	network, claim, reason, err := podNetwork(&cfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Cluster{
		clock: cfg.Clock, imageCommands: cfg.Kubelet.ImageCommands, pauses: len(cfg.Kubelet.PauseCommand) > 0, observeDelay: cfg.KubeletObserveDelay, statusDelay: cfg.StatusPushDelay,
		statuses: newDelayQueue(cfg.Clock), ctx: ctx, stop: stop, done: make(chan struct{}), wake: make(chan struct{}, 1),
		changed: make(chan struct{}), deployments: map[string]*deployment{}, rss: map[string]*appsv1.ReplicaSet{},
		pods: map[string]*corev1.Pod{}, services: map[string]*corev1.Service{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		pdbObserve: map[string]time.Time{}, podCIDR: cfg.PodCIDR, claim: claim, network: network, fallback: reason,
	}
	if network != nil {
		c.clusterIPs = newClusterIPs(netip.MustParsePrefix(cluster.DefaultServiceCIDR))
	}
	if err := c.start(cfg); err != nil {
		stop()
		c.closeComponents(context.Background())
		return nil, err
	}
	go c.run()
	return c, nil
}

// start builds the nodes and the endpoints controller; what it built
// before an error is left for closeComponents.
func (c *Cluster) start(cfg Config) error {
	ln, err := c.ListenOutside(0)
	if err != nil {
		return fmt.Errorf("the pods' API: %w", err)
	}
	if c.api, err = newAPI(ln); err != nil {
		ln.Close()
		return err
	}
	var proxies []*Proxy
	for i := 1; i <= cfg.Nodes; i++ {
		name := "node-" + strconv.Itoa(i)
		kc := cfg.Kubelet
		kc.NodeName, kc.Clock, kc.Recorder, kc.StatusUpdated = name, cfg.Clock, &c.log, c.statusUpdated
		kc.Env = append([]corev1.EnvVar{{Name: cluster.PodKubeconfigEnv, Value: c.api.Kubeconfig()}}, kc.Env...)
		kc.Network = podnet.NewLoopbackNode(podnet.NodePodCIDR(cfg.PodCIDR, i), c.fallback)
		if c.network != nil {
			kc.Network, kc.Services = c.network.Nodes()[i-1], c.servicesOf
		}
		k, err := NewKubelet(kc)
		if err != nil {
			return err
		}
		// The node's routing view dials from a client pod of the node, not
		// from the node itself; with a network, it is written into the
		// node's kernel, as its kube-proxy would write it.
		p, err := NewNodeProxy(ProxyConfig{NodeName: name, MinPropagationDelay: cfg.MinPropagationDelay, MaxPropagationDelay: cfg.MaxPropagationDelay,
			Clock: cfg.Clock, Recorder: &c.log}, kc.Network, cfg.PodCIDR)
		if err != nil {
			k.Close(context.Background())
			return err
		}
		c.nodes = append(c.nodes, &node{name: name, kubelet: k, watch: newDelayQueue(cfg.Clock), proxy: p})
		proxies = append(proxies, p)
	}
	c.endpoints, err = NewEndpoints(EndpointsConfig{Proxies: proxies, API: c.api, SyncDelay: cfg.EndpointSyncDelay, BatchPeriod: cfg.EndpointBatchPeriod,
		Clock: cfg.Clock, Recorder: &c.log})
	return err
}

// PodCIDR returns the range of the cluster's pod addresses, which it holds
// until Close.
func (c *Cluster) PodCIDR() netip.Prefix { return c.podCIDR }

// Network says how the cluster's pods are networked: "netns", or
// "loopback" and, where namespaces were wanted, why none could be made.
func (c *Cluster) Network() string { return c.nodes[0].kubelet.cfg.Network.Isolation() }

// Namespaced reports whether the cluster's pods have network namespaces of
// their own (Network "netns"), rather than the machine's network.
func (c *Cluster) Namespaced() bool { return c.network != nil }

// ListenOutside listens on port (0 for a free one) of a host that every
// pod reaches but that is none of the cluster's nodes or pods, for a
// service outside the cluster that pods depend on: a host of the
// cluster's network with network namespaces
// (podnet.Network.ListenOutside); without, cluster.LoopbackOutsideHost on
// the machine's loopback interface, which the pods share.
func (c *Cluster) ListenOutside(port int) (net.Listener, error) {
	if c.network != nil {
		return c.network.ListenOutside(port)
	}
	return net.Listen("tcp", net.JoinHostPort(cluster.LoopbackOutsideHost, strconv.Itoa(port)))
}

// podNetwork makes the network that cfg asks for: a podnet.Network, or on
// the loopback range the claim of cfg.PodCIDR, which it sets if zero, and
// why no namespaces were made where they were wanted.
func podNetwork(cfg *Config) (*podnet.Network, io.Closer, string, error) {
	mode := cfg.Network
	if mode == NetworkAuto && cfg.PodCIDR.IsValid() && loopbackRange.Contains(cfg.PodCIDR.Addr()) {
		mode = NetworkLoopback // a range of the machine's loopback interface
	}
	nw, reason, err := NewNetwork(mode, cfg.Nodes, cfg.PodCIDR)
	if err != nil || nw != nil {
		if nw != nil {
			cfg.PodCIDR = nw.PodCIDR()
		}
		return nw, nil, "", err
	}
	if reason != "" {
		cfg.PodCIDR = netip.Prefix{}
	}
	var claim io.Closer
	if cfg.PodCIDR.IsValid() {
		claim, err = claimRange(cfg.PodCIDR)
	} else {
		cfg.PodCIDR, claim, err = ClaimFreeRange()
	}
	return nil, claim, reason, err
}

// NewNetwork makes the network of namespaces of a cluster of nodes nodes,
// with pod range podCIDR (podnet.DefaultPodCIDR if zero), that mode asks
// for: for NetworkNamespaces, or NetworkAuto where the system allows it.
// It returns none for NetworkLoopback, and for NetworkAuto where the
// system allows no namespaces, with why (the reason to give
// podnet.NewLoopbackNode); an error only for NetworkNamespaces or a mode
// it does not know.
func NewNetwork(mode NetworkMode, nodes int, podCIDR netip.Prefix) (nw *podnet.Network, fallback string, err error) {
	switch mode {
	case NetworkAuto, NetworkNamespaces:
		nw, err := podnet.New(podnet.Config{Nodes: nodes, PodCIDR: podCIDR})
		if err == nil {
			return nw, "", nil
		}
		// Where namespaces can't be set up, for want of a privilege or
		// of a kernel module, auto takes the loopback range, and says why.
		if mode == NetworkNamespaces {
			return nil, "", err
		}
		return nil, err.Error(), nil
	case NetworkLoopback:
		return nil, "", nil
	default:
		return nil, "", fmt.Errorf("network %q: want %q, %q or %q", mode, NetworkAuto, NetworkNamespaces, NetworkLoopback)
	}
}

var loopbackRange = netip.MustParsePrefix("127.0.0.0/8")

// Close kills every pod at once (SIGKILL, no grace, no preStop), stops
// the cluster's components and the Serve calls, and returns when every
// process and goroutine of the cluster is gone, or with ctx.Err() when ctx
// ends first (the processes die then all the same, SIGKILLed; only their
// reaping is left). Changes on their way between components are dropped.
// The cluster must not be used afterwards; Close may be called again.
func (c *Cluster) Close(ctx context.Context) error {
	c.mu.Lock()
	c.stop()
	c.mu.Unlock()
	<-c.done
	return c.closeComponents(ctx)
}

// closeComponents stops what New started, in the order that lets nothing
// start again: the watches first, so that no pod reaches a kubelet, then
// the kubelets, then the status, endpoint and proxy queues, then the
// Serve calls, which end with the cluster's context.
func (c *Cluster) closeComponents(ctx context.Context) error {
	for _, n := range c.nodes {
		n.watch.close()
	}
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.kubelet.Close(ctx))
	}
	c.statuses.close()
	if c.endpoints != nil {
		c.endpoints.Close()
	}
	for _, n := range c.nodes {
		n.proxy.Close()
	}
	c.serving.Wait()
	if c.api != nil {
		c.api.close()
	}
	// After every pod is gone: its range is free again.
	if c.claim != nil {
		c.claim.Close()
	}
	if c.network != nil {
		errs = append(errs, c.network.Close())
	}
	return errors.Join(errs...)
}

// run reconciles the controllers whenever the store changes, and when
// minReadySeconds makes a pod available, until Close.
func (c *Cluster) run() {
	defer close(c.done)
	// One reconciliation per round; the loop ends with Close.
	for {
		c.mu.Lock()
		c.reconcileLocked()
		var timer clock.Timer
		var fire <-chan time.Time
		if !c.nextWake.IsZero() {
			timer = c.clock.NewTimer(max(c.nextWake.Sub(c.clock.Now()), 0))
			fire = timer.C()
		}
		c.mu.Unlock()
		select {
		case <-c.ctx.Done():
		case <-c.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// changedLocked wakes the controllers and the waiters of the store.
func (c *Cluster) changedLocked() {
	c.notifyLocked()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// notifyLocked wakes the waiters of the store.
func (c *Cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// reconcileLocked runs each controller once over the store.
func (c *Cluster) reconcileLocked() {
	c.nextWake = time.Time{}
	for _, d := range sortedValues(c.deployments) {
		c.syncDeploymentLocked(d)
	}
	for _, rs := range sortedValues(c.rss) {
		c.syncReplicaSetLocked(rs)
	}
	c.scheduleLocked()
	// Sync reads the pods only while it runs, under c.mu: no copies.
	pods := sortedValues(c.pods)
	for _, svc := range sortedValues(c.services) {
		c.endpoints.Sync(svc, pods)
	}
	c.syncBudgetsLocked()
	for _, d := range c.deployments {
		c.observeRolloutLocked(d)
	}
}

// sortedValues returns m's values ordered by key, so that controllers act
// in the same order every time.
func sortedValues[V any](m map[string]V) []V {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]V, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

func key(namespace, name string) string { return namespace + "/" + name }

// podsLocked returns copies of the pods of namespace.
func (c *Cluster) podsLocked(namespace string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range sortedValues(c.pods) {
		if p.Namespace == namespace {
			out = append(out, p.DeepCopy())
		}
	}
	return out
}

// servicesOf returns the Services of namespace, for a kubelet's new pod.
func (c *Cluster) servicesOf(namespace string) []*corev1.Service {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Service
	for _, s := range sortedValues(c.services) {
		if s.Namespace == namespace {
			out = append(out, s.DeepCopy())
		}
	}
	return out
}

// record stamps e with the cluster's clock and records it.
func (c *Cluster) record(e cluster.Event) {
	e.Time = c.clock.Now()
	c.log.Record(e)
}

// Apply creates or replaces Deployments, Services and PodDisruptionBudgets.
// An object without a namespace goes to "default".
func (c *Cluster) Apply(ctx context.Context, objects []runtime.Object) error {
	for _, o := range objects {
		switch o := o.(type) {
		case *appsv1.Deployment:
			// Refuse at once what no kubelet could run, rather than
			// fail each pod the Deployment makes.
			if err := CheckPodTemplate(&o.Spec.Template, c.imageCommands); err != nil {
				return fmt.Errorf("apply Deployment %s: spec.template.spec.%s: %w", o.Name, err.Field, err.Err)
			}
			if share := o.Spec.Template.Spec.ShareProcessNamespace; share != nil && *share && !c.pauses {
				return fmt.Errorf("apply Deployment %s: spec.template.spec.shareProcessNamespace: %w", o.Name, errNoPause)
			}
		case *corev1.Service, *policyv1.PodDisruptionBudget:
		default:
			return fmt.Errorf("apply %s: the local cluster runs Deployments, Services and PodDisruptionBudgets only", o.GetObjectKind().GroupVersionKind().Kind)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range objects {
		switch o := o.(type) {
		case *appsv1.Deployment:
			d := o.DeepCopy()
			if d.Namespace == "" {
				d.Namespace = "default"
			}
			if err := c.applyDeploymentLocked(d); err != nil {
				return fmt.Errorf("apply Deployment %s: %w", d.Name, err)
			}
		case *corev1.Service:
			s := o.DeepCopy()
			if s.Namespace == "" {
				s.Namespace = "default"
			}
			if err := validService(s, c.services); err != nil {
				return fmt.Errorf("apply Service %s: %w", s.Name, err)
			}
			if c.clusterIPs != nil {
				if err := c.clusterIPs.assign(s, c.services[key(s.Namespace, s.Name)]); err != nil {
					return fmt.Errorf("apply Service %s: %w", s.Name, err)
				}
			}
			c.services[key(s.Namespace, s.Name)] = s
			c.api.setService(s)
		case *policyv1.PodDisruptionBudget:
			p := o.DeepCopy()
			if p.Namespace == "" {
				p.Namespace = "default"
			}
			if err := c.applyBudgetLocked(p); err != nil {
				return fmt.Errorf("apply PodDisruptionBudget %s: %w", p.Name, err)
			}
		}
	}
	c.changedLocked()
	return nil
}

// createPodLocked stores a new pod of rs from its template.
func (c *Cluster) createPodLocked(rs *appsv1.ReplicaSet) {
	pod := &corev1.Pod{
		ObjectMeta: *rs.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *rs.Spec.Template.Spec.DeepCopy(),
	}
	pod.Namespace = rs.Namespace
	// The API server names a generateName pod with 5 random characters.
	pod.Name = rs.Name + "-" + utilrand.String(5)
	for c.pods[key(pod.Namespace, pod.Name)] != nil {
		pod.Name = rs.Name + "-" + utilrand.String(5)
	}
	pod.UID = types.UID(utilrand.String(16))
	pod.CreationTimestamp = metav1.NewTime(c.clock.Now())
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if pod.Spec.TerminationGracePeriodSeconds == nil {
		g := int64(cluster.DefaultTerminationGracePeriodSeconds)
		pod.Spec.TerminationGracePeriodSeconds = &g
	}
	pod.Status.Phase = corev1.PodPending
	c.pods[key(pod.Namespace, pod.Name)] = pod
	c.record(cluster.Event{Kind: cluster.PodCreated, Namespace: pod.Namespace, Pod: pod.Name, Object: "ReplicaSet/" + rs.Name})
}

// scheduleLocked binds each unscheduled pod to the node that
// cluster.ScheduleNode picks, and hands it to that node's kubelet.
func (c *Cluster) scheduleLocked() {
	for _, pod := range sortedValues(c.pods) {
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
		loads := make([]cluster.NodeLoad, len(c.nodes))
		for i, n := range c.nodes {
			loads[i] = cluster.NodeLoad{Name: n.name, Schedulable: !n.unschedulable}
			for _, p := range c.pods {
				if p.Spec.NodeName == n.name {
					loads[i].Pods++
				}
			}
		}
		i := cluster.ScheduleNode(loads)
		if i < 0 {
			continue // Pending until a node is schedulable again
		}
		best := c.nodes[i]
		pod.Spec.NodeName = best.name
		c.record(cluster.Event{Kind: cluster.PodScheduled, Namespace: pod.Namespace, Pod: pod.Name, Node: best.name})
		c.syncPodLocked(best, pod)
	}
}

// syncPodLocked hands pod, as the store holds it now, to node n's kubelet
// once the kubelet's observe delay has passed; the watch keeps the order
// of the changes.
func (c *Cluster) syncPodLocked(n *node, pod *corev1.Pod) {
	pod = pod.DeepCopy()
	n.watch.push(c.observeDelay, func() {
		if err := n.kubelet.SyncPod(pod); err != nil && !errors.Is(err, ErrClosed) {
			c.podRefused(n, pod, err)
		}
	})
}

// podRefused fails a pod that node n's kubelet refused, as a pod whose
// container config is invalid never runs.
func (c *Cluster) podRefused(n *node, pod *corev1.Pod, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stored := c.pods[key(pod.Namespace, pod.Name)]
	if stored == nil || stored.UID != pod.UID {
		return
	}
	stored.Status.Phase = corev1.PodFailed
	stored.Status.Message = err.Error()
	c.record(cluster.Event{Kind: cluster.ContainerStartFailed, Namespace: pod.Namespace, Pod: pod.Name, Node: n.name,
		Fields: map[string]string{"error": err.Error()}})
	c.changedLocked()
}

// statusUpdated takes a pod status from a kubelet; the store holds it
// once the status push delay has passed.
func (c *Cluster) statusUpdated(pod *corev1.Pod) {
	c.statuses.push(c.statusDelay, func() { c.storeStatus(pod) })
}

// storeStatus stores a pod status a kubelet pushed.
func (c *Cluster) storeStatus(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(pod.Namespace, pod.Name)
	stored := c.pods[k]
	if stored == nil || stored.UID != pod.UID {
		return
	}
	stored.Status = pod.Status
	// A terminal pod that is being deleted is removed from the store
	// (T16).
	if stored.DeletionTimestamp != nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
		delete(c.pods, k)
	}
	c.changedLocked()
}

// deletePodLocked deletes pod gracefully, with grace overriding its spec
// when not nil (T1–T3); a pod no node runs goes at once.
func (c *Cluster) deletePodLocked(pod *corev1.Pod, grace *int64) {
	g := int64(cluster.DefaultTerminationGracePeriodSeconds)
	switch {
	case grace != nil:
		g = *grace
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	if g < 0 {
		g = 1
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		g = 0
	}
	if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds <= g {
		return // only a shorter grace changes a deletion (T3)
	}
	c.record(cluster.Event{Kind: cluster.PodDeleted, Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName,
		Fields: map[string]string{"grace": (time.Duration(g) * time.Second).String()}})
	if g == 0 && pod.Spec.NodeName == "" {
		delete(c.pods, key(pod.Namespace, pod.Name))
		c.changedLocked()
		return
	}
	now := metav1.NewTime(c.clock.Now().Add(time.Duration(g) * time.Second))
	pod.DeletionTimestamp = &now
	pod.DeletionGracePeriodSeconds = &g
	if g == 0 {
		// A force delete removes the object; the kubelet learns it from
		// the removal and still kills the containers (T13).
		delete(c.pods, key(pod.Namespace, pod.Name))
	}
	for _, n := range c.nodes {
		if n.name == pod.Spec.NodeName {
			c.syncPodLocked(n, pod)
		}
	}
	c.changedLocked()
}

// DeletePod deletes pod namespace/name as the API's DELETE does; it ignores
// PodDisruptionBudgets.
func (c *Cluster) DeletePod(ctx context.Context, namespace, name string, gracePeriodSeconds *int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pod := c.pods[key(namespace, name)]
	if pod == nil {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, cluster.ErrNotFound)
	}
	c.deletePodLocked(pod, gracePeriodSeconds)
	return nil
}

// Pods returns copies of the pods of namespace as the store holds them,
// terminating ones included, ordered by name.
func (c *Cluster) Pods(namespace string) []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podsLocked(namespace)
}

// Events sends every event from the first one, in order, until ctx ends.
func (c *Cluster) Events(ctx context.Context) <-chan cluster.Event {
	return c.log.Stream(ctx)
}

// EventLog returns the cluster's event log, for readers that follow it by
// index.
func (c *Cluster) EventLog() *cluster.EventLog { return &c.log }

// Logs returns the lines container wrote in pod namespace/name, from
// whichever node ran it.
func (c *Cluster) Logs(ctx context.Context, namespace, pod, container string) ([]cluster.LogLine, error) {
	var lines []cluster.LogLine
	found := false
	for _, n := range c.nodes {
		l, err := n.kubelet.Logs(namespace, pod, container)
		if err == nil {
			lines, found = append(lines, l...), true
		}
	}
	if !found {
		return nil, fmt.Errorf("logs of container %s of pod %s/%s: %w", container, namespace, pod, cluster.ErrNotFound)
	}
	return lines, nil
}

// DialContext connects to a Service through the first node's routing
// view, as a client pod on node-1 would; see [Proxy.DialContext]. Every
// connection it makes has one source address, its node's client's, so that
// with sessionAffinity ClientIP they all stick to one endpoint. A pod's
// address (what LookupHost gives) is dialed as such a pod would: directly.
// Dialer gives the view of another node.
func (c *Cluster) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	p := c.nodes[0].proxy
	if host, _, err := net.SplitHostPort(address); err == nil && p.cfg.Rules == nil {
		if _, err := netip.ParseAddr(host); err == nil {
			// A pod's address, as a headless Service's lookup gives
			// them: a pod's connection goes to it directly. (With rules,
			// the view dials addresses through the node's kernel.)
			return p.cfg.Dial(ctx, network, address)
		}
	}
	return p.DialContext(ctx, network, address)
}

// LookupHost returns the addresses of host, a headless Service's name, as
// the cluster's DNS gives them to a client pod on node-1: its ready
// endpoints in the first node's routing view; see [Proxy.LookupHost].
func (c *Cluster) LookupHost(_ context.Context, host string) ([]netip.Addr, error) {
	return c.nodes[0].proxy.LookupHost(host)
}

// Nodes returns the names of the cluster's nodes, in order: node-1,
// node-2…
func (c *Cluster) Nodes() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name
	}
	return names
}

// Dialer returns the DialContext of node's routing view, which dials as a
// client on that node would, or nil if there is no such node. Each node
// applies endpoint changes after a delay of its own, so that two nodes'
// dialers can route the same Service differently for a while.
func (c *Cluster) Dialer(node string) func(ctx context.Context, network, address string) (net.Conn, error) {
	for _, n := range c.nodes {
		if n.name == node {
			return n.proxy.DialContext
		}
	}
	return nil
}

// Serve accepts connections on ln and forwards each to the Service at
// address ("name.namespace:port") through the first node's routing view,
// for clients outside the cluster (curl, k6, a browser); see
// [Proxy.Serve] for where it differs from iptables. With network
// namespaces, each connection is dialled from the node's client, the one
// source for session affinity; without, each client's address is its
// source. It returns when ctx ends or the
// cluster closes, after closing ln and every forwarded connection, or when
// ln fails; after Close it closes ln and returns an error that wraps
// net.ErrClosed.
func (c *Cluster) Serve(ctx context.Context, ln net.Listener, address string) error {
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		ln.Close()
		return fmt.Errorf("serve Service %s: cluster %w", address, net.ErrClosed)
	}
	c.serving.Add(1)
	c.mu.Unlock()
	defer c.serving.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	return c.nodes[0].proxy.Serve(ctx, ln, address)
}

// waitLocked waits, with c.mu held, until done reports true or ctx ends;
// it unlocks while waiting.
func (c *Cluster) waitLocked(ctx context.Context, done func() bool) error {
	// Each round waits for one change of the store; the loop ends with
	// done or ctx.
	for !done() {
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		}
		c.mu.Lock()
	}
	return nil
}
