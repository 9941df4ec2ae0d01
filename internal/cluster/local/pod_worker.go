package local

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// podWorker runs one pod.
type podWorker struct {
	k       *Kubelet
	pod     *corev1.Pod // the admitted version; its spec does not change
	sandbox podnet.Sandbox
	shared  *sharedPID // the PID namespace of a pod with shareProcessNamespace; nil for another
	ip      string
	env     []corev1.EnvVar // the kubelet's variables: KubeletConfig.Env, then the Services'
	ctx     context.Context // ends at the kubelet's Close, or after the pod terminated
	cancel  context.CancelFunc

	inits      []*containerWorker // the init containers and sidecars, started one after the other before containers (C1, C2)
	containers []*containerWorker
	kills      sync.WaitGroup // the kill sequences of the pod's termination
	statusCh   chan struct{}  // a status change waits to be delivered
	done       chan struct{}  // closed when the pod has terminated

	mu            sync.Mutex
	startTime     metav1.Time
	initialized   metav1.Time // when the last init container completed; zero before
	ready         bool
	readySince    metav1.Time
	terminating   bool
	deleted       bool          // the stop is, or has become, a deletion
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
		// The app containers have ended by themselves: the sidecars are
		// stopped, in their order, with the pod's grace.
		p.stop(p.specGrace(), false)
	}
	// Every container loop ends once the pod is terminating: wait for them,
	// each bounded by its kill sequence.
	for _, c := range slices.Concat(p.inits, p.containers) {
		<-c.ended
	}
	// A kill sequence outlives its container when the container exits
	// during the preStop hook: the kubelet waits for the hook (T7).
	p.kills.Wait()
	// Every container has stopped: the sandbox goes, its pause process
	// and with it the pod's address (C6).
	if p.shared != nil {
		p.shared.stop()
	}
	fields := map[string]string{}
	if err := p.sandbox.Close(); err != nil {
		fields["error"] = "remove the pod's network: " + err.Error()
	}
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
	fields["phase"] = string(p.phase)
	p.k.record(cluster.Event{Kind: cluster.PodTerminated, Namespace: p.pod.Namespace, Pod: p.pod.Name, Fields: fields})
	p.statusChangedLocked()
	p.mu.Unlock()
	// The pod is terminal (T16): its readiness workers stop with its
	// context.
	p.k.mu.Lock()
	delete(p.k.pods, p.pod.UID)
	p.k.mu.Unlock()
	close(p.done)
	p.cancel()
}

// initialize runs the init containers one after the other, each to its
// success, and starts each sidecar in its place, going on once it has
// started; then it starts the app containers (C1, C2). If an init
// container does not succeed (restartPolicy Never, or the pod terminates
// or the kubelet closes first), or a sidecar ends before it started (the
// pod terminates or the kubelet closes), what comes after it never runs.
func (p *podWorker) initialize() {
	defer p.k.wg.Done()
	for i, c := range p.inits {
		p.k.wg.Add(1)
		go c.run()
		ok := false
		if c.role == sidecarRole {
			select {
			case <-c.startedCh:
				ok = true
			case <-c.ended:
			}
		} else {
			<-c.ended
			p.mu.Lock()
			t := c.status.State.Terminated
			p.mu.Unlock()
			ok = t != nil && t.ExitCode == 0
		}
		if !ok {
			for _, c := range slices.Concat(p.inits[i+1:], p.containers) {
				close(c.ended)
			}
			return
		}
	}
	if len(p.inits) > 0 {
		p.mu.Lock()
		p.initialized = metav1.NewTime(p.k.clock.Now())
		for _, c := range p.containers {
			c.status.State.Waiting.Reason = "ContainerCreating"
		}
		p.statusChangedLocked()
		p.mu.Unlock()
	}
	p.k.wg.Add(len(p.containers))
	for _, c := range p.containers {
		go c.run()
	}
}

// specGrace returns the pod's terminationGracePeriodSeconds, or
// Kubernetes' default.
func (p *podWorker) specGrace() int64 {
	if g := p.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return cluster.DefaultTerminationGracePeriodSeconds
}

// terminate starts the pod's termination with grace seconds, or shortens a
// termination under way to grace (T3, T5).
func (p *podWorker) terminate(grace int64) { p.stop(grace, true) }

