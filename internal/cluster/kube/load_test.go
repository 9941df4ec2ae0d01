package kube

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/retry"
)

// loadKubelet plays the node for load pods: it runs each new load pod's
// container as a real process, the closingtime binary with the pod's
// args, reports it running (or, with pull set, reports the image pull
// failing), serves its standard output and error as the pod's log, as the
// log API merges them, and sends it SIGTERM when the pod is deleted, as a
// kubelet would. A log's reader ends when the context of openLog does, as
// the API's stream does.
//
// With scripted set, it runs no process: the pod is reported running and
// its log is what the test writes to writers[pod].
type loadKubelet struct {
	t      *testing.T
	client kubernetes.Interface
	// pull, if not empty, is the waiting reason reported for every pod
	// instead of running it.
	pull     string
	scripted bool

	mu      sync.Mutex
	procs   map[string]*exec.Cmd
	outputs map[string]io.ReadCloser
	writers map[string]*os.File
	opened  int // logs opened: the load pods' runs waiting for start lines
	specs   []*corev1.Pod
	starts  sync.WaitGroup // the pods being started
	exits   sync.WaitGroup // the processes
}

func runLoadKubelet(t *testing.T, client kubernetes.Interface, namespace, pull string) *loadKubelet {
	k := &loadKubelet{t: t, client: client, pull: pull, procs: map[string]*exec.Cmd{}, outputs: map[string]io.ReadCloser{}, writers: map[string]*os.File{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok && p.Labels[LoadLabel] != "" {
				k.starts.Go(func() { k.start(ctx, p) })
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				k.stop(p.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				k.stop(p.Name)
			}
		},
	})
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		k.starts.Wait()
		k.mu.Lock()
		for _, cmd := range k.procs {
			cmd.Process.Kill()
		}
		for _, w := range k.writers {
			w.Close()
		}
		k.mu.Unlock()
		k.exits.Wait()
	})
	return k
}

func (k *loadKubelet) start(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	k.specs = append(k.specs, p.DeepCopy())
	k.mu.Unlock()
	status := corev1.ContainerStatus{Name: loadContainer, Image: p.Spec.Containers[0].Image}
	switch {
	case k.pull != "":
		status.State.Waiting = &corev1.ContainerStateWaiting{Reason: k.pull, Message: "pull access denied"}
	case k.scripted:
		out, w, err := os.Pipe()
		if err != nil {
			k.t.Error(err)
			return
		}
		k.mu.Lock()
		k.outputs[p.Name], k.writers[p.Name] = out, w
		k.mu.Unlock()
		status.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	default:
		// A pipe of the test's own: cmd.StdoutPipe's is closed by Wait,
		// which may come before the log is read to its end.
		out, w, err := os.Pipe()
		if err != nil {
			k.t.Error(err)
			return
		}
		cmd := exec.Command(binary, p.Spec.Containers[0].Args...)
		cmd.Stdout, cmd.Stderr = w, w
		err = cmd.Start()
		w.Close()
		if err != nil {
			out.Close()
			k.t.Error(err)
			return
		}
		k.mu.Lock()
		k.procs[p.Name], k.outputs[p.Name] = cmd, out
		k.mu.Unlock()
		k.exits.Go(func() { cmd.Wait() })
		status.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	}
	p = p.DeepCopy()
	p.Spec.NodeName = "node-1"
	p.Status.Phase = corev1.PodPending
	if k.pull == "" {
		p.Status.Phase = corev1.PodRunning
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{status}
	if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		k.t.Errorf("load kubelet: status of %s: %v", p.Name, err)
	}
}

func (k *loadKubelet) stop(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cmd := k.procs[name]; cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
	}
}

// openLog returns the output of pod's process, closed when ctx ends.
func (k *loadKubelet) openLog(ctx context.Context, _, pod string) (io.ReadCloser, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.outputs[pod]
	if out == nil {
		return nil, errors.New("no process for pod " + pod)
	}
	k.opened++
	context.AfterFunc(ctx, func() { out.Close() })
	return out, nil
}

// writer returns the writer of the log of the scripted pod whose name has
// suffix, once the pod runs.
func (k *loadKubelet) writer(t *testing.T, suffix string) *os.File {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		k.mu.Lock()
		for name, w := range k.writers {
			if strings.HasSuffix(name, suffix) {
				k.mu.Unlock()
				return w
			}
		}
		k.mu.Unlock()
	}
	t.Fatalf("no load pod *%s runs", suffix)
	return nil
}

