package kube

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// syncTimeout bounds the first listing of the observed objects.
const syncTimeout = time.Minute

// observe starts the informers on the namespace's Pods, EndpointSlices,
// ReplicaSets, Deployments and the kubelet's Events about pods, and waits
// until each handler has seen the objects that were there. Their changes
// become events from then on.
func (c *Cluster) observe() error {
	c.factory = informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithNamespace(c.namespace))
	pods := c.factory.Core().V1().Pods().Informer()
	endpointSlices := c.factory.Discovery().V1().EndpointSlices()
	rss := c.factory.Apps().V1().ReplicaSets()
	deployments := c.factory.Apps().V1().Deployments()
	kubeletEvents := c.factory.InformerFor(&corev1.Event{}, kubeletEventInformer(c.namespace))
	regs := make([]cache.ResourceEventHandlerRegistration, 0, 5)
	add := func(i cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		reg, err := i.AddEventHandler(h)
		regs = append(regs, reg)
		return err
	}
	lister := listers{pods: c.factory.Core().V1().Pods().Lister(), rss: rss.Lister(), deployments: deployments.Lister(), slices: endpointSlices.Lister()}
	c.podLister = lister.pods
	for _, err := range []error{
		add(pods, handler[*corev1.Pod]{
			add:    func(p *corev1.Pod, initial bool) { c.podChanged(lister, nil, p, initial) },
			update: func(old, p *corev1.Pod) { c.podChanged(lister, old, p, false) },
			remove: func(p *corev1.Pod) { c.podGone(lister, p) },
		}),
		add(endpointSlices.Informer(), handler[*discoveryv1.EndpointSlice]{
			add:    func(s *discoveryv1.EndpointSlice, initial bool) { c.sliceChanged(lister, s, initial) },
			update: func(_, s *discoveryv1.EndpointSlice) { c.sliceChanged(lister, s, false) },
			remove: func(s *discoveryv1.EndpointSlice) { c.sliceChanged(lister, s, false) },
		}),
		add(rss.Informer(), handler[*appsv1.ReplicaSet]{
			add:    func(rs *appsv1.ReplicaSet, initial bool) { c.replicaSetChanged(lister, nil, rs, initial) },
			update: func(old, rs *appsv1.ReplicaSet) { c.replicaSetChanged(lister, old, rs, false) },
			remove: func(*appsv1.ReplicaSet) { c.changedObserved(lister) },
		}),
		add(deployments.Informer(), handler[*appsv1.Deployment]{
			add:    func(*appsv1.Deployment, bool) { c.changedObserved(lister) },
			update: func(_, _ *appsv1.Deployment) { c.changedObserved(lister) },
			remove: func(*appsv1.Deployment) { c.changedObserved(lister) },
		}),
		add(kubeletEvents, handler[*corev1.Event]{
			add:    func(e *corev1.Event, initial bool) { c.kubeletEventSeen(lister, e, initial) },
			update: func(_, e *corev1.Event) { c.kubeletEventSeen(lister, e, false) },
			remove: c.kubeletEventGone,
		}),
	} {
		if err != nil {
			return fmt.Errorf("observe namespace %s: %w", c.namespace, err)
		}
	}
	c.factory.Start(c.ctx.Done())
	synced := make([]cache.InformerSynced, len(regs))
	for i, r := range regs {
		synced[i] = r.HasSynced
	}
	ctx, cancel := context.WithTimeout(c.ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("observe namespace %s: the informers did not list Pods, EndpointSlices, ReplicaSets, Deployments and Events within %v: is the API server reachable, and may these be listed and watched?",
			c.namespace, syncTimeout)
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	return nil
}

// handler adapts typed functions to cache.ResourceEventHandler. remove
// also receives the last known state of an object whose deletion the
// watch missed.
type handler[T any] struct {
	add    func(obj T, initial bool)
	update func(old, obj T)
	remove func(obj T)
}

func (h handler[T]) OnAdd(obj any, initial bool) {
	if o, ok := obj.(T); ok {
		h.add(o, initial)
	}
}

func (h handler[T]) OnUpdate(old, obj any) {
	o, ok1 := old.(T)
	n, ok2 := obj.(T)
	if ok1 && ok2 {
		h.update(o, n)
	}
}

