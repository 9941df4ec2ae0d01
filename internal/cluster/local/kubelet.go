package local

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// DefaultPodCIDR is the range a kubelet takes pod addresses from when
// KubeletConfig.PodCIDR is unset. It is on the loopback range, which Linux
// routes to the loopback interface as a whole, so that every pod has an
// address of its own without any network set-up.
var DefaultPodCIDR = netip.MustParsePrefix("127.77.0.0/16")

// KubeletConfig configures a [Kubelet]. The zero value runs pods on a node
// named "node" with Kubernetes' defaults.
type KubeletConfig struct {
	// NodeName is the node the kubelet runs; "node" if empty.
	NodeName string
	// PodCIDR is the range of pod addresses; DefaultPodCIDR if zero. It
	// must be on 127.0.0.0/8: pods listen on their address, and only the
	// loopback interface takes any address in its range.
	PodCIDR netip.Prefix
	// WorkingDir is where containers without a workingDir run; the
	// kubelet's working directory if empty.
	WorkingDir string
	// ImageCommands maps an image to the local command that stands for its
	// entrypoint, for containers without a command.
	ImageCommands map[string][]string
	// Env are variables every container gets before its own, as the
	// kubelet adds the Service environment variables: a container's own
	// variable of the same name wins, and its values, command and args
	// may refer to them with $(NAME). Each is a plain Value, taken as it
	// is written; an entry with a ValueFrom is an error of NewKubelet.
	Env []corev1.EnvVar
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
	used   map[netip.Addr]bool
	nextIP netip.Addr
	wg     sync.WaitGroup // every goroutine of every pod
}

