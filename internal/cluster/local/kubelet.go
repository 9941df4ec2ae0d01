package local

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// DefaultPodCIDR is the range a kubelet without a Network takes pod
// addresses from when KubeletConfig.PodCIDR is unset. It is on the loopback
// range, which Linux routes to the loopback interface as a whole, so that
// every pod has an address of its own without any network set-up.
const DefaultPodCIDR = "127.77.0.0/16"

// CommandEnv names the variable that closingtime's own clusters (the
// lab's embedded ones and `closingtime cluster`'s node agents) give every
// container, through KubeletConfig.Env: the path of the closingtime
// binary that image closingtime runs, for a process that a container's
// own program starts, such as a supervisord program's command.
const CommandEnv = "CLOSINGTIME_COMMAND"

// KubeletConfig configures a [Kubelet]. The zero value runs pods on a node
// named "node" with Kubernetes' defaults.
type KubeletConfig struct {
	// NodeName is the node the kubelet runs; "node" if empty.
	NodeName string
	// Network gives each pod its network: a podnet.NetnsNode gives it a
	// network namespace of its own. If nil, pods share the machine's
	// network, each with an address of PodCIDR (a podnet.LoopbackNode).
	Network podnet.Node
	// PodCIDR is the range of pod addresses without a Network;
	// DefaultPodCIDR if zero. It must be on 127.0.0.0/8: pods listen on
	// their address, and only the loopback interface takes any address in
	// its range.
	PodCIDR netip.Prefix
	// WorkingDir is where containers without a workingDir run; the
	// kubelet's working directory if empty.
	WorkingDir string
	// ImageCommands maps an image to the local command that stands for its
	// entrypoint, for containers without a command.
	ImageCommands map[string][]string
	// PauseCommand is the command of the pause process that holds the PID
	// namespace of a pod with shareProcessNamespace as its PID 1, such as
	// closingtime's own `closingtime pause`. A kubelet without one refuses
	// such pods.
	PauseCommand []string
	// Env are variables every container gets before its own, as the
	// kubelet adds the Service environment variables: a container's own
	// variable of the same name wins, and its values, command and args
	// may refer to them with $(NAME). Each is a plain Value, taken as it
	// is written; an entry with a ValueFrom is an error of NewKubelet.
	Env []corev1.EnvVar
	// Services returns the Services of a namespace whose variables
	// (cluster.ServiceEnv) a new pod's containers get, after Env, as a
	// kubelet gives a container the Services that exist when it starts;
	// none if nil. It is called with the kubelet's lock held, and must not
	// call the Kubelet.
	Services func(namespace string) []*corev1.Service
	// CrashLoopBackOff is the restart back-off of each container; its zero
	// fields are Kubernetes' defaults.
	CrashLoopBackOff cluster.CrashLoopBackOff
	// PIDNamespace is how containers' processes are isolated;
	// PIDNamespaceAuto, the strongest the system allows, if empty.
	PIDNamespace PIDNamespaceMode
	// MaxLogLines is how many lines are kept of each container;
	// cluster.DefaultMaxLogLines if zero.
	MaxLogLines int
	// Clock is the clock of every timer and timestamp; the real clock if
	// nil.
	Clock clock.Clock
	// Recorder receives the kubelet's events; they are dropped if nil.
	Recorder cluster.Recorder
	// StatusUpdated is called with a copy of a pod whose status changed,
	// from one goroutine per pod, in order; updates that come faster than
	// it returns are merged into the latest (as the kubelet's status
	// manager sends the latest status). It may call the Kubelet's methods.
	StatusUpdated func(pod *corev1.Pod)
}

// errNoPause refuses a pod with shareProcessNamespace on a kubelet without
// a pause command.
var errNoPause = errors.New("this kubelet has no pause process to hold a shared PID namespace (KubeletConfig.PauseCommand)")

// PIDNamespaceMode is how a kubelet isolates a container's processes
// from its own. A container's first process is PID 1, with PID 1's signal
// rules, only in a PID namespace (I1).
type PIDNamespaceMode string

