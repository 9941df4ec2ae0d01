package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// A Cluster is what a run of one scenario needs of the cluster it runs
// on: its backend, where the workload goes, where the traffic comes from,
// and how it ends. [RunnerConfig.NewCluster] makes one per scenario.
type Cluster struct {
	// Backend is the cluster.
	Backend cluster.Backend
	// Namespace is the namespace of the workload's objects that name
	// none; empty means "default".
	Namespace string
	// Traffic is the source of the scenario's traffic; nil means
	// LocalTraffic through Backend's DialContext.
	Traffic TrafficSource
	// ListenOutside listens on a port (0 for a free one) of a host that
	// the cluster's pods reach, outside the cluster, for a Dependency; nil
	// means the machine's loopback interface (listenLoopback).
	ListenOutside func(port int) (net.Listener, error)
	// NoClusterDNS reports that the cluster's pods resolve no Service
	// names (the embedded cluster, closingtime cluster): a container that
	// names one of the workload's Services by its DNS name gets a notice
	// at the deploy.
	NoClusterDNS bool
	// Deployed reports that the workload runs on the cluster already, its
	// objects the cluster's own (rollout deploy/NAME): the runner applies
	// none of them, so that closingtime takes no ownership of their fields
	// and changes nothing but what the action does.
	Deployed bool
	// Close, if not nil, is called once when the scenario is done,
	// however it ends, and must return by the end of ctx. It closes the
	// cluster, or what the run made of it.
	Close func(ctx context.Context) error
}

// Phase names what a run is doing, for progress reports.
type Phase string

// The phases of a scenario, in order.
const (
	PhaseDeploy Phase = "deploy"
	PhaseWarmUp Phase = "warm-up"
	PhaseAct    Phase = "act"
	PhaseWait   Phase = "wait"
	PhaseAfter  Phase = "after"
	PhaseSettle Phase = "settle"
	PhaseDone   Phase = "done"
)

// closeTimeout bounds closing a scenario's cluster.
const closeTimeout = 30 * time.Second

// catchUpTimeout bounds how long the runner waits for its recording of the
// cluster's events to show what the cluster's API already said: a real
// cluster's watch events reach the recording behind the Deployment's status,
// seconds behind on a loaded machine.
const catchUpTimeout = 30 * time.Second

// Progress is a report of a run's progress: a new phase, or a notice in
// the current one.
type Progress struct {
	Scenario string
	// Repetition counts from 1; 0 before the first.
	Repetition, Repetitions int
	Phase                   Phase
	// Notice, when not empty, is a one-line message about the run in Phase,
	// which has not changed: at the deploy's start, before any pod does,
	// each $(NAME) of a container that stays as written (see
	// [cluster.UnresolvedRefs]), at its file and line, with the env entry
	// to add; then what the cluster reports that explains a wait (a
	// container that fails to start or exits, with its exit code and last
	// log lines, one that waits to restart, a failing probe, a hint at the
	// likely cause), or, every 10 s, how many pods a long deploy has ready
	// and how the Service last failed to answer. Notices of the cluster
	// come from its events, in every phase unless
	// [RunnerConfig.DeployNoticesOnly] is set; a pod's failing probe gives
	// at most one every 10 s.
	Notice string
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// NewCluster starts the cluster of one scenario with its settings, or
	// gives the one where the scenario's workload runs. Its backend must
	// map [Image] to the closingtime binary.
	NewCluster func(ClusterSettings) (*Cluster, error)
	// Quick applies each scenario's quick settings.
	Quick bool
	// Repetitions, when positive, replaces each scenario's repetitions.
	Repetitions int
	// Progress, if not nil, is called at each phase and with each notice;
	// it must not block for long. Calls may be concurrent, for one
	// scenario too: notices come as the cluster's events do.
	Progress func(Progress)
	// DeployNoticesOnly limits the notices to the deploy, where they
	// explain a run that does not start: once the Service answers, the
	// runner stops reading the cluster's events and the exited containers'
	// logs for notices, and none comes in a later phase. It suits
	// scenarios that make trouble on purpose once deployed (crashes,
	// failing probes), as the lab's do; a run of one's own server, whose
	// trouble is news, leaves it unset.
	DeployNoticesOnly bool
}

// Runner runs scenarios. It is safe for concurrent use: each Run has a
// cluster of its own.
type Runner struct {
	cfg RunnerConfig
}