// NewKubelet returns a kubelet configured by cfg, or an error if cfg is
// invalid.
func NewKubelet(cfg KubeletConfig) (*Kubelet, error) {
	if cfg.NodeName == "" {
		cfg.NodeName = "node"
	}
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = DefaultPodCIDR
	}
	cfg.PodCIDR = cfg.PodCIDR.Masked()
	if !netip.MustParsePrefix("127.0.0.0/8").Contains(cfg.PodCIDR.Addr()) || cfg.PodCIDR.Bits() < 8 || cfg.PodCIDR.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %s: not a range of 127.0.0.0/8 with room for pods", cfg.PodCIDR)
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
		iso:    isolator{level: level},
		cfg:    cfg,
		clock:  cfg.Clock,
		pods:   map[types.UID]*podWorker{},
		logs:   map[string]*cluster.LogBuffer{},
		used:   map[netip.Addr]bool{},
		nextIP: cfg.PodCIDR.Addr().Next(),
	}, nil
}

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
		for _, cw := range worker.containers {
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

// allocateIPLocked returns a free address of the pod range.
func (k *Kubelet) allocateIPLocked() (netip.Addr, error) {
	size := 1 << (32 - k.cfg.PodCIDR.Bits())
	// At most one round of the range.
	for range size {
		ip := k.nextIP
		k.nextIP = ip.Next()
		if !k.cfg.PodCIDR.Contains(k.nextIP) {
			k.nextIP = k.cfg.PodCIDR.Addr().Next()
		}
		if !k.used[ip] && k.cfg.PodCIDR.Contains(ip) {
			k.used[ip] = true
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", k.cfg.PodCIDR)
}

// admitLocked checks pod, prepares its containers and starts its workers.
func (k *Kubelet) admitLocked(pod *corev1.Pod) (*podWorker, error) {
	if pod.UID == "" {
		return nil, errors.New("no UID")
	}
	ip, err := k.allocateIPLocked()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &podWorker{
		k: k, pod: pod, ip: ip.String(), ctx: ctx, cancel: cancel,
		terminatingCh: make(chan struct{}), done: make(chan struct{}), statusCh: make(chan struct{}, 1),
	}
	for i := range pod.Spec.Containers {
		c, err := newContainerWorker(p, &pod.Spec.Containers[i])
		if err != nil {
			cancel()
			delete(k.used, ip)
			return nil, err
		}
		p.containers = append(p.containers, c)
	}
	for _, c := range p.containers {
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
		Fields: map[string]string{"ip": p.ip}})
	k.wg.Add(2 + len(p.containers))
	go p.deliverStatus()
	go p.run()
	for _, c := range p.containers {
		go c.run()
	}
	return p, nil
}

// podWorker runs one pod.
type podWorker struct {
	k      *Kubelet
	pod    *corev1.Pod // the admitted version; its spec does not change
	ip     string
	ctx    context.Context // ends at the kubelet's Close, or after the pod terminated
	cancel context.CancelFunc

	containers []*containerWorker
	kills      sync.WaitGroup // the kill sequences of the pod's termination
	statusCh   chan struct{}  // a status change waits to be delivered
	done       chan struct{}  // closed when the pod has terminated

	mu            sync.Mutex
	startTime     metav1.Time
	ready         bool
	readySince    metav1.Time
	terminating   bool
	terminatingCh chan struct{} // closed when termination starts
	grace         int64         // the effective grace once terminating
	phase         corev1.PodPhase
}

// run waits for the pod to terminate, for its containers to end by
// themselves (restartPolicy Never or OnFailure), or for the kubelet to
// close, and cleans up after it.
func (p *podWorker) run() {
	defer p.k.wg.Done()
	allEnded := make(chan struct{})
	p.k.wg.Add(1)
	go func() {
		defer p.k.wg.Done()
		for _, c := range p.containers {
			<-c.ended
		}
		close(allEnded)
	}()
	select {
	case <-p.terminatingCh:
	case <-p.ctx.Done():
	case <-allEnded:
	}
	// Every container loop ends once the pod is terminating: wait for them,
	// each bounded by its kill sequence.
	for _, c := range p.containers {
		<-c.ended
	}
	// A kill sequence outlives its container when the container exits
	// during the preStop hook: the kubelet waits for the hook (T7).
	p.kills.Wait()
	p.mu.Lock()
	p.phase = corev1.PodSucceeded
	for _, c := range p.containers {
		if t := c.status.State.Terminated; t == nil || t.ExitCode != 0 {
			p.phase = corev1.PodFailed
		}
	}
	p.updateReadyLocked()
	// The event precedes the terminal status, and so what the status
	// makes the controllers do.
	p.k.record(cluster.Event{Kind: cluster.PodTerminated, Namespace: p.pod.Namespace, Pod: p.pod.Name,
		Fields: map[string]string{"phase": string(p.phase)}})
	p.statusChangedLocked()
	p.mu.Unlock()
	// The pod is terminal (T16): its address is free again and its
	// readiness workers stop with its context.
	p.k.mu.Lock()
	delete(p.k.pods, p.pod.UID)
	addr, _ := netip.ParseAddr(p.ip)
	delete(p.k.used, addr)
	p.k.mu.Unlock()
	close(p.done)
	p.cancel()
}

// terminate starts the pod's termination with grace seconds, or shortens a
// termination under way to grace (T3, T5).
func (p *podWorker) terminate(grace int64) {
	p.mu.Lock()
	if p.terminating {
		shorter := grace < p.grace
		if shorter {
			p.grace = grace
		}
		insts := p.runningLocked()
		p.mu.Unlock()
		// The first kill sequence of each container is still waiting for
		// it; these only add an earlier SIGKILL deadline.
		if shorter {
			p.k.wg.Add(len(insts))
			for _, inst := range insts {
				go func() {
					defer p.k.wg.Done()
					inst.c.kill(inst, grace)
				}()
			}
		}
		return
	}
	p.terminating, p.grace = true, grace
	// Liveness and startup probing stop; readiness goes on until the
	// containers stop (T6).
	insts := p.runningLocked()
	for _, inst := range insts {
		inst.stopLiveness()
	}
	p.kills.Add(len(insts))
	close(p.terminatingCh)
	p.mu.Unlock()
	p.k.record(cluster.Event{Kind: cluster.PodTerminating, Namespace: p.pod.Namespace, Pod: p.pod.Name,
		Fields: map[string]string{"grace": (time.Duration(grace) * time.Second).String()}})
	// Containers are killed concurrently (T7).
	for _, inst := range insts {
		go func() {
			defer p.kills.Done()
			inst.c.kill(inst, grace)
		}()
	}
}

// runningLocked returns the instances whose process still runs.
func (p *podWorker) runningLocked() []*instance {
	var out []*instance
	for _, c := range p.containers {
		if c.inst != nil && !c.inst.proc.exited() {
			out = append(out, c.inst)
		}
	}
	return out
}

// updateReadyLocked recomputes the Ready condition: every container ready
// (E5). It records a change.
func (p *podWorker) updateReadyLocked() {
	ready := p.phase == "" || p.phase == corev1.PodRunning || p.phase == corev1.PodPending
	for _, c := range p.containers {
		ready = ready && c.status.Ready
	}
	if ready == p.ready {
		return
	}
	p.ready, p.readySince = ready, metav1.NewTime(p.k.clock.Now())
	kind := cluster.PodUnready
	if ready {
		kind = cluster.PodReady
	}
	p.k.record(cluster.Event{Kind: kind, Namespace: p.pod.Namespace, Pod: p.pod.Name})
}

// statusChangedLocked asks deliverStatus to send the current status.
func (p *podWorker) statusChangedLocked() {
	select {
	case p.statusCh <- struct{}{}:
	default:
	}
}

// deliverStatus sends the pod's latest status to StatusUpdated whenever it
// changed, until the pod is done and its last status is sent.
func (p *podWorker) deliverStatus() {
	defer p.k.wg.Done()
	// Each round delivers one status; the loop ends with the pod.
	for {
		select {
		case <-p.statusCh:
		case <-p.done:
			select {
			case <-p.statusCh:
			default:
				return
			}
		}
		p.mu.Lock()
		pod := p.pod.DeepCopy()
		pod.Status = p.statusLocked()
		p.mu.Unlock()
		if p.k.cfg.StatusUpdated != nil {
			p.k.cfg.StatusUpdated(pod)
		}
	}
}

// statusLocked builds the pod's status.
func (p *podWorker) statusLocked() corev1.PodStatus {
	phase := p.phase
	if phase == "" {
		phase = corev1.PodPending
		for _, c := range p.containers {
			if c.status.State.Running != nil || c.status.RestartCount > 0 {
				phase = corev1.PodRunning
			}
		}
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: p.readySince}
	}
	st := corev1.PodStatus{
		Phase:     phase,
		HostIP:    "127.0.0.1",
		PodIP:     p.ip,
		PodIPs:    []corev1.PodIP{{IP: p.ip}},
		StartTime: &p.startTime,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: p.startTime},
			cond(corev1.ContainersReady, p.ready),
			cond(corev1.PodReady, p.ready),
		},
	}
	for _, c := range p.containers {
		st.ContainerStatuses = append(st.ContainerStatuses, *c.status.DeepCopy())
	}
	return st
}