func (h handler[T]) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, ok := obj.(T); ok {
		h.remove(o)
	}
}

// record stamps e with the cluster's clock and records it.
func (c *Cluster) record(e cluster.Event) {
	e.Time = c.clock.Now()
	c.log.Record(e)
}

// Events sends every event from the first one, in order, until ctx ends.
// Events stem from what the informers see after New returned, and from
// the calls of this Cluster (evictions, cordons); their times are when the
// backend saw them.
func (c *Cluster) Events(ctx context.Context) <-chan cluster.Event {
	return c.log.Stream(ctx)
}

// EventLog returns the cluster's event log, for readers that follow it by
// index.
func (c *Cluster) EventLog() *cluster.EventLog { return &c.log }

// podState is what the backend last saw of a pod.
type podState struct {
	node, ip, phase      string
	ready                bool
	deleting, terminated bool
	containers           map[string]containerState
}

// containerState is what the backend last saw of a container of a pod.
// A container's instances are numbered by their restart count, from 0.
type containerState struct {
	starts   int32     // how many instances were seen to start (or passed unseen)
	exits    int32     // how many instances were seen to end (or passed unseen)
	exitedAt time.Time // when the backend saw the newest exit
	backOffs int32     // how many instances' back-offs were recorded (or passed unseen)
}