// NewRunner returns a runner configured by cfg.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.NewCluster == nil {
		return nil, errors.New("scenario runner: NewCluster is required")
	}
	if cfg.Progress == nil {
		cfg.Progress = func(Progress) {}
	}
	return &Runner{cfg: cfg}, nil
}

// settings are a scenario's description and timings after defaults and
// quick overrides.
type settings struct {
	description               string
	repetitions               int
	warmUp, after, settle, rl time.Duration
	// duration and timeout are the action's.
	duration, timeout time.Duration
	// rate, if positive, replaces every client's.
	rate float64
}

func (r *Runner) settings(s *Scenario) settings {
	st := settings{description: s.Description, repetitions: s.Repetitions, warmUp: s.WarmUp, after: s.After, settle: s.Settle, rl: s.Limits.Run,
		duration: s.Action.Duration, timeout: s.Action.Timeout}
	if r.cfg.Quick {
		q := s.Quick
		st.description = cmp.Or(q.Description, st.description)
		st.repetitions = cmp.Or(q.Repetitions, st.repetitions)
		st.warmUp = cmp.Or(q.WarmUp, st.warmUp)
		st.after = cmp.Or(q.After, st.after)
		st.settle = cmp.Or(q.Settle, st.settle)
		st.duration = cmp.Or(q.Duration, st.duration)
		st.timeout = cmp.Or(q.Timeout, st.timeout)
		st.rate = q.Rate
	}
	st.repetitions = cmp.Or(r.cfg.Repetitions, st.repetitions, DefaultRepetitions)
	st.warmUp = cmp.Or(st.warmUp, DefaultWarmUp)
	st.after = cmp.Or(st.after, DefaultAfter)
	st.settle = cmp.Or(st.settle, DefaultSettle)
	st.rl = cmp.Or(st.rl, DefaultRunLimit)
	return st
}