// stop kills the pod's running containers with grace seconds, or shortens
// a stop under way to grace (T3). A stop that is not a deletion (deleted
// false) is the end of a pod whose app containers ended by themselves: it
// has no pod_terminating event, until a deletion comes.
func (p *podWorker) stop(grace int64, deleted bool) {
	p.mu.Lock()
	if p.terminating {
		shorter := grace < p.grace
		if shorter {
			p.grace = grace
		}
		insts := p.runningLocked()
		// A pod deleted while it stops its sidecars by itself.
		deletion := deleted && !p.deleted
		p.deleted = p.deleted || deleted
		p.mu.Unlock()
		if deletion {
			p.recordTerminating(p.grace)
		}
		// The first kill sequence of each container is still waiting for
		// it; these only add an earlier SIGKILL deadline.
		if shorter {
			p.k.wg.Add(len(insts))
			for _, inst := range insts {
				go func() {
					defer p.k.wg.Done()
					inst.c.kill(inst, grace, nil)
				}()
			}
		}
		return
	}
	p.terminating, p.grace, p.deleted = true, grace, deleted
	// Liveness and startup probing stop; readiness goes on until the
	// containers stop (T6).
	insts := p.runningLocked()
	for _, inst := range insts {
		inst.stopLiveness()
	}
	after := p.stopOrderLocked(insts)
	p.kills.Add(len(insts))
	close(p.terminatingCh)
	p.mu.Unlock()
	if deleted {
		p.recordTerminating(grace)
	}
	// Containers are killed concurrently (T7); only a sidecar's signal
	// waits for its turn (C3).
	for _, inst := range insts {
		go func() {
			defer p.kills.Done()
			inst.c.kill(inst, grace, after[inst])
			close(inst.stopped)
		}()
	}
}

// recordTerminating records the pod's termination, with its grace.
func (p *podWorker) recordTerminating(grace int64) {
	p.k.record(cluster.Event{Kind: cluster.PodTerminating, Namespace: p.pod.Namespace, Pod: p.pod.Name,
		Fields: map[string]string{"grace": (time.Duration(grace) * time.Second).String()}})
}

// stopOrderLocked returns, for each of insts that must wait before its
// stop signal, the instances it waits for (C3, as newTerminationOrdering in
// the kubelet): a sidecar waits for every running app container and for
// the sidecar declared right after it, if that one runs, and so sidecars
// stop in reverse order, after the app.
func (p *podWorker) stopOrderLocked(insts []*instance) map[*instance][]*instance {
	running := map[*containerWorker]*instance{}
	for _, inst := range insts {
		running[inst.c] = inst
	}
	var apps []*instance
	for _, c := range p.containers {
		if inst := running[c]; inst != nil {
			apps = append(apps, inst)
		}
	}
	after := map[*instance][]*instance{}
	var later *containerWorker // the sidecar declared after the one at hand
	for _, c := range slices.Backward(p.inits) {
		if c.role != sidecarRole {
			continue
		}
		if inst := running[c]; inst != nil {
			after[inst] = slices.Clip(apps)
			if l := running[later]; l != nil {
				after[inst] = append(after[inst], l)
			}
		}
		later = c
	}
	return after
}

// runningLocked returns the instances whose process still runs.
func (p *podWorker) runningLocked() []*instance {
	var out []*instance
	for _, c := range slices.Concat(p.inits, p.containers) {
		if c.inst != nil && !c.inst.proc.exited() {
			out = append(out, c.inst)
		}
	}
	return out
}

// updateReadyLocked recomputes the Ready condition: every app container
// and sidecar ready (E5, C2). It records a change.
func (p *podWorker) updateReadyLocked() {
	ready := p.phase == "" || p.phase == corev1.PodRunning || p.phase == corev1.PodPending
	for _, c := range slices.Concat(p.inits, p.containers) {
		// A sidecar's readiness counts; a done init container's does not
		// (C2).
		ready = ready && (c.status.Ready || c.role == initRole)
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
		// Running once an app container has run, also while the
		// sidecars stop after the app containers ended by themselves.
		for _, c := range p.containers {
			if c.status.State.Running != nil || c.status.RestartCount > 0 || c.inst != nil && c.status.State.Terminated != nil {
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
	initialized := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: p.startTime}
	if len(p.inits) > 0 {
		initialized.LastTransitionTime = p.initialized
		if p.initialized.IsZero() {
			initialized.Status, initialized.Reason, initialized.LastTransitionTime = corev1.ConditionFalse, "ContainersNotInitialized", p.startTime
		}
	}
	st := corev1.PodStatus{
		Phase:      phase,
		HostIP:     p.k.cfg.Network.IP().String(),
		PodIP:      p.ip,
		PodIPs:     []corev1.PodIP{{IP: p.ip}},
		StartTime:  &p.startTime,
		Conditions: []corev1.PodCondition{initialized, cond(corev1.ContainersReady, p.ready), cond(corev1.PodReady, p.ready)},
	}
	for _, c := range p.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, *c.status.DeepCopy())
	}
	for _, c := range p.containers {
		st.ContainerStatuses = append(st.ContainerStatuses, *c.status.DeepCopy())
	}
	return st
}

func (p *podWorker) isTerminating() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.terminating
}