// podChanged turns a change of pod (old is nil for a new one) into events,
// in the order the embedded kubelet records them, and starts following
// the log of each container instance that started. A pod of the initial
// list raises no events: it is only remembered. A load pod raises none
// either, and its log is LoadPods' to read: it is the instrument, not the
// workload.
func (c *Cluster) podChanged(l listers, old, pod *corev1.Pod, initial bool) {
	c.mu.Lock()
	defer c.changedLocked(l)
	if _, ok := pod.Labels[LoadLabel]; ok {
		return
	}
	prev := c.pods[pod.UID]
	if prev == nil {
		prev = &podState{containers: map[string]containerState{}}
		c.pods[pod.UID] = prev
	}
	events, started := podEvents(prev, pod, old == nil && !initial, c.clock.Now())
	if !initial {
		for _, e := range events {
			c.record(e)
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if slices.Contains(started, s.Name) {
			c.follow(pod.Namespace, pod.Name, s.Name, s.RestartCount)
		}
	}
}

// podEvents updates prev to pod, seen at now, and returns the events of
// the change and the containers whose running instance is new. created
// says that pod is new to the API.
//
// A container status shows the newest instance (its restart count is
// RestartCount) as its state, and the one before as its last state; while
// the container waits to restart, its newest instance, ended, is the last
// state. The kubelet's updates may be coalesced: an instance can start and
// end between two of them, or be seen only once ended. Each instance is
// therefore one container_started when the count shows it, running or
// not, and one container_exited when its end is seen; an instance that
// came and went unseen has no exit.
func podEvents(prev *podState, pod *corev1.Pod, created bool, now time.Time) ([]cluster.Event, []string) {
	var out []cluster.Event
	var started []string
	ev := func(kind cluster.EventKind, container string, fields map[string]string) {
		if init := cluster.ContainerFields(&pod.Spec, container); init != nil {
			if fields == nil {
				fields = map[string]string{}
			}
			maps.Copy(fields, init)
		}
		out = append(out, cluster.Event{Kind: kind, Namespace: pod.Namespace, Pod: pod.Name, Container: container,
			Node: pod.Spec.NodeName, Fields: fields})
	}
	// Init containers and sidecars first, as the kubelet starts them.
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	if created {
		ev(cluster.PodCreated, "", nil)
		if ref := metav1.GetControllerOf(pod); ref != nil {
			out[len(out)-1].Object = ref.Kind + "/" + ref.Name
		}
	}
	if pod.Spec.NodeName != "" && prev.node == "" {
		prev.node = pod.Spec.NodeName
		ev(cluster.PodScheduled, "", nil)
	}
	if pod.Status.PodIP != "" && prev.ip == "" {
		prev.ip = pod.Status.PodIP
		ev(cluster.PodStarted, "", map[string]string{"ip": pod.Status.PodIP})
	}
	if pod.DeletionTimestamp != nil && !prev.deleting {
		prev.deleting = true
		grace := map[string]string{"grace": (time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second).String()}
		ev(cluster.PodDeleted, "", grace)
		ev(cluster.PodTerminating, "", grace)
	}
	start := func(cs *containerState, name string, n int32, end *corev1.ContainerStateTerminated) {
		// An instance whose start failed never ran: the embedded kubelet
		// records no start for it either.
		if end == nil || end.Reason != startError {
			ev(cluster.ContainerStarted, name, map[string]string{"restart": strconv.Itoa(int(n))})
		}
		cs.starts = n + 1
	}
	exit := func(cs *containerState, name string, n int32, end *corev1.ContainerStateTerminated) {
		ev(cluster.ContainerExited, name, exitFields(end))
		cs.exits, cs.exitedAt = n+1, now
	}
	for _, s := range statuses {
		cs := prev.containers[s.Name]
		n, last := s.RestartCount, s.LastTerminationState.Terminated
		lastN := n - 1 // the instance of the last state
		if s.State.Waiting != nil && last != nil {
			lastN = n
		}
		for cs.starts < lastN {
			start(&cs, s.Name, cs.starts, nil)
		}
		if cs.starts <= lastN {
			start(&cs, s.Name, lastN, last)
		}
		if last != nil && cs.exits <= lastN {
			exit(&cs, s.Name, lastN, last)
		}
		if r, t := s.State.Running, s.State.Terminated; (r != nil || t != nil) && cs.starts <= n {
			start(&cs, s.Name, n, t)
			if r != nil && !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == s.Name }) {
				started = append(started, s.Name)
			}
		}
		prev.containers[s.Name] = cs
		// Each container's exit before the next one's start, as an init
		// container ends before the next starts; a sidecar's after the
		// app containers', as they stop (C3).
		if t := s.State.Terminated; t != nil && cs.exits <= s.RestartCount && !cluster.OfSidecar(cluster.ContainerFields(&pod.Spec, s.Name)) {
			exit(&cs, s.Name, s.RestartCount, t)
			prev.containers[s.Name] = cs
		}
	}
	for _, s := range slices.Backward(pod.Status.InitContainerStatuses) {
		cs := prev.containers[s.Name]
		if t := s.State.Terminated; t != nil && cs.exits <= s.RestartCount && cluster.OfSidecar(cluster.ContainerFields(&pod.Spec, s.Name)) {
			exit(&cs, s.Name, s.RestartCount, t)
			prev.containers[s.Name] = cs
		}
	}
	// An exit comes before the unreadiness it brings, and both before the
	// back-off, as the embedded kubelet records them.
	if ready := podutils.IsPodReady(pod); ready != prev.ready {
		prev.ready = ready
		if ready {
			ev(cluster.PodReady, "", nil)
		} else {
			ev(cluster.PodUnready, "", nil)
		}
	}
	for _, s := range statuses {
		cs := prev.containers[s.Name]
		if w := s.State.Waiting; w != nil && w.Reason == crashLoopBackOff && s.LastTerminationState.Terminated != nil && cs.backOffs <= s.RestartCount {
			cs.backOffs = s.RestartCount + 1
			var fields map[string]string
			if d, ok := backOffDelay(w.Message); ok {
				fields = map[string]string{"delay": max(0, d-now.Sub(cs.exitedAt)).String()}
			}
			ev(cluster.BackOff, s.Name, fields)
		}
		prev.containers[s.Name] = cs
	}
	prev.phase = string(pod.Status.Phase)
	if (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && !prev.terminated {
		prev.terminated = true
		ev(cluster.PodTerminated, "", map[string]string{"phase": string(pod.Status.Phase)})
	}
	return out, started
}

// The kubelet's reasons (k8s.io/kubernetes pkg/kubelet/container,
// ErrCrashLoopBackOff; a failed start as containerd reports it).
const (
	crashLoopBackOff = "CrashLoopBackOff"
	startError       = "StartError"
)

// backOffDelay reads the back-off from the message of a container waiting
// in CrashLoopBackOff, which the kubelet writes as "back-off 20s
// restarting failed container=NAME pod=NAME_NAMESPACE(UID)" (k8s.io/kubernetes
// pkg/kubelet/kuberuntime/kuberuntime_manager.go, doBackOff): the whole
// back-off from the exit to the restart.
func backOffDelay(message string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(message, "back-off ")
	if !ok {
		return 0, false
	}
	word, _, _ := strings.Cut(rest, " ")
	d, err := time.ParseDuration(word)
	return d, err == nil && d > 0
}