// Run runs scenario s on a cluster of its own: it starts the scenario's
// dependency, if any, applies the workload, then for each repetition
// starts the traffic, warms up, acts, waits until the Deployment is
// complete, its pods ready and every terminating pod gone, keeps the
// traffic on for the after period, stops it and computes the run's
// figures. It returns when every repetition is done, or early with an
// error; the cluster and the dependency are closed and their processes gone
// either way. A workload that does not deploy is a *DeployError, and no
// result: its first rollout or its Service's answers do not come within
// the run's limit, or, from the deploy until the first action, a
// container of the Deployment's pods exits or fails to start (which stops
// the deploy at once) or fewer pods than its replicas are ready.
func (r *Runner) Run(ctx context.Context, s *Scenario) (res *results.Result, err error) {
	st := r.settings(s)
	res = &results.Result{Name: s.Name, Description: st.description, Seed: s.Seed, Action: s.Action.Kind}
	// now is the run's latest progress, which notices repeat.
	var mu sync.Mutex
	now := Progress{Scenario: s.Name, Repetitions: st.repetitions}
	progress := func(rep int, p Phase) {
		mu.Lock()
		now.Repetition, now.Phase = rep, p
		q := now
		mu.Unlock()
		r.cfg.Progress(q)
	}
	notice := func(msg string) {
		mu.Lock()
		p := now
		mu.Unlock()
		p.Notice = msg
		r.cfg.Progress(p)
	}
	// explanation is the pod notices' latest, which an error of the deploy
	// quotes.
	explanation := ""
	explained := func(msg string) {
		mu.Lock()
		explanation = msg
		mu.Unlock()
	}
	cl, err := r.cfg.NewCluster(s.Cluster)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: start cluster: %w", s.Name, err)
	}
	if cl.Close != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			if cerr := cl.Close(cctx); cerr != nil && err == nil {
				err = fmt.Errorf("scenario %s: close cluster: %w", s.Name, cerr)
			}
		}()
	}
	var dep *dependency
	env := map[string]string{}
	if s.Dependency != nil {
		listen := cl.ListenOutside
		if listen == nil {
			listen = listenLoopback
		}
		if dep, err = startDependency(listen); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		defer func() {
			if cerr := dep.close(); cerr != nil && err == nil {
				err = fmt.Errorf("scenario %s: close dependency: %w", s.Name, cerr)
			}
		}()
		env[cmp.Or(s.Dependency.Env, DefaultDependencyEnv)] = dep.URL()
	}
	c := cl.Backend
	objects, deployment, target, err := r.prepare(s, env, cmp.Or(cl.Namespace, metav1.NamespaceDefault))
	if err != nil {
		return nil, err
	}
	res.Deployment, res.Target = deployment.Namespace+"/"+deployment.Name, target
	traffic := cl.Traffic
	if traffic == nil {
		var lookup load.Lookup
		if l, ok := c.(interface {
			LookupHost(context.Context, string) ([]netip.Addr, error)
		}); ok {
			lookup = l.LookupHost
		}
		traffic = LocalTraffic(c.DialContext, lookup)
	}
	// rec is the runner's recording of the cluster's events, which follows
	// them a little behind.
	rec := &cluster.EventLog{}
	// The followers of the cluster's events run until the run ends; those
	// of the deploy, until it ends: waiting, and explain if the notices
	// are the deploy's only.
	ectx, stopEvents := context.WithCancel(ctx)
	deployCtx, stopDeployFollowers := context.WithCancel(ectx)
	var followers, deployFollowers sync.WaitGroup
	defer func() {
		stopEvents()
		stopDeployFollowers()
		followers.Wait()
		deployFollowers.Wait()
	}()
	followers.Go(func() {
		for e := range c.Events(ectx) {
			rec.Record(e)
		}
	})
	if r.cfg.DeployNoticesOnly {
		deployFollowers.Go(func() { explain(deployCtx, c, notice, explained) })
	} else {
		followers.Go(func() { explain(ectx, c, notice, explained) })
	}

	cfg := loadConfig(s.Traffic, target, st.rl)
	if st.rate > 0 {
		for i := range cfg.Clients {
			cfg.Clients[i].Rate = st.rate
		}
	}

	// Deploy, and wait until the Service answers, telling every
	// noticeInterval how many pods are ready and what the Service last
	// answered. A container of the Deployment's pods that exits or fails
	// to start means a workload that does not run: the deploy stops at
	// once.
	progress(0, PhaseDeploy)
	for _, n := range referenceNotices(s, objects) {
		notice(n)
	}
	if cl.NoClusterDNS {
		for _, n := range dnsNameNotices(s, objects) {
			notice(n)
		}
	}
	dctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	dctx, cancel := context.WithTimeout(dctx, st.rl)
	defer cancel()
	// deployError returns err of step, with the explanation, or the
	// error of the exit that stopped the deploy.
	deployError := func(step string, err error) error {
		if errors.Is(context.Cause(dctx), errExited) {
			if derr := deployed(ctx, s, c, rec, deployment); derr != nil {
				return derr
			}
		}
		mu.Lock()
		why := explanation
		mu.Unlock()
		return &DeployError{Scenario: s.Name, Step: step, Err: err, Cause: why}
	}
	var answer lastAnswer
	deployFollowers.Go(func() { waiting(deployCtx, rec, deployment, st.rl, &answer, notice) })
	deployFollowers.Go(func() {
		exited := func(events []cluster.Event) bool {
			exits, _, _, _ := setupOf(events, deployment.Name)
			return len(exits) > 0 || len(otherExits(events, s, deployment)) > 0
		}
		if waitFor(deployCtx, rec, exited) == nil {
			abort(errExited)
		}
	})
	if !cl.Deployed {
		if err := c.Apply(dctx, objects); err != nil {
			return nil, deployError("apply", err)
		}
	}
	if _, err := c.RolloutStatus(dctx, deployment.Namespace, deployment.Name); err != nil {
		return nil, deployError("deploy: its pods never all became ready", err)
	}
	if err := traffic.WaitServing(dctx, cfg, answer.set); err != nil {
		return nil, deployError("wait for the service to answer", err)
	}
	// Their last notices come before the next phase.
	stopDeployFollowers()
	deployFollowers.Wait()

	for rep := 1; rep <= st.repetitions; rep++ {
		if rep > 1 {
			progress(rep, PhaseSettle)
			if s.Action.Kind == ActionScale {
				// As an autoscaler scales back and forth, each
				// repetition scales from the Deployment's own replicas.
				if err := c.Scale(ctx, deployment.Namespace, deployment.Name, ptr.Deref(deployment.Spec.Replicas, cluster.DefaultReplicas)); err != nil {
					return nil, fmt.Errorf("scenario %s: scale back before repetition %d: %w", s.Name, rep, err)
				}
				if _, err := c.RolloutStatus(ctx, deployment.Namespace, deployment.Name); err != nil {
					return nil, fmt.Errorf("scenario %s: scale back before repetition %d: %w", s.Name, rep, err)
				}
			}
			if err := sleep(ctx, st.settle); err != nil {
				return nil, err
			}
		}
		a := &actor{c: c, rec: rec, action: s.Action, d: deployment, others: otherDeployments(s, deployment), dep: dep, duration: st.duration, timeout: st.timeout}
		// The first action is done only to a workload that runs: until
		// then, a container's exit is the deploy's failure.
		if rep == 1 {
			a.before = func(ctx context.Context) error { return deployed(ctx, s, c, rec, deployment) }
		}
		run, err := r.repeat(ctx, st, a, traffic, cfg, func(p Phase) { progress(rep, p) })
		var derr *DeployError
		if errors.As(err, &derr) {
			return nil, derr
		}
		if err != nil {
			return nil, fmt.Errorf("scenario %s: repetition %d: %w", s.Name, rep, err)
		}
		run.Repetition = rep
		res.Totals.Add(run.Totals)
		res.Runs = append(res.Runs, *run)
	}
	progress(st.repetitions, PhaseDone)
	return res, nil
}

