package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
)

// Config configures an [Agent].
type Config struct {
	// Client is how the agent speaks to the API server. It needs the
	// rights of a node: Nodes, Leases in kube-node-lease, the pods bound
	// to the node and their status, Events (an administrator in
	// `closingtime cluster`). It should be the agent's own, with the
	// kubelet's rate limits, cluster.DefaultKubeletAPIQPS and
	// cluster.DefaultKubeletAPIBurst.
	Client kubernetes.Interface
	// NodeName is the name of the Node the agent registers and runs pods
	// for; it is required.
	NodeName string
	// Kubelet configures the node's local.Kubelet. The agent sets its
	// NodeName, Clock (the real clock: the API server's timestamps are
	// real), Recorder and StatusUpdated; PodCIDR, ImageCommands,
	// PIDNamespace, WorkingDir, Env… come from the caller.
	Kubelet local.KubeletConfig
	// Recorder, if set, also receives the kubelet's events in closingtime's
	// event model, as they happen.
	Recorder cluster.Recorder
	// KubeletPort, if non-zero, is published as the Node's kubelet
	// endpoint (status.daemonEndpoints.kubeletEndpoint.Port, at the
	// InternalIP 127.0.0.1): where the API server reaches the node's
	// kubelet API, for logs.
	KubeletPort int32
}

// Agent is a node of a real cluster whose pods run as local processes:
// closingtime's [local.Kubelet], driven through the API server as the
// kubelet is. It registers its Node, Ready, and renews the node's Lease;
// it watches the pods bound to the node and hands each version to the
// Kubelet, which starts, probes, restarts and terminates their containers;
// it pushes every status change to the pod's status subresource, deletes a
// terminated pod whose deletion was requested (T16), and posts the
// kubelet's Events. It binds no pods: a [Scheduler] does.
type Agent struct {
	cfg     Config
	client  kubernetes.Interface
	kubelet *local.Kubelet
	pods    corelisters.PodLister
	factory informers.SharedInformerFactory
	events  record.EventBroadcaster
	api     record.EventRecorder // the kubelet's Events
	// ctx bounds the agent's requests, its informers and its heartbeat;
	// Close ends it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closing  bool
	admitted map[types.UID]bool // every pod seen, by UID: whether the kubelet runs it
	nodeUID  types.UID
}

// Start registers the node cfg.NodeName, creating its Node or, when one of
// that name exists (a restarted agent), updating it, and its Lease, then
// runs the pods bound to it until Close. It returns once the agent has
// seen every pod already bound to the node. ctx bounds the start only.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.Client == nil {
		return nil, errors.New("node agent: Config.NodeName and Config.Client are required")
	}
	a := &Agent{cfg: cfg, client: cfg.Client, admitted: map[types.UID]bool{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	kc := cfg.Kubelet
	kc.NodeName, kc.Clock, kc.Recorder, kc.StatusUpdated = cfg.NodeName, clock.RealClock{}, eventRecorder{a}, a.statusUpdated
	var err error
	if a.kubelet, err = local.NewKubelet(kc); err != nil {
		a.cancel()
		return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	a.events = record.NewBroadcaster(record.WithContext(a.ctx))
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	a.api = a.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName})
	if err := a.start(ctx); err != nil {
		a.Close(context.Background())
		return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	return a, nil
}

// start registers the node and starts the pod informer and the heartbeat.
func (a *Agent) start(ctx context.Context) error {
	if err := a.register(ctx); err != nil {
		return err
	}
	if err := a.renewLease(ctx); err != nil {
		return err
	}
	a.factory = informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}))
	inf := a.factory.Core().V1().Pods()
	a.pods = inf.Lister()
	reg, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.podChanged(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { a.podChanged(obj.(*corev1.Pod)) },
		DeleteFunc: a.podDeleted,
	})
	if err != nil {
		return err
	}
	a.factory.Start(a.ctx.Done())
	// The handler has seen every pod of the first list, not only the cache.
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("pods bound to the node: %w", context.Cause(ctx))
	}
	a.wg.Add(1)
	go a.heartbeat()
	return nil
}

// Kubelet returns the node's kubelet: its pods' logs are there.
func (a *Agent) Kubelet() *local.Kubelet { return a.kubelet }

// Close stops the agent as a node that goes away: it stops watching pods,
// kills every pod's processes at once (Kubelet.Close: no preStop, no
// grace), stops renewing the Lease and returns when every process and
// goroutine of the agent is gone, or with ctx.Err() when ctx ends first.
// It reports no status of the killed pods and leaves the Node object: the
// API keeps the node's last word, as it does for a node that died. Later
// calls return nil at once.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	already := a.closing
	a.closing = true
	a.mu.Unlock()
	if already {
		return nil
	}
	// The informers and the heartbeat stop, and requests under way end:
	// nothing waits for the API server.
	a.cancel()
	if a.factory != nil {
		a.factory.Shutdown()
	}
	err := a.kubelet.Close(ctx)
	a.events.Shutdown()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// isClosing reports whether Close was called.