// exitFields are the fields of a ContainerExited event for t.
func exitFields(t *corev1.ContainerStateTerminated) map[string]string {
	return map[string]string{"code": strconv.Itoa(int(t.ExitCode)), "reason": t.Reason}
}

// podGone records the removal of pod from the API. A pod removed without
// a graceful deletion seen (a pod no node ran, or a deletion with grace 0)
// is recorded as deleted with grace 0s; a pod whose terminal phase was not
// seen is recorded as terminated with the last phase seen, since the API
// shows nothing of it afterwards.
func (c *Cluster) podGone(l listers, pod *corev1.Pod) {
	c.mu.Lock()
	defer c.changedLocked(l)
	if _, ok := pod.Labels[LoadLabel]; ok {
		return
	}
	prev := c.pods[pod.UID]
	delete(c.pods, pod.UID)
	if prev == nil {
		return
	}
	ev := func(kind cluster.EventKind, fields map[string]string) {
		c.record(cluster.Event{Kind: kind, Namespace: pod.Namespace, Pod: pod.Name, Node: prev.node, Fields: fields})
	}
	if !prev.deleting {
		ev(cluster.PodDeleted, map[string]string{"grace": "0s"})
		if prev.node == "" {
			return
		}
		ev(cluster.PodTerminating, map[string]string{"grace": "0s"})
	}
	if !prev.terminated {
		phase := string(pod.Status.Phase)
		if phase == "" {
			phase = prev.phase
		}
		ev(cluster.PodTerminated, map[string]string{"phase": phase})
	}
}

// sliceChanged records the endpoints of the Service that slice belongs to
// when they changed: every endpoint of its EndpointSlices, ordered by slice
// name.
func (c *Cluster) sliceChanged(l listers, slice *discoveryv1.EndpointSlice, initial bool) {
	svc := slice.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	all, err := l.slices.EndpointSlices(slice.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc}))
	if err != nil {
		return
	}
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	eps := cluster.EndpointsOf(all...)
	key := slice.Namespace + "/" + svc
	c.mu.Lock()
	defer c.changedLocked(l)
	if prev, ok := c.services[key]; ok && slices.Equal(prev, eps) {
		return
	}
	c.services[key] = eps
	if !initial {
		c.record(cluster.Event{Kind: cluster.EndpointsPublished, Object: "Service/" + key, Endpoints: cluster.Endpoints{List: eps}})
	}
}

// replicaSetChanged records a change of rs's desired replicas; a new
// ReplicaSet counts as scaled from 0.
func (c *Cluster) replicaSetChanged(l listers, old, rs *appsv1.ReplicaSet, initial bool) {
	c.mu.Lock()
	defer c.changedLocked(l)
	from, to := int32(0), ptr.Deref(rs.Spec.Replicas, cluster.DefaultReplicas)
	if old != nil {
		from = ptr.Deref(old.Spec.Replicas, cluster.DefaultReplicas)
	}
	if initial || from == to {
		return
	}
	c.record(cluster.Event{Kind: cluster.ReplicaSetScaled, Namespace: rs.Namespace, Object: "ReplicaSet/" + rs.Name,
		Fields: map[string]string{"from": strconv.Itoa(int(from)), "to": strconv.Itoa(int(to))}})
}

// changedObserved is changedLocked for a handler that changes no state of
// its own.
func (c *Cluster) changedObserved(l listers) {
	c.mu.Lock()
	c.changedLocked(l)
}

// changedLocked updates the rollouts from the informers' caches, wakes
// the waiters, and unlocks c.mu.
func (c *Cluster) changedLocked(l listers) {
	defer c.mu.Unlock()
	c.observeRolloutsLocked(l)
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait waits until done, called with c.mu held, reports true, or ctx
// ends.
func (c *Cluster) wait(ctx context.Context, done func() bool) error {
	// Each round waits for one change; the loop ends with done or ctx.
	for {
		c.mu.Lock()
		ok, changed := done(), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return fmt.Errorf("kube: cluster closed")
		}
	}
}
