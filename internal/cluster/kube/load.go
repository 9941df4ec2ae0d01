package kube

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// DefaultImage is the image of the load pods when none is given: the tag
// that docs/kube.md builds from the Dockerfile and loads into kind. Its
// entrypoint is the closingtime binary.
const DefaultImage = "closingtime:dev"

// Defaults of a zero [LoadConfig].
const (
	// DefaultLoadPods is how many load pods share the traffic.
	DefaultLoadPods = 1
	// DefaultLoadStartTimeout bounds the wait for the load pods to run:
	// scheduling, pulling the image and starting the container.
	DefaultLoadStartTimeout = 2 * time.Minute
)

// Labels of the load pods.
const (
	// LoadLabel is set on every load pod, to the id of its run; the
	// backend's events leave out the pods that carry it, which are the
	// instrument and not the workload.
	LoadLabel = "closingtime.dev/load"
	// loadNameLabel and managedByLabel are the standard labels
	// (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/).
	loadNameLabel  = "app.kubernetes.io/name"
	managedByLabel = "app.kubernetes.io/managed-by"
)

// loadStopMargin is how long, beyond its termination grace period, a
// stopped load pod may take to hand in its report.
const loadStopMargin = 10 * time.Second

// loadPollInterval is how often WaitServing looks at a Service's
// endpoints.
const loadPollInterval = 500 * time.Millisecond

// LoadConfig configures the load pods of a [Cluster]. The zero value is
// one pod of DefaultImage.
type LoadConfig struct {
	// Image is the image of the load pods: one whose entrypoint is the
	// closingtime binary. Empty means DefaultImage.
	Image string
	// Pods is how many load pods share the traffic, each at 1/Pods of
	// each client's rate (load.Split); zero means DefaultLoadPods. Use
	// more for a rate that one pod cannot reach.
	Pods int
	// StartTimeout bounds the wait for every load pod to run, and then, in
	// each pod, the wait for the Service to answer before its run begins
	// (closingtime load --wait-serving); zero means
	// DefaultLoadStartTimeout.
	StartTimeout time.Duration
}

// LoadPods sends traffic to a Service from pods inside the cluster, so that
// it reaches the Service as the Service's clients do, through the Service's
// cluster IP and kube-proxy on the node. Each pod runs `closingtime load
// --wait-serving -o jsonl`: it waits until the Service answers from where
// it runs (load.WaitServing's rule), says through its log that its run
// begins (the stream's start line), and hands back its results the same
// way: a JSON line per request, then its report; the reports of the pods
// are merged (load.Merge), histograms included. It implements the runner's
// traffic source (scenario.TrafficSource).
//
// The load pods are bare pods (restartPolicy Never) in the cluster's
// namespace, so that deleting one stops it: a Job would replace it. They
// are deleted when a run ends, however it ends, and by [Cluster.Close].
type LoadPods struct {
	c   *Cluster
	cfg LoadConfig
	// openLog opens the log of the container of a running load pod, from
	// its first line, following it until the container ends.
	openLog func(ctx context.Context, namespace, pod string) (io.ReadCloser, error)
}

// LoadPods returns the load pods of cfg on c. A negative Pods or
// StartTimeout means its default, as zero does.
func (c *Cluster) LoadPods(cfg LoadConfig) *LoadPods {
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	if cfg.Pods <= 0 {
		cfg.Pods = DefaultLoadPods
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultLoadStartTimeout
	}
	l := &LoadPods{c: c, cfg: cfg}
	l.openLog = func(ctx context.Context, namespace, pod string) (io.ReadCloser, error) {
		return c.client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: loadContainer, Follow: true}).Stream(ctx)
	}
	return l
}

// loadContainer is the name of a load pod's container.
const loadContainer = "load"

