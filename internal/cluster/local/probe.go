package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// probeKind is which of a container's probes a worker runs.
type probeKind string

const (
	startupProbe   probeKind = "startup"
	readinessProbe probeKind = "readiness"
	livenessProbe  probeKind = "liveness"
)

// probeWorker runs one probe of one container instance, as the kubelet's
// prober worker does (k8s.io/kubernetes pkg/kubelet/prober/worker.go, run
// and doProbe).
type probeWorker struct {
	kind probeKind
	spec *corev1.Probe
	c    *containerWorker
	inst *instance

	lastResult bool  // the result of the current run
	resultRun  int   // how many identical results in a row
	stored     *bool // the result the kubelet acts on; nil while unknown
}

// run probes at once and then every periodSeconds (P3) until ctx ends
// or the worker holds: after a liveness or startup failure, until a new
// instance (P7), and after the startup probe succeeded (P6).
func (w *probeWorker) run(ctx context.Context) {
	// The initial results (P4): readiness Failure, liveness Success,
	// startup Unknown.
	switch w.kind {
	case readinessProbe:
		w.stored = new(bool)
	case livenessProbe:
		w.stored = new(bool)
		*w.stored = true
	}
	clk := w.c.p.k.clock
	period := time.Duration(valueOr(w.spec.PeriodSeconds, cluster.DefaultProbePeriodSeconds)) * time.Second
	timer := clk.NewTimer(period)
	defer timer.Stop()
	// Each round is one period; the loop ends with ctx or a hold.
	for w.doProbe(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			timer.Reset(period)
		}
	}
}

// doProbe probes once, if it is time, and reports whether to go on. Every
// failed run is recorded, as the kubelet posts Unhealthy at each one
// (k8s.io/kubernetes pkg/kubelet/prober/prober.go, probe). A result whose
// run reaches its threshold is stored; a change of the stored result goes
// to the kubelet (P5).
func (w *probeWorker) doProbe(ctx context.Context) bool {
	p := w.c.p
	p.mu.Lock()
	started := w.c.status.Started != nil && *w.c.status.Started
	p.mu.Unlock()
	// While the container is younger than initialDelaySeconds, in whole
	// seconds, the tick is skipped (P3).
	if int32(p.k.clock.Since(w.inst.startedAt).Seconds()) < w.spec.InitialDelaySeconds {
		return true
	}
	switch {
	case w.kind == startupProbe && started:
		return false
	case w.kind != startupProbe && !started:
		// Liveness and readiness wait for the startup probe (P6).
		return true
	}
	timeout := time.Duration(valueOr(w.spec.TimeoutSeconds, cluster.DefaultProbeTimeoutSeconds)) * time.Second
	pctx, cancel := context.WithTimeout(ctx, timeout)
	result, output := w.c.probe(pctx, w.spec.ProbeHandler)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	// The stored result changes only when a run of identical results
	// reaches its threshold (P5).
	if w.resultRun > 0 && result == w.lastResult {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = result, 1
	}
	if !result {
		w.c.probeFailed(w.kind, w.spec.ProbeHandler, w.resultRun, output)
	}
	threshold := valueOr(w.spec.FailureThreshold, cluster.DefaultProbeFailureThreshold)
	if result {
		threshold = valueOr(w.spec.SuccessThreshold, cluster.DefaultProbeSuccessThreshold)
	}
	if w.resultRun < int(threshold) {
		return true
	}
	// The kubelet acts on a change of the stored result only
	// (pkg/kubelet/prober/results/results_manager.go, Set).
	if w.stored == nil || *w.stored != result {
		w.stored = &result
		w.c.probeResult(w.inst, w.kind, result, output)
	}
	return result || w.kind == readinessProbe
}

