package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

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
	ended   chan struct{} // closed when run returns, or for a container that never runs
	role    role
	// startedCh is closed when the container has first started: its
	// startup probe succeeded, or, without one, its process runs.
	startedCh chan struct{}

	// Guarded by p.mu.
	status corev1.ContainerStatus
	inst   *instance // the latest instance; nil before the first
}

// role is what a container is to its pod.
type role int

const (
	// appRole is a container of containers[].
	appRole role = iota
	// initRole is an init container that runs to its first success before
	// the next starts (C1).
	initRole
	// sidecarRole is an init container with restartPolicy Always: started
	// in its place among the init containers, it runs beside the app
	// containers, restarted whenever it exits, and stops after them (C2,
	// C3).
	sidecarRole
)

// instance is one run of a container: one process, its probes.
type instance struct {
	c            *containerWorker
	proc         *process
	startedAt    time.Time
	ctx          context.Context // ends when the process's exit is recorded, or the kubelet closes
	cancel       context.CancelFunc
	liveCtx      context.Context // the liveness and startup workers' context
	stopLiveness context.CancelFunc
	killing      bool // guarded by p.mu: a kill sequence has started
	// stopped is closed when the kill sequence of the pod's stop has
	// ended, preStop hook included: what a later sidecar waits for (C3).
	stopped chan struct{}
}

func newContainerWorker(p *podWorker, spec *corev1.Container) (*containerWorker, error) {
	vars, env, err := containerEnv(p.pod, spec, p.ip, p.env)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", spec.Name, err)
	}
	argv, err := commandLine(p.pod, spec, vars, p.k.cfg.ImageCommands)
	if err != nil {
		return nil, err
	}
	c := &containerWorker{p: p, spec: spec, argv: argv, env: env, stopSig: syscall.SIGTERM,
		backoff: p.k.cfg.CrashLoopBackOff, ended: make(chan struct{}), startedCh: make(chan struct{})}
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
	// CheckPodSpec, at the pod's admission, refused the probes and hooks
	// that the kubelet does not run.
	c.status = corev1.ContainerStatus{Name: spec.Name, Image: spec.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	return c, nil
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
			// The exit is recorded before the instance's context ends, so
			// that what waits for that (a sidecar's turn) comes after it.
			code, finishedAt = c.exited(inst)
			inst.cancel()
		} else {
			code, finishedAt = 128, p.k.clock.Now()
		}
		if p.ctx.Err() != nil || p.isTerminating() || c.role == initRole && code == 0 {
			return
		}
		// A sidecar restarts whatever the pod's policy (C2); an init
		// container that failed restarts unless the policy is Never, as
		// under OnFailure (C1).
		switch policy := p.pod.Spec.RestartPolicy; {
		case c.role == sidecarRole:
		case policy == corev1.RestartPolicyNever:
			return
		case policy == corev1.RestartPolicyOnFailure && code == 0:
			return
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
		c.record(cluster.BackOff, time.Time{}, map[string]string{"delay": wait.String()})
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
	proc, reason, err := startProcess(&p.k.wg, &p.k.iso, p.sandbox, p.shared, p.k.clock, c.argv, c.env, c.spec.WorkingDir, c.logs, restart)
	if err != nil {
		// containerd reports a failed start as exit 128, StartError.
		now := metav1.NewTime(p.k.clock.Now())
		c.moveToLastStateLocked()
		c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now}}
		c.status.RestartCount = restart
		c.inst = &instance{c: c, proc: &process{done: closedChan}}
		p.statusChangedLocked()
		c.record(cluster.ContainerStartFailed, time.Time{}, map[string]string{"error": err.Error()})
		return nil
	}
	inst := &instance{c: c, proc: proc, startedAt: p.k.clock.Now(), stopped: make(chan struct{})}
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
	c.status.Ready = started && c.spec.ReadinessProbe == nil && c.role != initRole
	if started {
		c.startedLocked()
	}
	fields := map[string]string{"pid": strconv.Itoa(proc.cmd.Process.Pid), "restart": strconv.Itoa(int(restart)),
		"pid_namespace": proc.isolation.String()}
	if reason != "" {
		fields["pid_namespace_reason"] = reason
	}
	c.record(cluster.ContainerStarted, time.Time{}, fields)
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

// record records an event of kind of the container, at a time if it is
// not zero, with fields and, for an init container or a sidecar, its
// cluster.ContainerFields.
func (c *containerWorker) record(kind cluster.EventKind, at time.Time, fields map[string]string) {
	p := c.p
	if init := cluster.ContainerFields(&p.pod.Spec, c.spec.Name); init != nil {
		if fields == nil {
			fields = map[string]string{}
		}
		maps.Copy(fields, init)
	}
	p.k.record(cluster.Event{Kind: kind, Time: at, Namespace: p.pod.Namespace, Pod: p.pod.Name, Container: c.spec.Name, Fields: fields})
}