// prepare returns the objects to apply, with quick overrides, the
// variables of env in every container of every Deployment and namespace
// where they have none, the Deployment acted on and the traffic's URL.
func (r *Runner) prepare(s *Scenario, env map[string]string, namespace string) ([]runtime.Object, *appsv1.Deployment, string, error) {
	var objects []runtime.Object
	var deployment *appsv1.Deployment
	var service *corev1.Service
	d, err := s.Deployment()
	if err != nil {
		return nil, nil, "", err
	}
	svc, err := s.Service()
	if err != nil {
		return nil, nil, "", err
	}
	for _, o := range s.Objects {
		obj := o.Obj.DeepCopyObject()
		m := o.Meta()
		if m.GetNamespace() == "" {
			obj.(interface{ SetNamespace(string) }).SetNamespace(namespace)
		}
		if dep, ok := obj.(*appsv1.Deployment); ok {
			if r.cfg.Quick {
				quick(dep, s.Quick)
			}
			setEnv(&dep.Spec.Template.Spec, env)
			if o.Obj == d {
				deployment = dep
			}
		}
		if o.Obj == svc {
			service = obj.(*corev1.Service)
		}
		objects = append(objects, obj)
	}
	port := s.Traffic.Port
	if port == 0 {
		if len(service.Spec.Ports) == 0 {
			return nil, nil, "", fmt.Errorf("scenario %s: Service %s has no port", s.Name, service.Name)
		}
		port = service.Spec.Ports[0].Port
	}
	host := net.JoinHostPort(service.Name+"."+service.Namespace, strconv.Itoa(int(port)))
	switch s.Traffic.Protocol {
	case ProtocolGRPC:
		return objects, deployment, "grpc://" + host + s.Traffic.Path, nil
	case ProtocolHTTP2:
		return objects, deployment, "h2c://" + host + cmp.Or(s.Traffic.Path, DefaultPath), nil
	}
	return objects, deployment, "http://" + host + cmp.Or(s.Traffic.Path, DefaultPath), nil
}

// quick applies q's pod settings to d.
func quick(d *appsv1.Deployment, q Quick) {
	spec := &d.Spec.Template.Spec
	if q.GracePeriodSeconds != nil {
		g := *q.GracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &g
	}
	setEnv(spec, q.Env)
}

// setEnv sets the variables of env in every container of spec, replacing
// a variable of the same name.
func setEnv(spec *corev1.PodSpec, env map[string]string) {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, name := range slices.Sorted(maps.Keys(env)) {
			value := env[name]
			replaced := false
			for j := range c.Env {
				if c.Env[j].Name == name {
					c.Env[j] = corev1.EnvVar{Name: name, Value: value}
					replaced = true
				}
			}
			if !replaced {
				c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
			}
		}
	}
}