const (
	// PIDNamespaceAuto takes the strongest isolation the system allows: a
	// PID namespace, which needs root; where that is refused, a user
	// namespace with a PID namespace in it, which an unprivileged user
	// gets where the kernel allows user namespaces; else none. The
	// container_started event names the one taken and why a stronger one
	// was refused.
	PIDNamespaceAuto PIDNamespaceMode = ""
	// PIDNamespaceUser starts from the user namespace, as the kubelet of
	// an unprivileged user does once the PID namespace alone was refused.
	PIDNamespaceUser PIDNamespaceMode = "user"
	// PIDNamespaceNone gives containers no namespace: their first process
	// is not PID 1, and the default action of a signal applies to it, as
	// under an init such as tini or with shareProcessNamespace (I5, I6).
	PIDNamespaceNone PIDNamespaceMode = "none"
)

// Kubelet runs pods on one node as local processes: it starts their
// containers, probes them, restarts them with back-off, and terminates them
// when their deletion is requested, following docs/kubernetes.md. It
// takes pods as corev1.Pod objects and reports their status as corev1
// objects and [cluster.Event]s; it knows nothing of the controllers that
// make the pods. It is safe for concurrent use.
type Kubelet struct {
	cfg   KubeletConfig
	clock clock.Clock
	iso   isolator

	mu     sync.Mutex
	closed bool
	pods   map[types.UID]*podWorker
	logs   map[string]*cluster.LogBuffer // by namespace/pod/container; kept after the pod is gone
	wg     sync.WaitGroup                // every goroutine of every pod
}

// NewKubelet returns a kubelet configured by cfg, or an error if cfg is
// invalid.
func NewKubelet(cfg KubeletConfig) (*Kubelet, error) {
	if cfg.NodeName == "" {
		cfg.NodeName = "node"
	}
	if cfg.Network == nil {
		if !cfg.PodCIDR.IsValid() {
			cfg.PodCIDR = netip.MustParsePrefix(DefaultPodCIDR)
		}
		cfg.PodCIDR = cfg.PodCIDR.Masked()
		if !netip.MustParsePrefix("127.0.0.0/8").Contains(cfg.PodCIDR.Addr()) || cfg.PodCIDR.Bits() < 8 || cfg.PodCIDR.Bits() > 30 {
			return nil, fmt.Errorf("pod CIDR %s: not a range of 127.0.0.0/8 with room for pods", cfg.PodCIDR)
		}
		cfg.Network = podnet.NewLoopbackNode(cfg.PodCIDR, "")
	}
	for _, e := range cfg.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("kubelet env %s: want a plain value, not valueFrom", e.Name)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	level := isolatePID
	switch cfg.PIDNamespace {
	case PIDNamespaceAuto:
	case PIDNamespaceUser:
		level = isolateUserPID
	case PIDNamespaceNone:
		level = isolateNone
	default:
		return nil, fmt.Errorf("PID namespace mode %q: want %q, %q or %q", cfg.PIDNamespace, PIDNamespaceAuto, PIDNamespaceUser, PIDNamespaceNone)
	}
	return &Kubelet{
		iso:   isolator{level: level},
		cfg:   cfg,
		clock: cfg.Clock,
		pods:  map[types.UID]*podWorker{},
		logs:  map[string]*cluster.LogBuffer{},
	}, nil
}

// PodCIDR returns the range the kubelet's pods take their addresses from:
// its Network's, or KubeletConfig.PodCIDR, masked, or DefaultPodCIDR.
func (k *Kubelet) PodCIDR() netip.Prefix { return k.cfg.Network.PodCIDR() }

// ErrClosed is returned by a Kubelet's methods after Close.
var ErrClosed = errors.New("kubelet closed")