// containerWorker runs one container of a pod: its instances one after the
// other, with back-off between them.
type containerWorker struct {
	p       *podWorker
	spec    *corev1.Container
	argv    []string
	env     []string
	stopSig syscall.Signal
	logs    *cluster.LogBuffer
	backoff cluster.CrashLoopBackOff
	ended   chan struct{} // closed when run returns

	// Guarded by p.mu.
	status corev1.ContainerStatus
	inst   *instance // the latest instance; nil before the first
}

// instance is one run of a container: one process, its probes.
type instance struct {
	c            *containerWorker
	proc         *process
	startedAt    time.Time
	ctx          context.Context // ends when the process has exited
	cancel       context.CancelFunc
	liveCtx      context.Context // the liveness and startup workers' context
	stopLiveness context.CancelFunc
	killing      bool // guarded by p.mu: a kill sequence has started
}

func newContainerWorker(p *podWorker, spec *corev1.Container) (*containerWorker, error) {
	vars, env, err := containerEnv(p.pod, spec, p.ip, p.k.cfg.Env)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", spec.Name, err)
	}
	argv, err := commandLine(p.pod, spec, vars, p.k.cfg.ImageCommands)
	if err != nil {
		return nil, err
	}
	c := &containerWorker{p: p, spec: spec, argv: argv, env: env, stopSig: syscall.SIGTERM,
		backoff: p.k.cfg.CrashLoopBackOff, ended: make(chan struct{})}
	if spec.WorkingDir == "" {
		spec.WorkingDir = p.k.cfg.WorkingDir
	}
	// lifecycle.stopSignal overrides the default SIGTERM (T11, T12).
	if l := spec.Lifecycle; l != nil && l.StopSignal != nil {
		sig := unix.SignalNum(string(*l.StopSignal))
		if sig == 0 {
			return nil, fmt.Errorf("container %s: stop signal %s is not a signal of this system", spec.Name, *l.StopSignal)
		}
		c.stopSig = sig
	}
	for kind, probe := range map[probeKind]*corev1.Probe{startupProbe: spec.StartupProbe, readinessProbe: spec.ReadinessProbe, livenessProbe: spec.LivenessProbe} {
		if probe == nil {
			continue
		}
		if probe.HTTPGet == nil && probe.TCPSocket == nil && probe.Exec == nil {
			return nil, fmt.Errorf("container %s: %s probe: only httpGet, tcpSocket and exec probes run locally", spec.Name, kind)
		}
		if _, err := c.handlerPort(probe.ProbeHandler); err != nil {
			return nil, fmt.Errorf("container %s: %s probe: %w", spec.Name, kind, err)
		}
	}
	c.status = corev1.ContainerStatus{Name: spec.Name, Image: spec.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	return c, nil
}