// repeat runs one repetition of a's action, with the traffic of cfg from
// traffic.
func (r *Runner) repeat(ctx context.Context, st settings, a *actor, traffic TrafficSource, cfg load.Config, progress func(Phase)) (*results.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, st.rl)
	defer cancel()
	c, rec, d := a.c, a.rec, a.d
	firstEvent := len(rec.Events())
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	type outcome struct {
		report   *load.Report
		requests []load.Result
		err      error
	}
	loaded := make(chan outcome, 1)
	started := make(chan struct{})
	go func() {
		rep, requests, err := traffic.Run(lctx, cfg, func() { close(started) })
		loaded <- outcome{rep, requests, err}
	}()
	// fail stops the traffic and returns err.
	fail := func(err error) (*results.Run, error) {
		stopLoad()
		<-loaded
		return nil, err
	}
	select {
	case <-started:
	case out := <-loaded:
		return nil, fmt.Errorf("traffic: %w", cmp.Or(out.err, errors.New("ended before it started")))
	case <-ctx.Done():
		return fail(ctx.Err())
	}

	progress(PhaseWarmUp)
	if err := sleep(ctx, st.warmUp); err != nil {
		return fail(err)
	}
	if a.before != nil {
		if err := a.before(ctx); err != nil {
			return fail(err)
		}
	}
	progress(PhaseAct)
	run := &results.Run{Start: time.Now()}
	if err := a.act(ctx, run); err != nil {
		return fail(err)
	}
	progress(PhaseWait)
	goneAt, err := a.settled(ctx, firstEvent)
	if err != nil {
		return fail(err)
	}
	progress(PhaseAfter)
	if err := sleep(ctx, st.after); err != nil {
		return fail(err)
	}
	stopLoad()
	out := <-loaded
	if out.err != nil {
		return nil, out.err
	}
	all := rec.Events()
	events := all[firstEvent:]
	logs := map[string][]cluster.LogLine{}
	sidecars := map[string][]cluster.LogLine{}
	spec := &d.Spec.Template.Spec
	for _, pod := range podsOf(events) {
		for _, name := range append([]string{spec.Containers[cluster.ServerIndex(spec)].Name}, proxyContainers(spec)...) {
			l, err := c.Logs(ctx, d.Namespace, pod, name)
			if err != nil && !errors.Is(err, cluster.ErrNotFound) {
				return nil, fmt.Errorf("logs of pod %s: %w", pod, err)
			}
			if _, ok := logs[pod]; !ok {
				logs[pod] = l
				continue
			}
			sidecars[pod] = append(sidecars[pod], l...)
		}
	}
	ingress, err := ingressLogs(ctx, c, d.Namespace, a.others, all, unanswered(out.requests))
	if err != nil {
		return nil, err
	}
	failed := figures(run, out.report, out.requests, events, podAddressesOf(all), logs, proxyLogs{ingress: ingress, sidecars: sidecars}, goneAt)
	run.Running = runningOf(all[:firstEvent], d.Name)
	disruption(run, all, d.Name, replicas(d), rolloutAllowed(d, replicas(d), a.action.Kind))
	run.Diagnosis = diagnosis.Diagnose(run, failed)
	return run, nil
}

// proxyContainers returns the names of spec's containers, native sidecars
// included, that run `closingtime proxy` beside the pod's server.
func proxyContainers(spec *corev1.PodSpec) []string {
	var names []string
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if kind, _ := cluster.HelperKind(&cs[i]); kind == "proxy" {
				names = append(names, cs[i].Name)
			}
		}
	}
	return names
}