func (a *Agent) isClosing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

// podChanged acts on a version of a pod bound to the node. A pod is
// admitted once, at its first version: its spec does not change
// afterwards. A pod being deleted is terminated if the kubelet runs it,
// and deleted for good (grace 0) once it is terminal or if it never ran
// here (T16).
func (a *Agent) podChanged(pod *corev1.Pod) {
	a.mu.Lock()
	admitted, seen := a.admitted[pod.UID]
	admit := !seen && pod.DeletionTimestamp == nil && !terminal(pod.Status.Phase)
	if !seen {
		a.admitted[pod.UID] = admit
	}
	a.mu.Unlock()
	switch {
	case admit:
		if err := a.kubelet.SyncPod(pod); err != nil && !errors.Is(err, local.ErrClosed) {
			a.mu.Lock()
			a.admitted[pod.UID] = false
			a.mu.Unlock()
			a.refuse(pod, err)
		}
	case pod.DeletionTimestamp == nil:
	case admitted && !terminal(pod.Status.Phase):
		// The kubelet terminates it, or shortens its grace (T3, T5); its
		// terminal status brings the final delete.
		a.kubelet.SyncPod(pod)
	default:
		a.finalDelete(pod)
	}
}

// podDeleted acts on a pod gone from the API: one the kubelet runs is
// killed all the same, at once (a force delete, T13).
func (a *Agent) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	admitted := a.admitted[pod.UID]
	delete(a.admitted, pod.UID)
	a.mu.Unlock()
	if !admitted {
		return
	}
	pod = pod.DeepCopy()
	now, zero := metav1.Now(), int64(0)
	if pod.DeletionTimestamp == nil {
		pod.DeletionTimestamp = &now
	}
	pod.DeletionGracePeriodSeconds = &zero
	a.kubelet.SyncPod(pod)
}

// refuse fails a pod the kubelet refused to run, as a pod whose container
// config is invalid never runs.
func (a *Agent) refuse(pod *corev1.Pod, err error) {
	eventRecorder{a}.Record(cluster.Event{Time: time.Now(), Kind: cluster.ContainerStartFailed, Namespace: pod.Namespace, Pod: pod.Name,
		Node: a.cfg.NodeName, Fields: map[string]string{"error": err.Error()}})
	failed := pod.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	failed.Status.Message = err.Error()
	a.pushStatus(failed)
}

// statusUpdated takes a status from the kubelet.
func (a *Agent) statusUpdated(pod *corev1.Pod) {
	if a.isClosing() {
		return
	}
	a.pushStatus(pod)
}

// pushStatus writes pod's status to the API as the kubelet's status
// manager does: a strategic merge patch from the status the API holds to
// the new one, carrying the pod's UID as a precondition, and keeping the
// conditions that others own (PodScheduled, DisruptionTarget). A pod gone
// or replaced by another of the same name is left alone. A pod whose
// deletion was requested is deleted for good once its status is terminal
// (T16).
func (a *Agent) pushStatus(pod *corev1.Pod) {
	pods := a.client.CoreV1().Pods(pod.Namespace)
	var updated *corev1.Pod
	retriable := func(err error) bool {
		return !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && a.ctx.Err() == nil
	}
	err := retry.OnError(retry.DefaultBackoff, retriable, func() error {
		cur, err := pods.Get(a.ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || (terminal(cur.Status.Phase) && !terminal(pod.Status.Phase)) {
			// Another pod, or a terminal one: its status is final.
			updated = cur
			return nil
		}
		patch, err := statusPatch(cur, mergeStatus(cur.Status, pod.Status))
		if err != nil {
			return err
		}
		updated, err = pods.Patch(a.ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || a.ctx.Err() != nil:
		return
	case err != nil:
		utilruntime.HandleError(fmt.Errorf("node %s: status of pod %s/%s: %w", a.cfg.NodeName, pod.Namespace, pod.Name, err))
		return
	}
	if updated.UID == pod.UID && updated.DeletionTimestamp != nil && terminal(updated.Status.Phase) {
		a.finalDelete(updated)
	}
}

// kubeletConditions are the pod conditions the kubelet owns; it keeps the
// others as the API has them (k8s.io/kubernetes pkg/kubelet/types/pod_status.go,
// PodConditionsByKubelet).
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true, corev1.PodInitialized: true, corev1.PodReady: true, corev1.ContainersReady: true,
}

// mergeStatus returns the kubelet's status next with the conditions of
// old that others own, the pod's addresses as the API knows them
// (PodIPInAPI) and the host addresses filled in.
func mergeStatus(old, next corev1.PodStatus) corev1.PodStatus {
	merged := *next.DeepCopy()
	for _, c := range old.Conditions {
		if !kubeletConditions[c.Type] {
			merged.Conditions = append(merged.Conditions, c)
		}
	}
	if ip, err := netip.ParseAddr(merged.PodIP); err == nil {
		merged.PodIP = PodIPInAPI(ip).String()
	}
	for i, p := range merged.PodIPs {
		if ip, err := netip.ParseAddr(p.IP); err == nil {
			merged.PodIPs[i].IP = PodIPInAPI(ip).String()
		}
	}
	if merged.HostIP != "" && len(merged.HostIPs) == 0 {
		merged.HostIPs = []corev1.HostIP{{IP: merged.HostIP}}
	}
	return merged
}

// statusPatch returns the strategic merge patch that turns cur's status
// into status, with cur's UID as a precondition (k8s.io/kubernetes
// pkg/util/pod/pod.go, PatchPodStatus).
func statusPatch(cur *corev1.Pod, status corev1.PodStatus) ([]byte, error) {
	type podStatus struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Status   corev1.PodStatus  `json:"status"`
	}
	meta := metav1.ObjectMeta{UID: cur.UID}
	oldData, err := json.Marshal(podStatus{meta, cur.Status})
	if err != nil {
		return nil, err
	}
	newData, err := json.Marshal(podStatus{meta, status})
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, corev1.Pod{})
	if err != nil {
		return nil, err
	}
	// The UID is the same in both, so the diff leaves it out: put it back
	// as the precondition.
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	m["metadata"] = map[string]any{"uid": string(cur.UID)}
	return json.Marshal(m)
}