// handlerPort checks that a handler's named port exists.
func (c *containerWorker) handlerPort(h corev1.ProbeHandler) (int, error) {
	switch {
	case h.HTTPGet != nil:
		return c.port(h.HTTPGet.Port)
	case h.TCPSocket != nil:
		return c.port(h.TCPSocket.Port)
	}
	return 0, nil
}

// run starts the container, waits for its exit and restarts it as
// restartPolicy says, with back-off (B1, B2), until the pod terminates.
func (c *containerWorker) run() {
	p := c.p
	defer p.k.wg.Done()
	defer close(c.ended)
	// One round per instance; the loop ends when the pod terminates, the
	// kubelet closes, or the restart policy does not restart.
	for {
		inst := c.start()
		var code int32
		var finishedAt time.Time
		if inst != nil {
			select {
			case <-inst.proc.done:
			case <-p.ctx.Done():
				// The kubelet closes: nothing gets a grace period.
				inst.proc.signal(syscall.SIGKILL)
				<-inst.proc.done
			}
			inst.cancel()
			code, finishedAt = c.exited(inst)
		} else {
			code, finishedAt = 128, p.k.clock.Now()
		}
		if p.ctx.Err() != nil || p.isTerminating() {
			return
		}
		switch p.pod.Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
			return
		case corev1.RestartPolicyOnFailure:
			if code == 0 {
				return
			}
		}
		if !c.waitBackOff(finishedAt) {
			return
		}
	}
}

// waitBackOff waits until the back-off lets the container restart, and
// reports false if the pod terminates or the kubelet closes first.
func (c *containerWorker) waitBackOff(finishedAt time.Time) bool {
	p := c.p
	// Restart returns 0 after one wait, so this runs at most twice.
	for {
		now := p.k.clock.Now()
		wait := c.backoff.Restart(finishedAt, now)
		if wait <= 0 {
			return true
		}
		p.mu.Lock()
		// The exit being waited out is the last state while the
		// container waits (T15), as the kubelet reports it. Its message
		// says the whole back-off since the exit (doBackOff's
		// backOff.Get); the event's delay, the wait left from now.
		c.moveToLastStateLocked()
		c.status.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", wait+now.Sub(finishedAt), c.spec.Name, p.pod.Name, p.pod.Namespace, p.pod.UID)}}
		p.statusChangedLocked()
		p.mu.Unlock()
		p.k.record(cluster.Event{Kind: cluster.BackOff, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name,
			Fields: map[string]string{"delay": wait.String()}})
		t := p.k.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-p.terminatingCh:
			t.Stop()
			return false
		case <-p.ctx.Done():
			t.Stop()
			return false
		}
	}
}

