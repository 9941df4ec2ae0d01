package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/retry"
)

// Cluster is a backend that the runner can close once a scenario is done.
type Cluster interface {
	cluster.Backend
	Close(ctx context.Context) error
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

// Progress is a report of a run's progress.
type Progress struct {
	Scenario string
	// Repetition counts from 1; 0 before the first.
	Repetition, Repetitions int
	Phase                   Phase
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// NewCluster starts the cluster of one scenario with its settings. It
	// must map [Image] to the closingtime binary.
	NewCluster func(ClusterSettings) (Cluster, error)
	// Quick applies each scenario's quick settings.
	Quick bool
	// Repetitions, when positive, replaces each scenario's repetitions.
	Repetitions int
	// Progress, if not nil, is called at each phase; it must not block for
	// long. Calls for different scenarios may be concurrent.
	Progress func(Progress)
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

// settings are a scenario's timings after defaults and quick overrides.
type settings struct {
	repetitions               int
	warmUp, after, settle, rl time.Duration
}

func (r *Runner) settings(s *Scenario) settings {
	st := settings{repetitions: s.Repetitions, warmUp: s.WarmUp, after: s.After, settle: s.Settle, rl: s.Limits.Run}
	if r.cfg.Quick {
		q := s.Quick
		st.repetitions = cmpOr(q.Repetitions, st.repetitions)
		st.warmUp = cmpOr(q.WarmUp, st.warmUp)
		st.after = cmpOr(q.After, st.after)
		st.settle = cmpOr(q.Settle, st.settle)
	}
	st.repetitions = cmpOr(r.cfg.Repetitions, st.repetitions, DefaultRepetitions)
	st.warmUp = cmpOr(st.warmUp, DefaultWarmUp)
	st.after = cmpOr(st.after, DefaultAfter)
	st.settle = cmpOr(st.settle, DefaultSettle)
	st.rl = cmpOr(st.rl, DefaultRunLimit)
	return st
}

// cmpOr returns the first of vs that is positive, or zero.
func cmpOr[T int | time.Duration](vs ...T) T {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// Run runs scenario s on a cluster of its own: it applies the workload,
// then for each repetition starts the traffic, warms up, acts, waits until
// the Deployment is complete and every terminating pod is gone, keeps the
// traffic on for the after period, stops it and computes the run's figures.
// It returns when every repetition is done, or early with an error; the
// cluster is closed and its processes gone either way.
func (r *Runner) Run(ctx context.Context, s *Scenario) (res *Result, err error) {
	st := r.settings(s)
	res = &Result{Name: s.Name, Description: s.Description, Seed: s.Seed}
	progress := func(rep int, p Phase) {
		r.cfg.Progress(Progress{Scenario: s.Name, Repetition: rep, Repetitions: st.repetitions, Phase: p})
	}
	objects, deployment, target, err := r.prepare(s)
	if err != nil {
		return nil, err
	}
	res.Deployment = deployment.Namespace + "/" + deployment.Name
	c, err := r.cfg.NewCluster(s.Cluster)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: start cluster: %w", s.Name, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if cerr := c.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("scenario %s: close cluster: %w", s.Name, cerr)
		}
	}()
	rec := &recording{}
	ectx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	go rec.follow(ectx, c)

	// Deploy, and wait until the Service answers.
	progress(0, PhaseDeploy)
	dctx, cancel := context.WithTimeout(ctx, st.rl)
	defer cancel()
	if err := c.Apply(dctx, objects); err != nil {
		return nil, fmt.Errorf("scenario %s: apply: %w", s.Name, err)
	}
	if _, err := c.RolloutStatus(dctx, deployment.Namespace, deployment.Name); err != nil {
		return nil, fmt.Errorf("scenario %s: first rollout: %w", s.Name, err)
	}
	if err := waitServing(dctx, c, target); err != nil {
		return nil, fmt.Errorf("scenario %s: wait for the service to answer: %w", s.Name, err)
	}

	for rep := 1; rep <= st.repetitions; rep++ {
		if rep > 1 {
			progress(rep, PhaseSettle)
			if err := sleep(ctx, st.settle); err != nil {
				return nil, err
			}
		}
		run, err := r.repeat(ctx, s, st, c, rec, deployment, target, func(p Phase) { progress(rep, p) })
		if err != nil {
			return nil, fmt.Errorf("scenario %s: repetition %d: %w", s.Name, rep, err)
		}
		run.Repetition = rep
		res.Totals.add(run.Totals)
		res.Runs = append(res.Runs, *run)
	}
	progress(st.repetitions, PhaseDone)
	return res, nil
}

// prepare returns the objects to apply, with quick overrides and defaulted
// namespaces, the Deployment acted on and the traffic's URL.
func (r *Runner) prepare(s *Scenario) ([]runtime.Object, *appsv1.Deployment, string, error) {
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
			obj.(interface{ SetNamespace(string) }).SetNamespace("default")
		}
		if dep, ok := obj.(*appsv1.Deployment); ok {
			if r.cfg.Quick {
				quick(dep, s.Quick)
			}
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
	path := s.Traffic.Path
	if path == "" {
		path = DefaultPath
	}
	target := "http://" + net.JoinHostPort(service.Name+"."+service.Namespace, strconv.Itoa(int(port))) + path
	return objects, deployment, target, nil
}

// quick applies q's pod settings to d.
func quick(d *appsv1.Deployment, q Quick) {
	spec := &d.Spec.Template.Spec
	if q.GracePeriodSeconds != nil {
		g := *q.GracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &g
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for name, value := range q.Env {
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

// repeat runs one repetition.
func (r *Runner) repeat(ctx context.Context, s *Scenario, st settings, c Cluster, rec *recording, d *appsv1.Deployment, target string, progress func(Phase)) (*Run, error) {
	ctx, cancel := context.WithTimeout(ctx, st.rl)
	defer cancel()
	gen, requests, err := generator(s.Traffic, target, c.DialContext, st.rl)
	if err != nil {
		return nil, err
	}
	firstEvent := rec.len()
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	type outcome struct {
		report *load.Report
		err    error
	}
	loaded := make(chan outcome, 1)
	go func() {
		rep, err := gen.Run(lctx)
		loaded <- outcome{rep, err}
	}()

	progress(PhaseWarmUp)
	if err := sleep(ctx, st.warmUp); err != nil {
		return nil, err
	}
	progress(PhaseAct)
	run := &Run{Start: time.Now()}
	if err := act(ctx, c, rec, s.Action, d); err != nil {
		stopLoad()
		<-loaded
		return nil, err
	}
	progress(PhaseWait)
	goneAt, err := settled(ctx, c, rec, s.Action, d, firstEvent)
	if err != nil {
		stopLoad()
		<-loaded
		return nil, err
	}
	progress(PhaseAfter)
	if err := sleep(ctx, st.after); err != nil {
		stopLoad()
		<-loaded
		return nil, err
	}
	stopLoad()
	out := <-loaded
	if out.err != nil {
		return nil, out.err
	}
	events := rec.since(firstEvent)
	lines, err := readEvents(requests.Bytes())
	if err != nil {
		return nil, err
	}
	logs := map[string][]cluster.LogLine{}
	for _, pod := range podsOf(events) {
		l, err := c.Logs(ctx, d.Namespace, pod, d.Spec.Template.Spec.Containers[0].Name)
		if err != nil && !errors.Is(err, cluster.ErrNotFound) {
			return nil, fmt.Errorf("logs of pod %s: %w", pod, err)
		}
		logs[pod] = l
	}
	figures(run, out.report, lines, events, logs, goneAt)
	return run, nil
}

// generator returns a load generator for traffic, writing its event lines
// to the returned buffer. It sends requests for at most limit.
func generator(t Traffic, target string, dial load.Dialer, limit time.Duration) (*load.Generator, *bytes.Buffer, error) {
	var clients []load.Client
	for _, c := range t.Clients {
		kind, err := load.ParseKind(c.Kind)
		if err != nil {
			return nil, nil, err
		}
		clients = append(clients, load.Client{Kind: kind, Rate: c.Rate, Connections: c.Connections})
	}
	var policy *retry.Policy
	if t.Retry != nil {
		policy = &retry.Policy{Attempts: t.Retry.Attempts, BaseDelay: t.Retry.BaseDelay}
	}
	buf := &bytes.Buffer{}
	gen, err := load.New(load.Config{
		URL:             target,
		Clients:         clients,
		Duration:        limit,
		ConnectTimeout:  t.ConnectTimeout,
		ResponseTimeout: t.ResponseTimeout,
		Dial:            dial,
		Retry:           policy,
		Events:          buf,
	})
	return gen, buf, err
}

// act does the action.
func act(ctx context.Context, c Cluster, rec *recording, a Action, d *appsv1.Deployment) error {
	switch a.Kind {
	case ActionRolloutRestart:
		return c.RolloutRestart(ctx, d.Namespace, d.Name)
	case ActionScale:
		return c.Scale(ctx, d.Namespace, d.Name, *a.Replicas)
	case ActionDeletePod, ActionEvict:
		pod := rec.readyPod()
		if pod == "" {
			return errors.New("no ready pod to " + a.Kind)
		}
		if a.Kind == ActionEvict {
			var refused *cluster.EvictionError
			if err := c.Evict(ctx, d.Namespace, pod); err != nil && !errors.As(err, &refused) {
				return err
			}
			// A refusal is the outcome to observe: the timeline has it.
			return nil
		}
		return c.DeletePod(ctx, d.Namespace, pod, nil)
	case ActionDrain:
		node := a.Node
		if node == "" {
			node = "node-1"
		}
		var refused *cluster.EvictionError
		if err := c.Drain(ctx, node, cluster.DrainOptions{}); err != nil && !errors.As(err, &refused) {
			return err
		}
		return nil
	}
	return nil
}

// settled waits until the Deployment is complete and no pod terminates,
// and returns when the last pod that terminated was gone.
func settled(ctx context.Context, c Cluster, rec *recording, a Action, d *appsv1.Deployment, from int) (time.Time, error) {
	if a.Kind == ActionRolloutRestart {
		st, err := c.RolloutStatus(ctx, d.Namespace, d.Name)
		return st.OldPodsGoneAt, err
	}
	if _, err := c.RolloutStatus(ctx, d.Namespace, d.Name); err != nil {
		return time.Time{}, err
	}
	return rec.terminatingGone(ctx, from)
}

// waitServing waits until 10 requests in a row to url succeed.
func waitServing(ctx context.Context, c Cluster, url string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: c.DialContext, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	for good := 0; good < 10; {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				good++
				continue
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		good = 0
		if serr := sleep(ctx, 100*time.Millisecond); serr != nil {
			return fmt.Errorf("%w (last: %v)", serr, err)
		}
	}
	return nil
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

// recording keeps a cluster's events as they come.
type recording struct {
	mu      sync.Mutex
	events  []cluster.Event
	changed chan struct{}
}

func (r *recording) follow(ctx context.Context, c cluster.Backend) {
	for e := range c.Events(ctx) {
		r.mu.Lock()
		r.events = append(r.events, e)
		if r.changed != nil {
			close(r.changed)
			r.changed = nil
		}
		r.mu.Unlock()
	}
}

func (r *recording) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func (r *recording) since(i int) []cluster.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cluster.Event(nil), r.events[i:]...)
}

// readyPod returns the first pod, by name, that is ready and not
// terminating.
func (r *recording) readyPod() string {
	ready := map[string]bool{}
	for _, e := range r.since(0) {
		switch e.Kind {
		case cluster.PodReady:
			ready[e.Pod] = true
		case cluster.PodUnready, cluster.PodTerminating, cluster.PodDeleted:
			delete(ready, e.Pod)
		}
	}
	first := ""
	for p := range ready {
		if first == "" || p < first {
			first = p
		}
	}
	return first
}

// terminatingGone waits until every pod that started terminating after
// event from has terminated, and returns when the last did.
func (r *recording) terminatingGone(ctx context.Context, from int) (time.Time, error) {
	for {
		r.mu.Lock()
		open := map[string]bool{}
		var last time.Time
		for _, e := range r.events[from:] {
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
		if len(open) == 0 {
			r.mu.Unlock()
			return last, nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
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