// startedLocked notes that the container has started, which lets the init
// containers after a sidecar start (C2).
func (c *containerWorker) startedLocked() {
	select {
	case <-c.startedCh:
	default:
		close(c.startedCh)
	}
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
	c.record(cluster.ContainerExited, time.Time{}, map[string]string{"code": strconv.Itoa(int(code)), "reason": reason})
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
	c.record(cluster.ProbeFailed, time.Time{}, map[string]string{"probe": string(kind), "target": c.probeTarget(h), "failures": strconv.Itoa(failures), "output": output})
}

// probeResult stores a probe's new result for inst and acts on it (P5–P8).
func (c *containerWorker) probeResult(inst *instance, kind probeKind, success bool, output string) {
	p := c.p
	result := "failure"
	if success {
		result = "success"
	}
	c.record(cluster.ProbeResult, time.Time{}, map[string]string{"probe": string(kind), "result": result, "output": output})
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
			c.startedLocked()
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
	c.record(cluster.LivenessKill, time.Time{}, map[string]string{"probe": string(kind)})
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
	c.kill(inst, grace, nil)
}

// kill stops inst as the kubelet's killContainer does (T7): the preStop
// hook, if any and grace > 0, for at most grace seconds; then, for a
// sidecar, the wait for its turn: until every instance of after has exited,
// within what is left of the grace (C3); then the stop signal to the first
// process, and SIGKILL when what is left of the grace, at least 2 s, has
// passed (T8, T11). A second kill of the same instance only adds its own
// SIGKILL deadline, so a shorter grace wins (T3). kill returns when the
// process has exited, or when the kubelet closes.
func (c *containerWorker) kill(inst *instance, grace int64, after []*instance) {
	p := c.p
	p.mu.Lock()
	again := inst.killing
	inst.killing = true
	p.mu.Unlock()
	// Every wait counts from the moment its event is stamped with, so
	// that a late goroutine does not push the deadlines back.
	var deadline time.Time
	if !again {
		if c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil && grace > 0 {
			start := p.k.clock.Now()
			c.record(cluster.PreStopStarted, start, nil)
			err := c.preStop(inst, start, time.Duration(grace)*time.Second)
			var fields map[string]string
			if err != nil {
				fields = map[string]string{"error": err.Error()}
			}
			c.record(cluster.PreStopFinished, time.Time{}, fields)
			// Whole seconds count (T7 b).
			grace -= int64(p.k.clock.Since(start) / time.Second)
		}
		fields := map[string]string{"signal": unix.SignalName(c.stopSig)}
		if len(after) > 0 && grace > 0 {
			start := p.k.clock.Now()
			c.waitTurn(after, start.Add(time.Duration(grace)*time.Second))
			waited := p.k.clock.Since(start)
			grace -= int64(waited / time.Second)
			var names []string
			for _, a := range after {
				names = append(names, a.c.spec.Name)
			}
			fields["after"], fields["waited"] = strings.Join(names, ","), waited.Round(time.Millisecond).String()
		}
		grace = max(grace, cluster.MinimumGracePeriodSeconds)
		fields["grace"] = (time.Duration(grace) * time.Second).String()
		sent := p.k.clock.Now()
		// Each event is recorded before its signal goes, so that it
		// precedes the exit the signal causes in the stream.
		if !inst.proc.exited() {
			c.record(cluster.SignalSent, sent, fields)
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
			c.record(cluster.Killed, time.Time{}, nil)
			inst.proc.signal(syscall.SIGKILL)
		}
		select {
		case <-inst.proc.done:
		case <-p.ctx.Done():
		}
	}
}

// waitTurn waits until the kill of every instance of after has ended and
// its exit is recorded, until deadline, or until the kubelet closes
// (waitForTurn in the kubelet, whose containerTerminated comes once
// killContainer, the preStop hook included, has returned).
func (c *containerWorker) waitTurn(after []*instance, deadline time.Time) {
	p := c.p
	t := p.k.clock.NewTimer(deadline.Sub(p.k.clock.Now()))
	defer t.Stop()
	for _, a := range after {
		for _, done := range []<-chan struct{}{a.stopped, a.ctx.Done()} {
			select {
			case <-done:
			case <-t.C():
				return
			case <-p.ctx.Done():
				return
			}
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