func (p *podWorker) isTerminating() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.terminating
}

// start starts a new instance, unless the pod is terminating, and its
// probe workers. It returns nil if nothing started.
func (c *containerWorker) start() *instance {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	// A terminating pod never starts a container (T6).
	if p.terminating || p.ctx.Err() != nil {
		return nil
	}
	restart := c.status.RestartCount
	if c.inst != nil {
		restart++
	}
	proc, reason, err := startProcess(&p.k.wg, &p.k.iso, p.k.clock, c.argv, c.env, c.spec.WorkingDir, c.logs, restart)
	ev := cluster.Event{Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name}
	if err != nil {
		// containerd reports a failed start as exit 128, StartError.
		now := metav1.NewTime(p.k.clock.Now())
		c.moveToLastStateLocked()
		c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now}}
		c.status.RestartCount = restart
		c.inst = &instance{c: c, proc: &process{done: closedChan}}
		p.statusChangedLocked()
		ev.Kind, ev.Fields = cluster.ContainerStartFailed, map[string]string{"error": err.Error()}
		p.k.record(ev)
		return nil
	}
	inst := &instance{c: c, proc: proc, startedAt: p.k.clock.Now()}
	inst.ctx, inst.cancel = context.WithCancel(p.ctx)
	inst.liveCtx, inst.stopLiveness = context.WithCancel(inst.ctx)
	c.moveToLastStateLocked()
	c.inst = inst
	c.status.RestartCount = restart
	c.status.ContainerID = "local://" + strconv.Itoa(proc.cmd.Process.Pid)
	c.status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(inst.startedAt)}}
	// Without a startup probe a running container has started; without a
	// readiness probe a started one is ready (P4, E5).
	started := c.spec.StartupProbe == nil
	c.status.Started = &started
	c.status.Ready = started && c.spec.ReadinessProbe == nil
	fields := map[string]string{"pid": strconv.Itoa(proc.cmd.Process.Pid), "restart": strconv.Itoa(int(restart)),
		"pid_namespace": proc.isolation.String()}
	if reason != "" {
		fields["pid_namespace_reason"] = reason
	}
	ev.Kind, ev.Fields = cluster.ContainerStarted, fields
	p.k.record(ev)
	// The start comes before the readiness it brings.
	p.updateReadyLocked()
	p.statusChangedLocked()
	for kind, spec := range map[probeKind]*corev1.Probe{startupProbe: c.spec.StartupProbe, readinessProbe: c.spec.ReadinessProbe, livenessProbe: c.spec.LivenessProbe} {
		if spec == nil {
			continue
		}
		ctx := inst.ctx
		if kind != readinessProbe {
			ctx = inst.liveCtx
		}
		w := &probeWorker{kind: kind, spec: spec, c: c, inst: inst}
		p.k.wg.Add(1)
		go func() {
			defer p.k.wg.Done()
			w.run(ctx)
		}()
	}
	return inst
}

// closedChan is the done channel of an instance whose process never
// started.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// moveToLastStateLocked keeps a terminated state as the last state before
// the next instance replaces it (T15).
func (c *containerWorker) moveToLastStateLocked() {
	if t := c.status.State.Terminated; t != nil {
		c.status.LastTerminationState = corev1.ContainerState{Terminated: t}
	}
}