// TestLoadPods runs the traffic of two clients from two load pods, each a
// real `closingtime load` process started from the pod's spec, stops them
// by deleting the pods, and merges what their logs hand back.
func TestLoadPods(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(load.PodHeader, "web-a")
	}))
	defer srv.Close()
	c, cs := newFake(t)
	k := runLoadKubelet(t, cs, "ns", "")
	lp := c.LoadPods(LoadConfig{Image: "closingtime:test", Pods: 2})
	lp.openLog = k.openLog
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	cfg := load.Config{URL: srv.URL + "/work", Duration: time.Minute,
		Clients: []load.Client{{Kind: load.NewConn, Rate: 40}, {Kind: load.KeepAlive, Rate: 60, Connections: 4,
			Limits: load.Limits{MaxIdle: 3 * time.Second, MaxLifetime: time.Minute}}}}
	startedAt := time.Time{}
	report, events, err := lp.Run(rctx, cfg, func() {
		startedAt = time.Now()
		time.AfterFunc(time.Second, stop)
	})
	if err != nil {
		t.Fatal(err)
	}
	if startedAt.IsZero() {
		t.Error("Run did not call started")
	}

	// The pods: two of the image, never restarted, each with half the rates.
	k.mu.Lock()
	specs := k.specs
	k.mu.Unlock()
	if len(specs) != 2 {
		t.Fatalf("%d load pods created, want 2", len(specs))
	}
	wantArgs := []string{"load", srv.URL + "/work", "-o", "jsonl", "--wait-serving", "2m0s", "--duration", "1m0s",
		"--client", "new-conn=20", "--client", "keep-alive=30", "--connections", "2", "--max-idle", "3s", "--max-lifetime", "1m0s"}
	for _, p := range specs {
		ctr := p.Spec.Containers[0]
		if !slices.Equal(ctr.Args, wantArgs) || ctr.Image != "closingtime:test" || p.Spec.RestartPolicy != corev1.RestartPolicyNever ||
			!strings.HasPrefix(p.Name, "closingtime-load-") || p.Labels[LoadLabel] == "" || !*p.Spec.SecurityContext.RunAsNonRoot {
			t.Errorf("load pod %s: image %s, args %q, restart policy %s, labels %v; want image closingtime:test, args %q, Never",
				p.Name, ctr.Image, ctr.Args, p.Spec.RestartPolicy, p.Labels, wantArgs)
		}
	}

	// The merged report: the scenario's rates, every request once.
	if len(report.Clients) != 2 || report.Clients[0].Rate != 40 || report.Clients[1].Rate != 60 || report.Clients[1].Connections != 4 {
		t.Errorf("merged clients %+v, want new-conn at 40 and keep-alive at 60 with 4 connections", report.Clients)
	}
	var total int64
	ids := map[string]bool{}
	for _, c := range report.Clients {
		total += c.Totals.Total()
		if c.Totals.Failed() != 0 || c.Pods["web-a"] != c.Totals[load.OK] {
			t.Errorf("%s client: totals %v, pods %v; want no failure, every response from web-a", c.Kind, c.Totals, c.Pods)
		}
	}
	for _, e := range events {
		ids[e.ID] = true
	}
	if total == 0 || int64(len(events)) != total || len(ids) != len(events) {
		t.Errorf("%d events (%d ids) for %d requests: want one per request", len(events), len(ids), total)
	}
	for i := 1; i < len(events); i++ {
		if events[i].Time.Before(events[i-1].Time) {
			t.Fatalf("events out of order at %d: %s after %s", i, events[i].Time, events[i-1].Time)
		}
	}

	// The pods are gone, and the backend's events never named them.
	if list, _ := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d pods left after the run, want none", len(list.Items))
	}
	for _, e := range c.EventLog().Events() {
		if strings.HasPrefix(e.Pod, "closingtime-load-") {
			t.Errorf("event about a load pod: %+v", e)
		}
	}
}

// refusingAddr returns a loopback address where nothing listens: connects
// to it are refused until the test listens there.
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestLoadPodsWaitServing: load pods whose Service does not answer yet
// wait until it does; Run calls started only once every pod has seen it
// answer and begun its run, so the run counts no failure from the
// Service's start-up.
func TestLoadPodsWaitServing(t *testing.T) {
	addr := refusingAddr(t)
	c, cs := newFake(t)
	k := runLoadKubelet(t, cs, "ns", "")
	lp := c.LoadPods(LoadConfig{Pods: 2})
	lp.openLog = k.openLog
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var startedAt time.Time
	type result struct {
		report *load.Report
		err    error
	}
	done := make(chan result, 1)
	go func() {
		report, _, err := lp.Run(rctx, load.Config{URL: "http://" + addr + "/", Duration: time.Minute, Clients: []load.Client{{Kind: load.NewConn, Rate: 40}}},
			func() {
				mu.Lock()
				startedAt = time.Now()
				mu.Unlock()
				time.AfterFunc(time.Second, stop)
			})
		done <- result{report, err}
	}()

	// Both pods run, and wait.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		k.mu.Lock()
		n := len(k.procs)
		k.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d load pods run after a minute, want 2", n)
		}
	}
	time.Sleep(time.Second)
	up := time.Now()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if startedAt.Before(up) {
		t.Errorf("started at %v, before the Service answered at %v", startedAt.Format(time.StampMicro), up.Format(time.StampMicro))
	}
	totals := r.report.Clients[0].Totals
	if totals[load.OK] == 0 || totals.Failed() != 0 {
		t.Errorf("totals %v, want requests and no failure: the pods begin once the Service answers", totals)
	}
	if r.report.Start.Before(up) {
		t.Errorf("the pods' runs began at %v, before the Service answered at %v", r.report.Start, up)
	}
}