// WaitServing waits until the Service that cfg.URL names
// (http://NAME.NAMESPACE[.svc…]:PORT/…) has a ready endpoint in its
// EndpointSlices: the first moment a client inside the cluster can reach
// it. It looks every half second, and calls failed, if not nil, after each
// look that found none; it returns an error that wraps ctx.Err() if ctx
// ends first. The other fields of cfg are for the load pods' own wait.
//
// That is not yet the runner's rule, that the Service answers
// (load.WaitServing): a pod without a readiness probe is a ready endpoint
// before its server listens, and this process, outside the cluster, cannot
// dial the Service to find out. The answers are checked where the traffic
// comes from, in the load pods: each waits for the rule before its run
// begins, and [LoadPods.Run] calls started only once every pod has begun.
// WaitServing is the cheap part that fails with a clear error when the
// Service never gets an endpoint.
func (l *LoadPods) WaitServing(ctx context.Context, cfg load.Config, failed func(error)) error {
	name, namespace, err := serviceOf(cfg.URL)
	if err != nil {
		return err
	}
	op := fmt.Sprintf("wait for service %s/%s to have a ready endpoint", namespace, name)
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}).String()
	// Each round looks once; the loop ends with a ready endpoint or ctx.
	for {
		list, err := l.c.client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil && ctx.Err() == nil {
			return apiError(op, err)
		}
		if err == nil {
			for _, s := range list.Items {
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
						return nil
					}
				}
			}
		}
		if err == nil && failed != nil {
			failed(fmt.Errorf("service %s/%s has no ready endpoint", namespace, name))
		}
		if err := l.c.sleep(ctx, loadPollInterval); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
}

// serviceOf returns the Service name and namespace of target's host, a
// Service's cluster DNS name.
func serviceOf(target string) (name, namespace string, err error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", "", fmt.Errorf("traffic URL: %w", err)
	}
	parts := strings.Split(u.Hostname(), ".")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" || net.ParseIP(u.Hostname()) != nil {
		return "", "", fmt.Errorf("traffic URL %q: the host is not a Service's name.namespace", target)
	}
	return parts[0], parts[1], nil
}

