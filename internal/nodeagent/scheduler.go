package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// schedulerRetry is how long the scheduler waits before it tries again
// after a binding failed for another reason than the pod's own change.
const schedulerRetry = time.Second

// Scheduler binds the pods of a cluster that no node runs yet to the
// schedulable Ready node with the fewest pods (cluster.ScheduleNode, the
// embedded cluster's rule), through the pods/binding subresource, and posts
// the Scheduled Event as kube-scheduler does. A cordoned node
// (spec.unschedulable) or a node that is not Ready gets no pods; a pod
// stays Pending while no node fits, and is bound once one does.
type Scheduler struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	nodes   corelisters.NodeLister
	events  record.EventBroadcaster
	api     record.EventRecorder
	ctx     context.Context
	cancel  context.CancelFunc
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once // of stop

	// assumed holds the pods bound by the scheduler that its cache does
	// not show bound yet, and their node, so that the next pods count
	// them (kube-scheduler's assume cache). Only the run goroutine uses it.
	assumed map[types.UID]string
}

// StartScheduler starts a scheduler of the cluster of client, and returns
// once its caches have synced. ctx bounds the start only; Close stops it.
func StartScheduler(ctx context.Context, client kubernetes.Interface) (*Scheduler, error) {
	s := &Scheduler{client: client, wake: make(chan struct{}, 1), done: make(chan struct{}), assumed: map[types.UID]string{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.events = record.NewBroadcaster(record.WithContext(s.ctx))
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	s.api = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: corev1.DefaultSchedulerName})
	s.factory = informers.NewSharedInformerFactory(client, 0)
	pods, nodes := s.factory.Core().V1().Pods(), s.factory.Core().V1().Nodes()
	s.pods, s.nodes = pods.Lister(), nodes.Lister()
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(wake); err != nil {
			s.stop()
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	s.factory.Start(s.ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, nodes.Informer().HasSynced) {
		s.stop()
		return nil, fmt.Errorf("scheduler: caches of pods and nodes: %w", context.Cause(ctx))
	}
	go s.run()
	return s, nil
}

// Close stops the scheduler and returns when its goroutines are gone.
// Pods already bound stay bound. Close may be called again.
func (s *Scheduler) Close() {
	s.stop()
	<-s.done
}

// stop stops the informers and the events, once.
func (s *Scheduler) stop() {
	s.once.Do(func() {
		s.cancel()
		s.factory.Shutdown()
		s.events.Shutdown()
	})
}

// poke asks run for a scheduling pass.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run makes a scheduling pass at each change of pods or nodes, and again
// after schedulerRetry when a binding failed, until Close.
func (s *Scheduler) run() {
	defer close(s.done)
	retry := time.NewTimer(0)
	defer retry.Stop()
	<-retry.C
	// One pass per round; the loop ends with Close.
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-retry.C:
		}
		if !s.schedule() {
			retry.Reset(schedulerRetry)
		}
	}
}

// schedule binds every unscheduled pod, oldest first, to the node
// cluster.ScheduleNode picks. It reports false if a binding failed and
// should be tried again.
func (s *Scheduler) schedule() bool {
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		return false
	}
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return false
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	loads := make([]cluster.NodeLoad, len(nodes))
	index := map[string]int{}
	for i, n := range nodes {
		loads[i] = cluster.NodeLoad{Name: n.Name, Schedulable: schedulable(n)}
		index[n.Name] = i
	}
	var pending []*corev1.Pod
	cached := map[types.UID]bool{}
	for _, p := range pods {
		cached[p.UID] = true
		node := p.Spec.NodeName
		if node == "" {
			node = s.assumed[p.UID]
		} else {
			delete(s.assumed, p.UID)
		}
		if i, ok := index[node]; ok {
			loads[i].Pods++
		}
		if node == "" && p.DeletionTimestamp == nil && p.Spec.SchedulerName == corev1.DefaultSchedulerName {
			pending = append(pending, p)
		}
	}
	for uid := range s.assumed {
		if !cached[uid] {
			delete(s.assumed, uid)
		}
	}
	slices.SortFunc(pending, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	ok := true
	for _, p := range pending {
		i := cluster.ScheduleNode(loads)
		if i < 0 {
			return ok // Pending until a node is schedulable: a node's change wakes the scheduler
		}
		node := loads[i].Name
		err := s.client.CoreV1().Pods(p.Namespace).Bind(s.ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
		switch {
		case err == nil:
			s.assumed[p.UID] = node
			loads[i].Pods++
			s.api.Eventf(p, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", p.Namespace, p.Name, node)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || s.ctx.Err() != nil:
			// Gone, replaced or bound meanwhile: its change wakes the
			// scheduler.
		default:
			utilruntime.HandleError(fmt.Errorf("scheduler: bind pod %s/%s to %s: %w", p.Namespace, p.Name, node, err))
			ok = false
		}
	}
	return ok
}

// schedulable reports whether n takes new pods: Ready, not cordoned, not
// being deleted.
func schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable || n.DeletionTimestamp != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