// TestLoadPodsNeverServing: a load pod that the Service never answers
// ends after StartTimeout without beginning its run; Run says so with the
// end of the pod's log, and never calls started.
func TestLoadPodsNeverServing(t *testing.T) {
	addr := refusingAddr(t)
	c, cs := newFake(t)
	k := runLoadKubelet(t, cs, "ns", "")
	lp := c.LoadPods(LoadConfig{StartTimeout: 2 * time.Second})
	lp.openLog = k.openLog
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, err := lp.Run(ctx, load.Config{URL: "http://" + addr + "/", Duration: time.Minute}, func() { t.Error("started called") })
	if err == nil || !strings.Contains(err.Error(), "ended before its run began") || !strings.Contains(err.Error(), "--wait-serving 2s") ||
		!strings.Contains(err.Error(), "refused") {
		t.Errorf("Run: %v, want the pod named, ended before its run, with its log's end: the wait and the refused connects", err)
	}
	if list, _ := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d pods left after the failure, want none", len(list.Items))
	}
}

// TestLoadPodsStartLine: Run calls started when the log of every load pod
// has shown its start line, not before; if ctx ends first, it returns its
// error without calling started.
func TestLoadPodsStartLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c, cs := newFake(t)
	k := runLoadKubelet(t, cs, "ns", "")
	k.scripted = true
	lp := c.LoadPods(LoadConfig{Pods: 2})
	lp.openLog = k.openLog
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan struct{})
	type result struct {
		report *load.Report
		err    error
	}
	done := make(chan result, 1)
	go func() {
		report, _, err := lp.Run(ctx, load.Config{URL: srv.URL}, func() { close(started) })
		done <- result{report, err}
	}()
	w0, w1 := k.writer(t, "-0"), k.writer(t, "-1")
	if err := load.WriteStartLine(w0, time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
		t.Fatal("started called before the second pod's start line")
	case <-time.After(500 * time.Millisecond):
	}
	if err := load.WriteStartLine(w1, time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("Run ended (%v) without calling started", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("started not called 30 s after every pod's start line")
	}
	// Each pod sends its requests and hands in its report, then its log ends.
	for _, w := range []*os.File{w0, w1} {
		gen, err := load.New(load.Config{URL: srv.URL, Duration: 200 * time.Millisecond, Events: w})
		if err != nil {
			t.Fatal(err)
		}
		report, err := gen.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := load.WriteReportLine(w, report); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	r := <-done
	if r.err != nil || r.report.Clients[0].Totals[load.OK] == 0 {
		t.Fatalf("Run: %+v, %v; want the merged report", r.report, r.err)
	}

	// The pods of a second run run, but write no start line before ctx
	// ends: an error, and no call.
	rctx, stop := context.WithCancel(ctx)
	go func() {
		// Once the Run reads both pods' logs, it waits for their start
		// lines, however long the pods took to run on a loaded machine.
		for rctx.Err() == nil {
			k.mu.Lock()
			n := k.opened
			k.mu.Unlock()
			if n == 4 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		stop()
	}()
	_, _, err := lp.Run(rctx, load.Config{URL: srv.URL}, func() { t.Error("started called without a start line") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "wait for the load pods to begin their runs") {
		t.Errorf("Run: %v, want the context's end while it waited for the pods to begin", err)
	}
}

// TestLoadPodsImagePull: a load pod whose image cannot be pulled is an
// error that names the image and the way to give the nodes one, and the
// pod is deleted.
func TestLoadPodsImagePull(t *testing.T) {
	c, cs := newFake(t)
	runLoadKubelet(t, cs, "ns", "ErrImagePull")
	lp := c.LoadPods(LoadConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err := lp.Run(ctx, load.Config{URL: "http://web.ns/"}, func() { t.Error("started called") })
	if err == nil || !strings.Contains(err.Error(), "image "+DefaultImage+"): ErrImagePull: pull access denied") ||
		!strings.Contains(err.Error(), "kind load docker-image") {
		t.Errorf("Run: %v, want the pull error and the kind hint", err)
	}
	if list, _ := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d pods left after the failure, want none", len(list.Items))
	}
}

// TestLoadPodsStartTimeout: a load pod that no node runs is an error once
// the start timeout passes, saying what it waits for.
func TestLoadPodsStartTimeout(t *testing.T) {
	c, cs := newFake(t)
	lp := c.LoadPods(LoadConfig{StartTimeout: 300 * time.Millisecond})
	_, _, err := lp.Run(context.Background(), load.Config{URL: "http://web.ns/"}, func() {})
	if err == nil || !strings.Contains(err.Error(), "load pods not running after 300ms") || !strings.Contains(err.Error(), "not scheduled yet") {
		t.Errorf("Run: %v, want a timeout that says the pod is not scheduled", err)
	}
	if list, _ := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d pods left, want none", len(list.Items))
	}
}

// TestLoadPodsClose: Close deletes the load pods of a run that is still
// going, as when a run is interrupted.
func TestLoadPodsClose(t *testing.T) {
	cs := fake.NewClientset()
	c, err := New(Config{Client: cs, Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	lp := c.LoadPods(LoadConfig{StartTimeout: time.Minute})
	done := make(chan error, 1)
	go func() {
		_, _, err := lp.Run(context.Background(), load.Config{URL: "http://web.ns/"}, func() {})
		done <- err
	}()
	// Wait for the pod, then close.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, _ := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
		if len(list.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no load pod created")
		}
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if list, _ := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d pods left after Close, want none", len(list.Items))
	}
	if err := <-done; err == nil {
		t.Error("Run returned no error after Close")
	}
}

func TestLoadArgs(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  load.Config
		wait time.Duration
		want string
	}{
		{"defaults", load.Config{URL: "http://web.shop:80/"}, 0, "load http://web.shop:80/ -o jsonl"},
		{"every flag", load.Config{URL: "http://web.shop/", Duration: 10 * time.Minute, ConnectTimeout: time.Second, ResponseTimeout: 3 * time.Second,
			Clients: []load.Client{{Kind: load.KeepAlive, Rate: 12.5, Connections: 3}}, Retry: &retryPolicy}, 90 * time.Second,
			"load http://web.shop/ -o jsonl --wait-serving 1m30s --duration 10m0s --connect-timeout 1s --response-timeout 3s --client keep-alive=12.5 --connections 3 --retry --retry-attempts 4 --retry-base-delay 50ms"},
		{"resolving gRPC", load.Config{URL: "grpc://app.shop:50051", Resolve: &load.Resolve{}}, 0, "load grpc://app.shop:50051 -o jsonl --resolve-interval 30s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, err := loadArgs(tt.cfg, tt.wait)
			if err != nil || strings.Join(args, " ") != tt.want {
				t.Errorf("loadArgs: %q, %v; want %q", strings.Join(args, " "), err, tt.want)
			}
		})
	}
	policy := retryPolicy
	policy.MaxDelay = time.Second
	if _, err := loadArgs(load.Config{URL: "http://web.shop/", Retry: &policy}, 0); err == nil {
		t.Error("loadArgs with a MaxDelay: no error, want one")
	}
	lookup := func(context.Context, string) ([]netip.Addr, error) { return nil, nil }
	if _, err := loadArgs(load.Config{URL: "grpc://app.shop:50051", Resolve: &load.Resolve{Lookup: lookup}}, 0); err == nil {
		t.Error("loadArgs with a Lookup: no error, want one")
	}
}

// TestLoadWaitServing waits for a Service's first ready endpoint.
func TestLoadWaitServing(t *testing.T) {
	c, cs := newFake(t)
	lp := c.LoadPods(LoadConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := slice("web-abc", endpoint("10.0.0.1", false, false, false))
	s.Namespace = "shop"
	if _, err := cs.DiscoveryV1().EndpointSlices("shop").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lp.WaitServing(ctx, load.Config{URL: "http://web.shop:80/work"}, nil) }()
	select {
	case err := <-done:
		t.Fatalf("WaitServing returned %v before an endpoint was ready", err)
	case <-time.After(700 * time.Millisecond):
	}
	s.Endpoints[0].Conditions.Ready = ptr.To(true)
	if _, err := cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("WaitServing: %v", err)
	}
	for _, bad := range []string{"http://127.0.0.1:80/", "http://web/", "::"} {
		if err := lp.WaitServing(ctx, load.Config{URL: bad}, nil); err == nil {
			t.Errorf("WaitServing(%q): no error, want one", bad)
		}
	}
}

// retryPolicy is a retry policy that closingtime load's flags express.
var retryPolicy = retry.Policy{Attempts: 4, BaseDelay: 50 * time.Millisecond}