// Run creates the load pods, each sending its share of cfg's requests
// (cfg.Dial, cfg.OnResult and cfg.Events are ignored: the pods dial from
// the cluster, and their results come back through their logs), waits
// until they run and their logs are open, then until each log's start
// line says that the pod's run has begun (after the pod saw the Service
// answer), calls started, and waits until the pods end after
// cfg.Duration, or until ctx ends: it then deletes them, and each stops
// sending, lets its requests in flight finish and writes its report
// before it exits. It returns the merged report and the results of every
// pod's requests, decoded from their event lines, in time order. The pods
// are deleted when Run returns, on every path.
//
// A pod that cannot start (its image cannot be pulled, its container
// cannot be created, it does not run within StartTimeout) is an error
// that names it and says why; so is a pod that ends before its run begins
// (the Service did not answer it within StartTimeout), and a pod that ends
// without a report. If ctx ends before every pod has begun, Run returns
// an error that wraps ctx.Err(), without calling started.
func (l *LoadPods) Run(ctx context.Context, cfg load.Config, started func()) (_ *load.Report, _ []load.Result, err error) {
	args, err := loadArgs(load.Split(cfg, l.cfg.Pods), l.cfg.StartTimeout)
	if err != nil {
		return nil, nil, err
	}
	var id [4]byte
	rand.Read(id[:])
	run := hex.EncodeToString(id[:])
	// The pods go, however Run ends; the deletion outlives ctx.
	l.c.mu.Lock()
	l.c.loadRuns[run] = true
	l.c.mu.Unlock()
	defer func() {
		derr := l.c.deleteLoadPods(context.WithoutCancel(ctx), run)
		if derr == nil {
			l.c.mu.Lock()
			delete(l.c.loadRuns, run)
			l.c.mu.Unlock()
		}
		if err == nil {
			err = derr
		}
	}()
	var names []string
	for i := range l.cfg.Pods {
		p, err := l.c.client.CoreV1().Pods(l.c.namespace).Create(ctx, l.pod(run, i, args), metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil {
			return nil, nil, apiError("create load pod", err)
		}
		names = append(names, p.Name)
	}
	if err := l.waitRunning(ctx, names); err != nil {
		return nil, nil, err
	}
	// The logs are read to their end even after ctx ends: a stopped pod
	// writes its report last. Stopping bounds them.
	lctx, cancelLogs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLogs()
	outputs := make([]bytes.Buffer, len(names))
	errs := make([]error, len(names))
	starts := make(chan logStart, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		r, err := l.openLog(lctx, l.c.namespace, name)
		if err != nil {
			cancelLogs()
			wg.Wait()
			return nil, nil, apiError(fmt.Sprintf("follow the log of load pod %s/%s", l.c.namespace, name), err)
		}
		wg.Go(func() {
			defer r.Close()
			var saw bool
			saw, errs[i] = followLoadLog(&outputs[i], r, func() { starts <- logStart{i, true} })
			if !saw {
				starts <- logStart{i, false}
			}
		})
	}
	if err := l.waitBegun(ctx, names, starts, outputs, errs); err != nil {
		cancelLogs()
		wg.Wait()
		return nil, nil, err
	}
	started()
	ended := make(chan struct{})
	go func() {
		wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		if err := l.c.deleteLoadPods(context.WithoutCancel(ctx), run); err != nil {
			cancelLogs()
			<-ended
			return nil, nil, fmt.Errorf("stop the load pods: %w", err)
		}
		stop := time.Duration(cluster.DefaultTerminationGracePeriodSeconds)*time.Second + loadStopMargin
		select {
		case <-ended:
		case <-l.c.clock.After(stop):
			cancelLogs()
			<-ended
		}
	}
	var reports []*load.Report
	var requests []load.Result
	for i, name := range names {
		results, report, err := load.ReadStream(bytes.NewReader(outputs[i].Bytes()))
		if err == nil && report == nil {
			err = errors.New("no report: the pod ended before it wrote one")
		}
		if err == nil && errs[i] != nil {
			err = errs[i]
		}
		if err != nil {
			return nil, nil, fmt.Errorf("load pod %s/%s: %w; its log ends:\n%s", l.c.namespace, name, err, tail(outputs[i].String(), 10))
		}
		reports = append(reports, report)
		requests = append(requests, results...)
	}
	merged, err := load.Merge(reports...)
	if err != nil {
		return nil, nil, err
	}
	slices.SortStableFunc(requests, func(a, b load.Result) int { return a.Time.Compare(b.Time) })
	return merged, requests, nil
}

// followLoadLog copies the log of a load pod from r to w until it ends, and
// calls begun when the stream's start line has arrived. It reports whether
// it saw that line.
func followLoadLog(w *bytes.Buffer, r io.Reader, begun func()) (saw bool, err error) {
	br := bufio.NewReader(r)
	for !saw {
		line, err := br.ReadBytes('\n')
		w.Write(line)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if load.IsStartLine(line) {
			saw = true
			begun()
		}
	}
	_, err = io.Copy(w, br)
	return true, err
}

// A logStart is what the log of load pod names[pod] said first: that its
// run began (its start line), or that it ended before.
type logStart struct {
	pod   int
	begun bool
}

// waitBegun waits until starts says of each of the pods names that its run
// began. A log that ended before its start line is an error that names
// the pod and gives the end of its log (the log's outputs and errs are
// complete when it says so); so is ctx ending first.
func (l *LoadPods) waitBegun(ctx context.Context, names []string, starts <-chan logStart, outputs []bytes.Buffer, errs []error) error {
	for range names {
		select {
		case s := <-starts:
			if s.begun {
				continue
			}
			why := "its log ended"
			if errs[s.pod] != nil {
				why = errs[s.pod].Error()
			}
			return fmt.Errorf("load pod %s/%s ended before its run began (%s): the Service did not answer it within %v, or it failed; its log ends:\n%s",
				l.c.namespace, names[s.pod], why, l.cfg.StartTimeout, tail(outputs[s.pod].String(), 10))
		case <-ctx.Done():
			return fmt.Errorf("wait for the load pods to begin their runs: %w", ctx.Err())
		}
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// loadArgs returns the arguments of `closingtime load` that wait up to
// waitServing for the Service to answer, then send cfg's requests and
// write the jsonl stream.
func loadArgs(cfg load.Config, waitServing time.Duration) ([]string, error) {
	if cfg.Retry != nil && (cfg.Retry.MaxDelay != 0 || cfg.Retry.Unprocessed != nil) {
		return nil, errors.New("load pods: a retry policy's MaxDelay and Unprocessed have no flags of closingtime load")
	}
	args := []string{"load", cfg.URL, "-o", "jsonl"}
	dur := func(flag string, d time.Duration) {
		if d > 0 {
			args = append(args, flag, d.String())
		}
	}
	dur("--wait-serving", waitServing)
	dur("--duration", cfg.Duration)
	dur("--connect-timeout", cfg.ConnectTimeout)
	dur("--response-timeout", cfg.ResponseTimeout)
	for _, c := range cfg.Clients {
		args = append(args, "--client", c.Kind.String()+"="+strconv.FormatFloat(c.Rate, 'g', -1, 64))
		if c.Kind == load.KeepAlive {
			if c.Connections > 0 {
				args = append(args, "--connections", strconv.Itoa(c.Connections))
			}
			dur("--max-idle", c.MaxIdle)
			dur("--max-lifetime", c.MaxLifetime)
		}
	}
	if r := cfg.Resolve; r != nil {
		if r.Lookup != nil {
			return nil, errors.New("load pods: their lookups are the pods' DNS's, not a lookup of this process")
		}
		args = append(args, "--resolve-interval", cmp.Or(r.Interval, load.DefaultResolveInterval).String())
	}
	if r := cfg.Retry; r != nil {
		args = append(args, "--retry")
		if r.Attempts > 0 {
			args = append(args, "--retry-attempts", strconv.Itoa(r.Attempts))
		}
		dur("--retry-base-delay", r.BaseDelay)
	}
	return args, nil
}

// pod returns load pod i of run, closingtime-load-RUN-I, with args: within
// the Pod Security Standards' "restricted" profile, so that it runs in
// namespaces that enforce it, and spread over the nodes.
func (l *LoadPods) pod(run string, i int, args []string) *corev1.Pod {
	labels := map[string]string{LoadLabel: run, loadNameLabel: "closingtime-load", managedByLabel: FieldManager}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("closingtime-load-%s-%d", run, i), Namespace: l.c.namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LoadLabel: run}}}},
			Containers: []corev1.Container{{
				Name: loadContainer, Image: l.cfg.Image, Args: args,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// startFailures are the reasons of a waiting container that will not run
// without a change: a missing or unpullable image, an invalid spec.
var startFailures = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// waitRunning waits until the container of each of the pods names runs,
// or returns an error that says why one does not.
func (l *LoadPods) waitRunning(ctx context.Context, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StartTimeout)
	defer cancel()
	var failed error
	last := map[string]string{} // by pod: what it was doing
	err := l.c.wait(ctx, func() bool {
		running := 0
		for _, name := range names {
			p, err := l.c.podLister.Pods(l.c.namespace).Get(name)
			if err != nil {
				last[name] = "not seen yet"
				continue
			}
			state, ok, fail := loadPodState(p)
			last[name] = state
			if fail {
				failed = fmt.Errorf("load pod %s/%s (image %s): %s%s", p.Namespace, p.Name, l.cfg.Image, state, imageHint(state))
				return true
			}
			if ok {
				running++
			}
		}
		return running == len(names)
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		var waiting []string
		for _, name := range names {
			if last[name] != "running" {
				waiting = append(waiting, name+": "+last[name])
			}
		}
		return fmt.Errorf("load pods not running after %v (%w): %s", l.cfg.StartTimeout, err, strings.Join(waiting, "; "))
	}
	return nil
}

// loadPodState describes what load pod p is doing, and reports whether
// its container runs, or whether it failed to start for good.
func loadPodState(p *corev1.Pod) (state string, running, failed bool) {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		state = "ended before it ran: phase " + string(p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; t != nil {
				state += fmt.Sprintf(", exit code %d %s %s", t.ExitCode, t.Reason, t.Message)
			}
		}
		return state, false, true
	}
	for _, s := range p.Status.ContainerStatuses {
		switch {
		case s.State.Running != nil:
			return "running", true, false
		case s.State.Waiting != nil:
			w := s.State.Waiting
			state = strings.TrimSpace(w.Reason + ": " + w.Message)
			return state, false, slices.Contains(startFailures, w.Reason)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + c.Reason + ": " + c.Message, false, false
		}
	}
	if p.Spec.NodeName == "" {
		return "pending, not scheduled yet", false, false
	}
	return "pending on node " + p.Spec.NodeName, false, false
}

// imageHint adds what to do about an image that cannot be pulled.
func imageHint(state string) string {
	if !strings.Contains(state, "Image") {
		return ""
	}
	return " (give --image a tag the nodes can pull; on kind, `kind load docker-image` it first: docs/kube.md)"
}

// deleteLoadPods deletes the load pods of run, each with its own grace
// period: a running one stops sending and writes its report. A pod
// already gone is not an error; other errors are returned joined.
func (c *Cluster) deleteLoadPods(ctx context.Context, run string) error {
	list, err := c.client.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: LoadLabel + "=" + run})
	if err != nil {
		return apiError("list load pods", err)
	}
	var errs []error
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, apiError(fmt.Sprintf("delete load pod %s/%s", p.Namespace, p.Name), err))
		}
	}
	return errors.Join(errs...)
}