// exited records the end of inst and returns its exit code and time.
func (c *containerWorker) exited(inst *instance) (int32, time.Time) {
	p := c.p
	code := inst.proc.exitCode
	reason := "Error"
	if code == 0 {
		reason = "Completed"
	}
	// The exit comes before the unreadiness it brings.
	p.k.record(cluster.Event{Kind: cluster.ContainerExited, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name,
		Fields: map[string]string{"code": strconv.Itoa(int(code)), "reason": reason}})
	p.mu.Lock()
	// The kubelet leaves terminated.signal unset: the runtime reports a
	// signal death as 128+signal only (T14).
	c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, StartedAt: metav1.NewTime(inst.startedAt), FinishedAt: metav1.NewTime(inst.proc.finishedAt),
		ContainerID: c.status.ContainerID}}
	// A container that is not running fails readiness (E3).
	c.status.Ready = false
	p.updateReadyLocked()
	p.statusChangedLocked()
	p.mu.Unlock()
	return code, inst.proc.finishedAt
}

// probeFailed records a failed run of a probe with handler h, the latest
// of failures in a row, with what the probe said.
func (c *containerWorker) probeFailed(kind probeKind, h corev1.ProbeHandler, failures int, output string) {
	p := c.p
	p.k.record(cluster.Event{Kind: cluster.ProbeFailed, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name,
		Fields: map[string]string{"probe": string(kind), "target": c.probeTarget(h), "failures": strconv.Itoa(failures), "output": output}})
}

// probeResult stores a probe's new result for inst and acts on it (P5–P8).
func (c *containerWorker) probeResult(inst *instance, kind probeKind, success bool, output string) {
	p := c.p
	result := "failure"
	if success {
		result = "success"
	}
	p.k.record(cluster.Event{Kind: cluster.ProbeResult, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name,
		Fields: map[string]string{"probe": string(kind), "result": result, "output": output}})
	p.mu.Lock()
	if c.inst != inst || inst.proc.exited() {
		p.mu.Unlock()
		return
	}
	switch kind {
	case startupProbe:
		if success {
			started := true
			c.status.Started = &started
			c.status.Ready = c.spec.ReadinessProbe == nil
		}
	case readinessProbe:
		c.status.Ready = success
	}
	p.updateReadyLocked()
	p.statusChangedLocked()
	terminating := p.terminating
	p.mu.Unlock()
	if success || kind == readinessProbe || terminating {
		return
	}
	// A failed liveness or startup probe kills the container, which the
	// restart policy then restarts (P6, P7). The grace is the probe's, else
	// the pod's (T7 a).
	p.k.record(cluster.Event{Kind: cluster.LivenessKill, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name,
		Fields: map[string]string{"probe": string(kind)}})
	grace := int64(cluster.DefaultTerminationGracePeriodSeconds)
	probe := c.spec.LivenessProbe
	if kind == startupProbe {
		probe = c.spec.StartupProbe
	}
	switch {
	case probe.TerminationGracePeriodSeconds != nil:
		grace = *probe.TerminationGracePeriodSeconds
	case p.pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *p.pod.Spec.TerminationGracePeriodSeconds
	}
	c.kill(inst, grace)
}