// ingressLogs returns the logs of the pods of Deployments others, from
// events, in namespace unless one names its own: an ingress in front of
// the measured Deployment logs which endpoints it routed to, and where
// each request went. An ingress logs a request when it ends, which for
// one whose client gave up is a moment after the client did: the logs
// are read again, for up to ingressLogWait, until they name every
// request of ids, or stop growing.
func ingressLogs(ctx context.Context, c cluster.Backend, namespace string, others []*appsv1.Deployment, events []cluster.Event, ids []string) (map[string][]cluster.LogLine, error) {
	pods := map[string]*appsv1.Deployment{}
	for _, od := range others {
		tr := newReadiness(od.Name)
		for _, e := range events {
			tr.add(e)
		}
		for pod := range tr.ours {
			pods[pod] = od
		}
	}
	deadline := time.Now().Add(ingressLogWait)
	lines := -1 // at the last reading
	for {
		logs := map[string][]cluster.LogLine{}
		named := map[string]bool{}
		n := 0
		for pod, od := range pods {
			spec := &od.Spec.Template.Spec
			l, err := c.Logs(ctx, cmp.Or(od.Namespace, namespace), pod, spec.Containers[cluster.ServerIndex(spec)].Name)
			if err != nil && !errors.Is(err, cluster.ErrNotFound) {
				return nil, fmt.Errorf("logs of pod %s: %w", pod, err)
			}
			logs[pod] = l
			n += len(l)
			for _, line := range l {
				var ev struct{ Event, ID string }
				if json.Unmarshal([]byte(line.Text), &ev) == nil && ev.Event == "request" {
					named[ev.ID] = true
				}
			}
		}
		missing := slices.ContainsFunc(ids, func(id string) bool { return !named[id] })
		if len(pods) == 0 || !missing || n == lines || time.Now().After(deadline) {
			return logs, nil
		}
		lines = n
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// ingressLogWait bounds how long ingressLogs waits for an ingress to log
// the requests whose clients gave up.
const ingressLogWait = 2 * time.Second

// unanswered returns the ids of the requests of results that failed
// without an answer, which an ingress in front would log.
func unanswered(requests []load.Result) []string {
	var ids []string
	for _, r := range requests {
		if r.Class.Failed() && r.Class != load.HTTP5xx && r.Class != load.Refused && r.Class != load.ConnectTimeout {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// replicas returns d's spec.replicas, defaulted.
func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return cluster.DefaultReplicas
	}
	return *d.Spec.Replicas
}

// actor does a scenario's action to its Deployment d on cluster c, and
// waits for its end.
type actor struct {
	c      cluster.Backend
	rec    *cluster.EventLog
	action Action
	d      *appsv1.Deployment
	// others are the scenario's other Deployments, such as an ingress in
	// front of d.
	others []*appsv1.Deployment
	// dep is the scenario's dependency; nil if it has none.
	dep *dependency
	// before, if not nil, is called before the action; its error ends the
	// repetition, with the action not done.
	before func(context.Context) error
	// duration and timeout are the action's, after quick overrides.
	duration, timeout time.Duration
	// acted, if not nil, matches the event that the action's last change
	// records. The recording follows the cluster's events a little behind:
	// settled waits for that event before it judges from the recording.
	acted func(cluster.Event) bool
}

// act does the action, and records its outcome in run: an outage's
// times, a drain's outcome, a rollback, each from the entry of the step on
// run's timeline.
func (a *actor) act(ctx context.Context, run *results.Run) error {
	c, d := a.c, a.d
	a.acted = nil
	// step adds the runner's step of kind to the timeline, now, and
	// returns its time.
	step := func(kind, node string, detail map[string]string) float64 {
		e := results.Entry{AtMS: ms(time.Since(run.Start)), Source: results.SourceRunner, Kind: kind, Node: node, Detail: detail}
		run.Timeline = append(run.Timeline, e)
		return e.AtMS
	}
	var timeout map[string]string
	if a.timeout > 0 {
		timeout = map[string]string{"timeout": a.timeout.String()}
	}
	switch a.action.Kind {
	case ActionRolloutRestart:
		return c.RolloutRestart(ctx, d.Namespace, d.Name)
	case ActionScale:
		return c.Scale(ctx, d.Namespace, d.Name, *a.action.Replicas)
	case ActionDeletePod, ActionEvict:
		pod, err := readyPod(ctx, a.rec)
		if err != nil {
			return fmt.Errorf("no ready pod to %s: %w", a.action.Kind, err)
		}
		a.acted = func(e cluster.Event) bool {
			switch e.Kind {
			case cluster.PodDeleted, cluster.PodEvicted, cluster.EvictionRefused:
				return e.Pod == pod
			}
			return false
		}
		if a.action.Kind == ActionEvict {
			var refused *cluster.EvictionError
			if err := c.Evict(ctx, d.Namespace, pod); err != nil && !errors.As(err, &refused) {
				return err
			}
			// A refusal is the outcome to observe: the timeline has it.
			return nil
		}
		return c.DeletePod(ctx, d.Namespace, pod, nil)
	case ActionDrain:
		node := cmp.Or(a.action.Node, "node-1")
		step(results.RunnerDrainStarted, node, timeout)
		err := c.Drain(ctx, node, cluster.DrainOptions{Timeout: a.timeout})
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		// A drain that a budget blocks until its timeout is an outcome,
		// not an error.
		end := step(results.RunnerDrainEnded, node, map[string]string{"drained": strconv.FormatBool(err == nil)})
		run.Drain = &results.DrainOutcome{Node: node, Drained: err == nil, EndMS: end, TimeoutMS: ms(a.timeout)}
		// The maintenance is over, drained or not: the operator uncordons
		// the node, which takes pods again.
		a.acted = func(e cluster.Event) bool { return e.Kind == cluster.NodeUncordoned && e.Node == node }
		return c.Cordon(ctx, node, false)
	case ActionSetEnv:
		changed := d.DeepCopy()
		setEnv(&changed.Spec.Template.Spec, a.action.Env)
		if err := c.Apply(ctx, []runtime.Object{changed}); err != nil {
			return err
		}
		step(results.RunnerEnvApplied, "", maps.Clone(a.action.Env))
		if a.timeout == 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, a.timeout)
		_, err := c.RolloutStatus(rctx, d.Namespace, d.Name)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// Not complete within the timeout: back to the previous template,
		// as `kubectl rollout undo` does.
		run.RolledBackMS = ptr.To(step(results.RunnerRolledBack, "", timeout))
		return c.Apply(ctx, []runtime.Object{d})
	case ActionOutage:
		if err := a.dep.down(a.action.Mode); err != nil {
			return err
		}
		mode := map[string]string{"mode": a.action.Mode}
		run.Outage = &results.Outage{Mode: a.action.Mode, StartMS: step(results.RunnerOutageStarted, "", mode)}
		err := sleep(ctx, a.duration)
		if uerr := a.dep.up(); err == nil {
			err = uerr
		}
		run.Outage.EndMS = step(results.RunnerOutageEnded, "", mode)
		return err
	}
	return nil
}

// settled waits until the Deployment is complete, every one of its pods
// ready, and no pod terminates, and returns when the last pod that
// terminated after event from was gone.
func (a *actor) settled(ctx context.Context, from int) (time.Time, error) {
	c, d := a.c, a.d
	if a.action.Kind == ActionRolloutRestart {
		st, err := c.RolloutStatus(ctx, d.Namespace, d.Name)
		return st.OldPodsGoneAt, err
	}
	if a.acted != nil {
		if err := waitFor(ctx, a.rec, func(events []cluster.Event) bool { return slices.ContainsFunc(events[from:], a.acted) }); err != nil {
			return time.Time{}, err
		}
	}
	want := replicas(d)
	if a.action.Kind == ActionScale {
		want = *a.action.Replicas
		// The recording can show the Deployment complete before the
		// scale-in's deletions: wait for as many of its pods' as the
		// scale-in removes, so that the terminations below are the
		// victims'.
		if err := waitFor(ctx, a.rec, func(events []cluster.Event) bool {
			deleted := 0
			for _, e := range events[from:] {
				if e.Kind == cluster.PodDeleted && strings.HasPrefix(e.Pod, d.Name+"-") {
					deleted++
				}
			}
			return int32(deleted) >= replicas(d)-want
		}); err != nil {
			return time.Time{}, err
		}
	}
	if _, err := c.RolloutStatus(ctx, d.Namespace, d.Name); err != nil {
		return time.Time{}, err
	}
	// A Deployment whose rollout completed can lose readiness afterwards,
	// as in an outage: wait until it has it back.
	if err := waitFor(ctx, a.rec, func(events []cluster.Event) bool {
		tr := newReadiness(d.Name)
		for _, e := range events {
			tr.add(e)
		}
		return tr.ready() >= int(want)
	}); err != nil {
		return time.Time{}, err
	}
	return terminatingGone(ctx, a.rec, from)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readyPod returns the first pod, by name, that is ready and not
// terminating, waiting up to catchUpTimeout for the recording rec to show
// one.
func readyPod(ctx context.Context, rec *cluster.EventLog) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	first := ""
	err := waitFor(ctx, rec, func(events []cluster.Event) bool {
		ready := map[string]bool{}
		for _, e := range events {
			switch e.Kind {
			case cluster.PodReady:
				ready[e.Pod] = true
			case cluster.PodUnready, cluster.PodTerminating, cluster.PodDeleted:
				delete(ready, e.Pod)
			}
		}
		for p := range ready {
			if first == "" || p < first {
				first = p
			}
		}
		return first != ""
	})
	return first, err
}

// waitFor waits until done reports true of the events recorded in rec so
// far, asking again at each new event, or returns ctx.Err().
func waitFor(ctx context.Context, rec *cluster.EventLog, done func([]cluster.Event) bool) error {
	events := rec.Events()
	// Each round takes one more event; the loop ends with done or ctx.
	for !done(events) {
		e, err := rec.Next(ctx, len(events))
		if err != nil {
			return err
		}
		events = append(events, e)
	}
	return nil
}

// terminatingGone waits until every pod that started terminating after
// event from of rec has terminated, and returns when the last did.
func terminatingGone(ctx context.Context, rec *cluster.EventLog, from int) (time.Time, error) {
	var last time.Time
	err := waitFor(ctx, rec, func(events []cluster.Event) bool {
		open := map[string]bool{}
		last = time.Time{}
		for _, e := range events[from:] {
			switch e.Kind {
			case cluster.PodTerminating:
				open[e.Pod] = true
			case cluster.PodDeleted:
				// A pod that no node ran is gone at once.
				if e.Node != "" {
					open[e.Pod] = true
				}
			case cluster.PodTerminated:
				delete(open, e.Pod)
				last = e.Time
			}
		}
		return len(open) == 0
	})
	return last, err
}

// podsOf returns the pods that events name, in order of first mention.
func podsOf(events []cluster.Event) []string {
	seen := map[string]bool{}
	var pods []string
	for _, e := range events {
		if e.Pod != "" && !seen[e.Pod] {
			seen[e.Pod] = true
			pods = append(pods, e.Pod)
		}
	}
	return pods
}

// explain sends the pod notices of c's events, which read the logs of c,
// to notice as the events come, and their explanation, after each event that gave notices (the only ones that
// change it), to explained, until ctx ends. It reads the events from a
// stream of its own, in order, which the recording's follower does not
// wait for.
func explain(ctx context.Context, c cluster.Backend, notice, explained func(string)) {
	d := newClusterNotices(ctx, c)
	for e := range c.Events(ctx) {
		notices := d.notices(e)
		for _, n := range notices {
			notice(n)
		}
		if len(notices) > 0 {
			explained(d.explanation())
		}
	}
}

// newClusterNotices returns pod notices that read the logs of c, until ctx
// ends.
func newClusterNotices(ctx context.Context, c cluster.Backend) *podNotices {
	return newPodNotices(func(namespace, pod, container string, restart int32) []cluster.LogLine {
		return instanceLogs(ctx, c, namespace, pod, container, restart)
	})
}

// logSettle is the wait between two reads of an exited container's logs,
// and logReads bounds the reads: the cluster records the exit as soon as
// the process has ended, possibly before it has read the last lines the
// process wrote.
const (
	logSettle = 100 * time.Millisecond
	logReads  = 10
)

// instanceLogs returns the lines that instance restart of an exited
// container wrote, once two reads logSettle apart find the same lines, or
// after logReads reads; nil if c has none.
func instanceLogs(ctx context.Context, c cluster.Backend, namespace, pod, container string, restart int32) []cluster.LogLine {
	var lines []cluster.LogLine
	// One read per round; the loop ends once the lines are settled, after
	// logReads rounds, or with ctx.
	for range logReads {
		all, _ := c.Logs(ctx, namespace, pod, container)
		read := slices.DeleteFunc(all, func(l cluster.LogLine) bool { return l.Restart != restart })
		if len(read) > 0 && len(read) == len(lines) {
			return read
		}
		lines = read
		if sleep(ctx, logSettle) != nil {
			break
		}
	}
	return lines
}

// lastAnswer holds the last failure of a wait for the Service to answer.
// It is safe for concurrent use.
type lastAnswer struct {
	mu  sync.Mutex
	err error
}

// set records err as the last failure.
func (l *lastAnswer) set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// String returns the last failure's text, "" if there was none.
func (l *lastAnswer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		return ""
	}
	return l.err.Error()
}

// addr returns the address that the last failure's connection reached or
// tried, if its error names one.
func (l *lastAnswer) addr() (netip.AddrPort, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oe *net.OpError
	if !errors.As(l.err, &oe) || oe.Addr == nil {
		return netip.AddrPort{}, false
	}
	a, err := netip.ParseAddrPort(oe.Addr.String())
	return a, err == nil
}

// waiting sends notice a waitingNotice every noticeInterval, with the
// pods of Deployment d ready in rec's events and the Service's last
// failure in answer, until ctx ends.
func waiting(ctx context.Context, rec *cluster.EventLog, d *appsv1.Deployment, limit time.Duration, answer *lastAnswer, notice func(string)) {
	start := time.Now()
	t := time.NewTicker(noticeInterval)
	defer t.Stop()
	// One notice per round; the loop ends with ctx.
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		events := rec.Events()
		ready, running := waitingPods(events, d.Name)
		last := answer.String()
		if a, ok := answer.addr(); ok {
			// The pod behind the address, which may be another
			// Deployment's, such as an ingress in front.
			if pod := podAddressesOf(events).pod(a, time.Now()); pod != "" {
				last = "pod " + pod + ": " + last
			}
		}
		notice(waitingNotice(time.Since(start), ready, replicas(d), running, last, limit))
	}
}