// finalDelete deletes pod for good, with grace 0 and its UID as a
// precondition, as the kubelet does once a pod being deleted is terminal
// (T16).
func (a *Agent) finalDelete(pod *corev1.Pod) {
	zero, uid := int64(0), pod.UID
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(a.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && a.ctx.Err() == nil {
		utilruntime.HandleError(fmt.Errorf("node %s: delete pod %s/%s: %w", a.cfg.NodeName, pod.Namespace, pod.Name, err))
	}
}

func terminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// eventRecorder is the kubelet's Recorder: it passes each event on to
// Config.Recorder and posts the API Event the kubelet posts for it.
type eventRecorder struct{ a *Agent }

// Record implements cluster.Recorder.
func (r eventRecorder) Record(e cluster.Event) {
	a := r.a
	if a.cfg.Recorder != nil {
		a.cfg.Recorder.Record(e)
	}
	reason, message, warning := kubeletEvent(e)
	if reason == "" {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: e.Namespace, Name: e.Pod}
	var pod *corev1.Pod
	if a.pods != nil {
		if p, err := a.pods.Pods(e.Namespace).Get(e.Pod); err == nil {
			pod = p
			ref.UID, ref.ResourceVersion = pod.UID, pod.ResourceVersion
		}
	}
	if e.Container != "" {
		ref.FieldPath = "spec.containers{" + e.Container + "}"
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	if e.Kind != cluster.PodTerminating {
		a.api.Event(ref, typ, reason, message)
		return
	}
	// The kubelet reports each container it stops.
	if pod != nil {
		for _, c := range pod.Spec.Containers {
			ref := *ref
			ref.FieldPath = "spec.containers{" + c.Name + "}"
			a.api.Event(&ref, typ, reason, "Stopping container "+c.Name)
		}
	}
}

// kubeletEvent returns the reason, message and type of the Event the
// kubelet posts for e (k8s.io/kubernetes pkg/kubelet/events/event.go and
// the messages of pkg/kubelet/kuberuntime, pkg/kubelet/prober), or "" when
// it posts none. Unhealthy comes at each failed run of a probe, as the
// kubelet's prober posts it, not at a change of the stored result; the
// Event recorder counts identical ones into one Event, as the kubelet's
// does.
func kubeletEvent(e cluster.Event) (reason, message string, warning bool) {
	switch e.Kind {
	case cluster.ContainerStarted:
		return "Started", "Started container " + e.Container, false
	case cluster.ContainerStartFailed:
		return "Failed", "Error: " + e.Fields["error"], true
	case cluster.ProbeFailed:
		// The kubelet's own words ("Readiness probe failed: ..."), which
		// tools that read Events match; the probe's target is closingtime's
		// addition, for its own notices (cluster.ProbeFailure).
		probe := e.Fields["probe"]
		return "Unhealthy", strings.ToUpper(probe[:1]) + probe[1:] + " probe failed: " + e.Fields["output"], true
	case cluster.LivenessKill:
		return "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", e.Container, e.Fields["probe"]), false
	case cluster.PodTerminating:
		return "Killing", "", false
	case cluster.PreStopFinished:
		if e.Fields["error"] == "" {
			return "", "", false
		}
		return "FailedPreStopHook", "PreStopHook failed: " + e.Fields["error"], true
	case cluster.BackOff:
		return "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s", e.Container, e.Pod, e.Namespace), true
	}
	return "", "", false
}