// kill stops inst as the kubelet's killContainer does (T7): the preStop
// hook, if any and grace > 0, for at most grace seconds; then the stop
// signal to the first process, and SIGKILL when what is left of the grace,
// at least 2 s, has passed (T8, T11). A second kill of the same instance
// only adds its own SIGKILL deadline, so a shorter grace wins (T3). kill
// returns when the process has exited, or when the kubelet closes.
func (c *containerWorker) kill(inst *instance, grace int64) {
	p := c.p
	p.mu.Lock()
	again := inst.killing
	inst.killing = true
	p.mu.Unlock()
	ev := cluster.Event{Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name}
	// Every wait counts from the moment its event is stamped with, so
	// that a late goroutine does not push the deadlines back.
	var deadline time.Time
	if !again {
		if c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil && grace > 0 {
			start := p.k.clock.Now()
			ev.Kind, ev.Time = cluster.PreStopStarted, start
			p.k.record(ev)
			err := c.preStop(inst, start, time.Duration(grace)*time.Second)
			ev.Kind, ev.Time, ev.Fields = cluster.PreStopFinished, time.Time{}, nil
			if err != nil {
				ev.Fields = map[string]string{"error": err.Error()}
			}
			p.k.record(ev)
			// Whole seconds count (T7 b).
			grace -= int64(p.k.clock.Since(start) / time.Second)
		}
		grace = max(grace, cluster.MinimumGracePeriodSeconds)
		sent := p.k.clock.Now()
		// Each event is recorded before its signal goes, so that it
		// precedes the exit the signal causes in the stream.
		if !inst.proc.exited() {
			ev.Kind, ev.Time, ev.Fields = cluster.SignalSent, sent, map[string]string{"signal": unix.SignalName(c.stopSig),
				"grace": (time.Duration(grace) * time.Second).String()}
			p.k.record(ev)
			inst.proc.signal(c.stopSig)
		}
		deadline = sent.Add(time.Duration(grace) * time.Second)
	} else {
		deadline = p.k.clock.Now().Add(time.Duration(max(grace, cluster.MinimumGracePeriodSeconds)) * time.Second)
	}
	t := p.k.clock.NewTimer(deadline.Sub(p.k.clock.Now()))
	defer t.Stop()
	select {
	case <-inst.proc.done:
	case <-p.ctx.Done():
	case <-t.C():
		if !inst.proc.exited() {
			ev.Kind, ev.Time, ev.Fields = cluster.Killed, time.Time{}, nil
			p.k.record(ev)
			inst.proc.signal(syscall.SIGKILL)
		}
		select {
		case <-inst.proc.done:
		case <-p.ctx.Done():
		}
	}
}

// preStop runs the container's preStop hook, which the kill started at
// start, and waits for it at most grace from then (T9). A hook still
// running then goes on; it is not cancelled.
func (c *containerWorker) preStop(inst *instance, start time.Time, grace time.Duration) error {
	h := c.spec.Lifecycle.PreStop
	p := c.p
	if h.Sleep != nil {
		// The sleep action is the kubelet's own timer, waited for here; it
		// ends early with an error when the kill gives up waiting
		// (runSleepHandler).
		d := time.Duration(h.Sleep.Seconds) * time.Second
		t := p.k.clock.NewTimer(start.Add(min(d, grace)).Sub(p.k.clock.Now()))
		defer t.Stop()
		select {
		case <-t.C():
			if d > grace {
				return fmt.Errorf("sleep action interrupted after %s", grace)
			}
			return nil
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
	}
	done := make(chan error, 1)
	// Only an exec hook runs in the container and dies with it; the
	// httpGet action is the kubelet's own.
	parent := p.ctx
	if h.Exec != nil {
		parent = inst.ctx
	}
	ctx, cancel := context.WithCancel(parent)
	switch {
	case h.Exec != nil:
		go func() {
			out, err := c.exec(ctx, h.Exec.Command)
			if err != nil {
				err = fmt.Errorf("exec: %w: %s", err, out)
			}
			done <- err
		}()
	case h.HTTPGet != nil:
		go func() {
			code, err := c.httpGet(ctx, h.HTTPGet, "kube-lifecycle/closingtime")
			if err == nil && (code < 200 || code >= 400) {
				err = fmt.Errorf("httpGet: HTTP %d", code)
			}
			done <- err
		}()
	default:
		cancel()
		// tcpSocket is accepted by validation but fails at run time (T9).
		return errors.New("preStop hook has no runnable handler")
	}
	t := p.k.clock.NewTimer(start.Add(grace).Sub(p.k.clock.Now()))
	defer t.Stop()
	select {
	case err := <-done:
		cancel()
		return err
	case <-t.C():
		// The hook is left running, bounded by the instance's context:
		// it ends with the container (T8).
		go func() {
			<-done
			cancel()
		}()
		return fmt.Errorf("preStop hook still running after %s", grace)
	case <-p.ctx.Done():
		cancel()
		return p.ctx.Err()
	}
}
