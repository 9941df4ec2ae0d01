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
	ip      string
	env     []corev1.EnvVar // the kubelet's variables: KubeletConfig.Env, then the Services'
	ctx     context.Context // ends at the kubelet's Close, or after the pod terminated
	cancel  context.CancelFunc

	inits      []*containerWorker // the init containers, run one after the other before containers (C1)
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
	for _, c := range slices.Concat(p.inits, p.containers) {
		<-c.ended
	}
	// A kill sequence outlives its container when the container exits
	// during the preStop hook: the kubelet waits for the hook (T7).
	p.kills.Wait()
	// Every container has stopped: the sandbox goes, and with it the
	// pod's address (C6).
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
// success, then starts the app containers (C1). If one does not succeed
// (restartPolicy Never, or the pod terminates or the kubelet closes
// first), no app container runs.
func (p *podWorker) initialize() {
	defer p.k.wg.Done()
	for _, c := range p.inits {
		p.k.wg.Add(1)
		go c.run()
		<-c.ended
		p.mu.Lock()
		t := c.status.State.Terminated
		p.mu.Unlock()
		if t == nil || t.ExitCode != 0 {
			for _, c := range p.containers {
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
	for _, c := range slices.Concat(p.inits, p.containers) {
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