// heartbeat renews the node's Lease every DefaultNodeLeaseRenewInterval
// and reports its status every DefaultNodeStatusReportFrequency, until
// Close.
func (a *Agent) heartbeat() {
	defer a.wg.Done()
	lease := time.NewTicker(cluster.DefaultNodeLeaseRenewInterval)
	defer lease.Stop()
	status := time.NewTicker(cluster.DefaultNodeStatusReportFrequency)
	defer status.Stop()
	// One renewal or report per round; the loop ends with Close.
	for {
		var err error
		select {
		case <-a.ctx.Done():
			return
		case <-lease.C:
			err = a.renewLease(a.ctx)
		case <-status.C:
			err = a.register(a.ctx)
		}
		if err != nil && a.ctx.Err() == nil {
			utilruntime.HandleError(fmt.Errorf("node %s: %w", a.cfg.NodeName, err))
		}
	}
}

// register creates the Node, or updates the existing one's labels and
// status (a restarted agent, a status report).
//
// The API server's TaintNodesByCondition admission taints a new Node
// node.kubernetes.io/not-ready:NoSchedule, and the node lifecycle
// controller lifts the taint once the node is Ready; the control plane
// runs no such controller, so register lifts it, the node being Ready.
func (a *Agent) register(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	want := a.node()
	_, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	existed := apierrors.IsAlreadyExists(err)
	if err != nil && !existed {
		return fmt.Errorf("register node: %w", err)
	}
	var n *corev1.Node
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		maps.Copy(next.Labels, want.Labels)
		next.Spec.Taints = slices.DeleteFunc(next.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoSchedule
		})
		if !maps.Equal(next.Labels, cur.Labels) || len(next.Spec.Taints) != len(cur.Spec.Taints) {
			if next, err = nodes.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if existed {
			next.Status = mergeNodeStatus(next.Status, want.Status)
			if next, err = nodes.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		n = next
		return nil
	})
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	a.mu.Lock()
	a.nodeUID = n.UID
	a.mu.Unlock()
	return nil
}

// mergeNodeStatus returns the node's status next, keeping the
// lastTransitionTime of each condition whose status did not change.
func mergeNodeStatus(old, next corev1.NodeStatus) corev1.NodeStatus {
	for i, c := range next.Conditions {
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				next.Conditions[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return next
}

// node returns the Node the agent registers: Ready, on 127.0.0.1, with the
// capacity of the machine.
func (a *Agent) node() *corev1.Node {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourcePods: *resource.NewQuantity(cluster.DefaultMaxPods, resource.DecimalSI),
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: map[string]string{
			corev1.LabelHostname: a.cfg.NodeName, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH,
		}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: NodeInternalIP}, {Type: corev1.NodeHostName, Address: a.cfg.NodeName}},
			NodeInfo:  nodeInfo(),
		},
	}
	cidr := a.kubelet.PodCIDR().String()
	n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
	if a.cfg.KubeletPort != 0 {
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = a.cfg.KubeletPort
	}
	return n
}

// nodeInfo describes the machine and closingtime as the node's runtime
// and kubelet.
func nodeInfo() corev1.NodeSystemInfo {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	info := corev1.NodeSystemInfo{
		KubeletVersion:          "closingtime " + version,
		ContainerRuntimeVersion: "local://closingtime " + version,
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
		OSImage:                 runtime.GOOS,
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		info.KernelVersion = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		info.MachineID = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		info.BootID = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				if s, err := strconv.Unquote(v); err == nil {
					v = s
				}
				info.OSImage = v
			}
		}
	}
	return info
}

// renewLease renews the node's Lease, creating it if it does not exist,
// as the kubelet's lease controller does: held by the node, for
// DefaultNodeLeaseDuration, owned by the Node.
func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	a.mu.Lock()
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: a.nodeUID}
	a.mu.Unlock()
	holder, duration := a.cfg.NodeName, int32(cluster.DefaultNodeLeaseDuration/time.Second)
	now := metav1.NewMicroTime(time.Now())
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{owner}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &now},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &duration, &now
		l.OwnerReferences = []metav1.OwnerReference{owner}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("renew lease %s/%s: %w", corev1.NamespaceNodeLease, a.cfg.NodeName, err)
	}
	return nil
}