// SyncPod hands the kubelet the current version of pod, which must be bound
// to this node (spec.nodeName) and have a UID.
//
// A pod it has not seen is admitted: it gets an address, and its containers
// start. SyncPod returns an error, and runs nothing, when a container can't
// run locally: no command and no image mapping, an unsupported env source,
// probe or stop signal. A pod with a deletionTimestamp is terminated with
// its deletionGracePeriodSeconds (T5–T8): a later version can only
// shorten the grace. Other changes to a running pod are ignored, as its
// spec is immutable.
func (k *Kubelet) SyncPod(pod *corev1.Pod) error {
	if pod.Spec.NodeName != k.cfg.NodeName {
		return fmt.Errorf("pod %s/%s: bound to node %q, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, k.cfg.NodeName)
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	p, ok := k.pods[pod.UID]
	if !ok && pod.DeletionTimestamp != nil {
		// Deleted before it ran here, or after it terminated: nothing
		// to run or stop.
		k.mu.Unlock()
		return nil
	}
	if !ok {
		var err error
		if p, err = k.admitLocked(pod.DeepCopy()); err != nil {
			k.mu.Unlock()
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	k.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		// The kubelet takes the smaller of what it has and what the API
		// says, never below 1 s (T5).
		grace := int64(cluster.DefaultTerminationGracePeriodSeconds)
		switch {
		case pod.DeletionGracePeriodSeconds != nil:
			grace = *pod.DeletionGracePeriodSeconds
		case pod.Spec.TerminationGracePeriodSeconds != nil:
			grace = *pod.Spec.TerminationGracePeriodSeconds
		}
		p.terminate(max(grace, 1))
	}
	return nil
}

// Logs returns the lines container wrote in pod namespace/name, of every
// instance, oldest first, or an error wrapping cluster.ErrNotFound if the
// kubelet never ran it. Logs stay after the pod is gone.
func (k *Kubelet) Logs(namespace, name, container string) ([]cluster.LogLine, error) {
	k.mu.Lock()
	b, ok := k.logs[namespace+"/"+name+"/"+container]
	k.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("logs of container %s of pod %s/%s: %w", container, namespace, name, cluster.ErrNotFound)
	}
	return b.Lines(), nil
}

// LogInstance chooses the instance of container in pod namespace/name
// whose log the kubelet's log API serves, as the kubelet does
// (validateContainerLogStatus in k8s.io/kubernetes pkg/kubelet): without
// previous, the running instance, else the last one that ran; with
// previous, the last instance that terminated before the current one,
// which is the latest while the container waits to restart. It returns the
// container's log buffer and the instance's restart count, to read with
// [cluster.LogBuffer.Follow]: the iteration ends when the instance has
// exited and its last line is read. Once the pod is gone, its logs stay:
// the latest instance is the current one.
//
// The error wraps cluster.ErrNotFound when the kubelet never ran the pod
// or the pod has no such container; its text is the kubelet's.
func (k *Kubelet) LogInstance(namespace, name, container string, previous bool) (*cluster.LogBuffer, int32, error) {
	k.mu.Lock()
	var worker *podWorker
	for _, p := range k.pods {
		if p.pod.Namespace == namespace && p.pod.Name == name {
			worker = p
		}
	}
	b := k.logs[namespace+"/"+name+"/"+container]
	podKnown := worker != nil
	for key := range k.logs {
		if strings.HasPrefix(key, namespace+"/"+name+"/") {
			podKnown = true
			break
		}
	}
	k.mu.Unlock()
	switch {
	case !podKnown:
		return nil, 0, fmt.Errorf("pod %q does not exist: %w", name, cluster.ErrNotFound)
	case b == nil:
		return nil, 0, fmt.Errorf("container %q not found in pod %q: %w", container, name, cluster.ErrNotFound)
	}
	noPrevious := fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
	var c *containerWorker
	if worker != nil {
		for _, cw := range slices.Concat(worker.inits, worker.containers) {
			if cw.spec.Name == container {
				c = cw
			}
		}
	}
	if c == nil {
		// The pod is gone: its latest instance is the current one.
		insts := b.Instances()
		switch {
		case len(insts) == 0:
			return nil, 0, fmt.Errorf("container %q in pod %q is terminated", container, name)
		case !previous:
			return b, insts[len(insts)-1], nil
		case len(insts) == 1:
			return nil, 0, noPrevious
		}
		return b, insts[len(insts)-2], nil
	}
	worker.mu.Lock()
	defer worker.mu.Unlock()
	if c.inst == nil {
		if w := c.status.State.Waiting; w != nil {
			return nil, 0, fmt.Errorf("container %q in pod %q is waiting to start: %s", container, name, w.Reason)
		}
		return nil, 0, fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", container, name)
	}
	restart := c.status.RestartCount
	if !previous {
		return b, restart, nil
	}
	select {
	case <-c.ended:
	default:
		// The container will run again: the latest instance, if it has
		// exited, is the last terminated one.
		if c.inst.proc.exited() {
			return b, restart, nil
		}
	}
	if restart == 0 {
		return nil, 0, noPrevious
	}
	return b, restart - 1, nil
}

// Close kills every container at once with SIGKILL, without preStop hooks
// or grace (this is the kubelet's end, not a pod's deletion), and returns
// when every process and goroutine of the kubelet is gone, or when ctx ends
// first with ctx.Err(). Later calls of SyncPod return ErrClosed.
func (k *Kubelet) Close(ctx context.Context) error {
	k.mu.Lock()
	k.closed = true
	for _, p := range k.pods {
		p.cancel()
	}
	k.mu.Unlock()
	done := make(chan struct{})
	go func() {
		k.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// record stamps e with the kubelet's node and, unless it has a time, with
// the kubelet's clock, and records it.
func (k *Kubelet) record(e cluster.Event) {
	if k.cfg.Recorder == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = k.clock.Now()
	}
	e.Node = k.cfg.NodeName
	k.cfg.Recorder.Record(e)
}

// admitLocked checks pod, prepares its containers and starts its workers.
func (k *Kubelet) admitLocked(pod *corev1.Pod) (*podWorker, error) {
	if pod.UID == "" {
		return nil, errors.New("no UID")
	}
	if err := CheckPodSpec(pod.Annotations, &pod.Spec, k.cfg.ImageCommands); err != nil {
		return nil, err
	}
	sandbox, err := k.cfg.Network.NewSandbox()
	if err != nil {
		return nil, err
	}
	env := k.cfg.Env
	// enableServiceLinks false leaves out the Services of the pod's
	// namespace (and this cluster has no API server Service to give).
	if links := pod.Spec.EnableServiceLinks; k.cfg.Services != nil && (links == nil || *links) {
		env = append(slices.Clip(env), cluster.ServiceEnv(k.cfg.Services(pod.Namespace))...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &podWorker{
		k: k, pod: pod, sandbox: sandbox, ip: sandbox.IP().String(), env: env, ctx: ctx, cancel: cancel,
		terminatingCh: make(chan struct{}), done: make(chan struct{}), statusCh: make(chan struct{}, 1),
	}
	if p.inits, err = newContainerWorkers(p, pod.Spec.InitContainers, initRole); err == nil {
		p.containers, err = newContainerWorkers(p, pod.Spec.Containers, appRole)
	}
	if share := pod.Spec.ShareProcessNamespace; err == nil && share != nil && *share {
		if len(k.cfg.PauseCommand) == 0 {
			err = &SpecError{"shareProcessNamespace", errNoPause}
		} else {
			p.shared, err = startPause(&k.wg, &k.iso, sandbox, k.cfg.PauseCommand)
		}
	}
	if err != nil {
		cancel()
		sandbox.Close()
		return nil, err
	}
	if len(p.inits) > 0 {
		for _, c := range p.containers {
			c.status.State.Waiting.Reason = "PodInitializing"
		}
	}
	for _, c := range slices.Concat(p.inits, p.containers) {
		key := pod.Namespace + "/" + pod.Name + "/" + c.spec.Name
		if k.logs[key] == nil {
			k.logs[key] = cluster.NewLogBuffer(k.cfg.MaxLogLines)
		}
		c.logs = k.logs[key]
	}
	k.pods[pod.UID] = p
	now := metav1.NewTime(k.clock.Now())
	p.startTime = now
	k.record(cluster.Event{Kind: cluster.PodStarted, Namespace: pod.Namespace, Pod: pod.Name,
		Fields: map[string]string{"ip": p.ip, "network": k.cfg.Network.Isolation()}})
	k.wg.Add(3)
	go p.deliverStatus()
	go p.run()
	go p.initialize()
	return p, nil
}

// newContainerWorkers returns the workers of specs, containers of p's pod
// in role: appRole for its containers, initRole for its init containers,
// of which the sidecars get sidecarRole.
func newContainerWorkers(p *podWorker, specs []corev1.Container, r role) ([]*containerWorker, error) {
	var workers []*containerWorker
	for i := range specs {
		c, err := newContainerWorker(p, &specs[i])
		if err != nil {
			return nil, err
		}
		c.role = r
		if r == initRole && cluster.IsSidecar(c.spec) {
			c.role = sidecarRole
		}
		workers = append(workers, c)
	}
	return workers, nil
}