// valueOr returns v, or def when v is zero (unset).
func valueOr(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// probeTarget returns what handler h probes, as [cluster.ProbeFailure]
// names it: "GET HOST:PORT/PATH" (HOST empty for the pod's address, a
// named port resolved), "TCP HOST:PORT", "gRPC :PORT SERVICE" or "exec
// CMD ARGS…".
func (c *containerWorker) probeTarget(h corev1.ProbeHandler) string {
	port := func(p intstr.IntOrString) string {
		if n, err := c.port(p); err == nil {
			return strconv.Itoa(n)
		}
		return p.String()
	}
	switch {
	case h.HTTPGet != nil:
		return "GET " + h.HTTPGet.Host + ":" + port(h.HTTPGet.Port) + h.HTTPGet.Path
	case h.TCPSocket != nil:
		return "TCP " + h.TCPSocket.Host + ":" + port(h.TCPSocket.Port)
	case h.GRPC != nil:
		return strings.TrimSpace("gRPC :" + strconv.Itoa(int(h.GRPC.Port)) + " " + ptr.Deref(h.GRPC.Service, ""))
	case h.Exec != nil:
		return "exec " + strings.Join(h.Exec.Command, " ")
	}
	return ""
}

// probe runs handler against the container and returns whether it
// succeeded, and what it said (P2). ctx carries the probe's timeout.
func (c *containerWorker) probe(ctx context.Context, h corev1.ProbeHandler) (bool, string) {
	switch {
	case h.HTTPGet != nil:
		code, err := c.httpGet(ctx, h.HTTPGet, "kube-probe/closingtime")
		if err != nil {
			return false, err.Error()
		}
		return code >= 200 && code < 400, "HTTP " + strconv.Itoa(code)
	case h.TCPSocket != nil:
		port, err := c.port(h.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = c.p.ip
		}
		conn, err := c.p.k.cfg.Network.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, "connected"
	case h.GRPC != nil:
		return c.grpcHealth(ctx, h.GRPC)
	case h.Exec != nil:
		out, err := c.exec(ctx, h.Exec.Command)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return true, string(out)
	}
	return false, "no handler"
}

// grpcHealth sends the grpc.health.v1 Check of g's service to g's port of
// the pod, as the kubelet's gRPC prober does (k8s.io/kubernetes
// pkg/probe/grpc): on a connection of its own, without TLS, as
// kube-probe; SERVING succeeds, any other status or an error fails.
func (c *containerWorker) grpcHealth(ctx context.Context, g *corev1.GRPCAction) (bool, string) {
	addr := net.JoinHostPort(c.p.ip, strconv.Itoa(int(g.Port)))
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("kube-probe/closingtime"),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return c.p.k.cfg.Network.DialContext(ctx, "tcp", a) // from the node
		}))
	if err != nil {
		return false, err.Error()
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: ptr.Deref(g.Service, "")})
	if err != nil {
		return false, err.Error()
	}
	return resp.Status == healthpb.HealthCheckResponse_SERVING, "service status " + resp.Status.String()
}

// httpGet sends the GET of a probe or hook to the pod and returns the
// status code. Redirects are followed to the same host only, at most 10;
// another redirect counts as success, as the kubelet's warning does
// (k8s.io/kubernetes pkg/probe/http/http.go, redirectChecker). The body is
// read up to 10 KiB.
func (c *containerWorker) httpGet(ctx context.Context, g *corev1.HTTPGetAction, agent string) (int, error) {
	port, err := c.port(g.Port)
	if err != nil {
		return 0, err
	}
	host := g.Host
	if host == "" {
		host = c.p.ip
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	target, err := u.Parse(g.Path)
	if err != nil {
		return 0, fmt.Errorf("path %q: %w", g.Path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", agent)
	req.Header.Set("Accept", "*/*")
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext:       c.p.k.cfg.Network.DialContext, // from the node
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // as the kubelet's prober
		},
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if r.URL.Hostname() != target.Hostname() || len(via) >= 10 {
				return errOffHostRedirect
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if errors.Is(err, errOffHostRedirect) {
		return http.StatusOK, nil
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	return resp.StatusCode, nil
}

var errOffHostRedirect = errors.New("redirect to another host")

// exec runs command as an exec probe or hook runs in the container: with
// the container's environment and working directory, in its pod's
// network, ended by ctx. It is isolated as a container's processes are
// (isolator), in a PID namespace of its own rather than the container's,
// so that what it starts ends with it: when ctx ends, when command's first
// process exits (without a PID namespace, the process group is killed
// then), and when closingtime dies however it dies (the parent-death
// signal; without a PID namespace only command's first process has it).
// In a pod with shareProcessNamespace it runs in the pod's namespace, as
// the containers do, so that it sees and can signal their processes.
func (c *containerWorker) exec(ctx context.Context, command []string) ([]byte, error) {
	if len(command) == 0 {
		return nil, errors.New("empty command")
	}
	var out bytes.Buffer
	newCmd := func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, command[0], command[1:]...)
		cmd.Env, cmd.Dir = c.env, c.spec.WorkingDir
		cmd.WaitDelay = time.Second
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Cancel = func() error {
			err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if errors.Is(err, syscall.ESRCH) {
				return os.ErrProcessDone
			}
			return err
		}
		return cmd
	}
	cmd, level, _, err := startIsolated(&c.p.k.iso, c.p.shared, c.p.sandbox, newCmd)
	if err != nil {
		return nil, err
	}
	err = cmd.Wait()
	if level == isolateNone || level == isolatePod {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	b := out.Bytes()
	if len(b) > 10<<10 {
		b = b[:10<<10]
	}
	return b, err
}

// port resolves a probe's or hook's port, a number or the name of one of
// the container's ports.
func (c *containerWorker) port(p intstr.IntOrString) (int, error) { return containerPort(c.spec, p) }
