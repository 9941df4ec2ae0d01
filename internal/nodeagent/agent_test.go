package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// waitLimit bounds each wait of the tests: generous, as the machine is
// shared.
const waitLimit = 90 * time.Second

// TestAgentRunsDeployment: two agents register Ready nodes with their
// Leases; the scheduler spreads a Deployment of `closingtime serve` pods
// over them; the pods go Running and Ready in the API with their address
// and container statuses, answer on it, and the real EndpointSlice
// controller lists them ready. A deleted pod runs its preStop hook, gets
// SIGTERM and exits; the API shows it terminating, with its exit code,
// and then no more (the agent's final delete).
func TestAgentRunsDeployment(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	agents, log := startAgents(t, client, ns, 2, local.KubeletConfig{})
	startScheduler(t)
	ctx := context.Background()

	for _, a := range agents {
		checkNode(t, client, a.cfg.NodeName)
	}
	created := time.Now()
	create(t, client, ns, serveService("web"), serveDeployment("web", 2))
	pods := waitPods(t, client, ns, "app=web", "2 pods Running and Ready", func(pods []corev1.Pod) bool {
		return len(pods) == 2 && podReady(&pods[0]) && podReady(&pods[1])
	})
	t.Logf("2 pods Ready in the API %s after the Deployment's creation", time.Since(created).Round(time.Millisecond))
	var nodes, ips []string
	for _, p := range pods {
		nodes, ips = append(nodes, p.Spec.NodeName), append(ips, p.Status.PodIP)
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("pod %s: phase %s, podIP %q, %d container statuses", p.Name, p.Status.Phase, p.Status.PodIP, len(p.Status.ContainerStatuses))
		}
		cs := p.Status.ContainerStatuses[0]
		if !cs.Ready || cs.Started == nil || !*cs.Started || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("pod %s: container status %+v, want running, started, ready, no restart", p.Name, cs)
		}
		if !hasCondition(p.Status.Conditions, corev1.PodScheduled) {
			t.Errorf("pod %s: the status lost the scheduler's PodScheduled condition: %+v", p.Name, p.Status.Conditions)
		}
		// The pod listens on its address on this machine (PodIPOnNode).
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			t.Fatalf("pod %s: podIP %q: %v", p.Name, p.Status.PodIP, err)
		}
		resp, err := http.Get("http://" + PodIPOnNode(ip).String() + ":8080/ready")
		if err != nil {
			t.Fatalf("pod %s at %s: %v", p.Name, p.Status.PodIP, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("pod %s /ready: %s", p.Name, resp.Status)
		}
	}
	slices.Sort(nodes)
	if want := []string{agents[0].cfg.NodeName, agents[1].cfg.NodeName}; !slices.Equal(nodes, want) {
		t.Errorf("pods on nodes %v, want one on each of %v", nodes, want)
	}
	waitFor(t, "the EndpointSlice to list both pods ready", func() (bool, error) {
		slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err
		}
		var ready []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready = append(ready, e.Addresses...)
				}
			}
		}
		return sameSet(ready, ips), nil
	})
	waitEvent(t, client, ns, pods[0].Name, "Scheduled", "default-scheduler", "")
	waitEvent(t, client, ns, pods[0].Name, "Started", "kubelet", pods[0].Spec.NodeName)

	// The deletion, as the API shows it to a watcher.
	victim := pods[0]
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", victim.Name).String(),
		ResourceVersion: victim.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deleted := time.Now()
	if err := client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var terminating bool
	var last *corev1.Pod
	timeout := time.After(waitLimit)
watching:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended before the pod was deleted")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				t.Fatalf("watch: %v", ev.Object)
			}
			if ev.Type == watch.Deleted {
				break watching
			}
			terminating = terminating || p.DeletionTimestamp != nil
			last = p
		case <-timeout:
			t.Fatalf("pod %s still in the API %s after its deletion; last seen %+v", victim.Name, waitLimit, last.Status)
		}
	}
	t.Logf("pod gone from the API %s after its deletion (preStop 1 s, then SIGTERM)", time.Since(deleted).Round(time.Millisecond))
	if !terminating {
		t.Error("the API never showed the pod terminating")
	}
	if last == nil || len(last.Status.ContainerStatuses) != 1 || last.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("last status seen before the pod went: %+v, want its container terminated", last)
	}
	// `closingtime serve --shutdown graceful` exits 143 after SIGTERM.
	if term := last.Status.ContainerStatuses[0].State.Terminated; term.ExitCode != 143 {
		t.Errorf("exit code %d (%s), want 143", term.ExitCode, term.Reason)
	}
	if last.Status.Phase != corev1.PodFailed {
		t.Errorf("last phase %s, want Failed (exit 143)", last.Status.Phase)
	}
	checkOrder(t, log, victim.Name, cluster.PreStopStarted, cluster.SignalSent, cluster.ContainerExited, cluster.PodTerminated)
	waitEvent(t, client, ns, victim.Name, "Killing", "kubelet", victim.Spec.NodeName)
}

// TestAgentCrashLoopBackOff: a container that exits non-zero is restarted
// with back-off, and the API shows it: the restart count, the last exit
// code, the CrashLoopBackOff reason, and the kubelet's BackOff Event.
func TestAgentCrashLoopBackOff(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	startAgents(t, client, ns, 1, local.KubeletConfig{CrashLoopBackOff: cluster.CrashLoopBackOff{Initial: time.Second, Max: 2 * time.Second}})
	startScheduler(t)
	d := serveDeployment("crash", 1, corev1.EnvVar{Name: "CT_CRASH_CODE", Value: "3"})
	create(t, client, ns, d)
	pods := waitPods(t, client, ns, "app=crash", "a pod in CrashLoopBackOff after a restart", func(pods []corev1.Pod) bool {
		if len(pods) != 1 || len(pods[0].Status.ContainerStatuses) != 1 {
			return false
		}
		cs := pods[0].Status.ContainerStatuses[0]
		return cs.RestartCount >= 1 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" &&
			cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 3
	})
	if pods[0].Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running (restartPolicy Always)", pods[0].Status.Phase)
	}
	e := waitEvent(t, client, ns, pods[0].Name, "BackOff", "kubelet", pods[0].Spec.NodeName)
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.FieldPath != "spec.containers{app}" || e.InvolvedObject.UID != pods[0].UID {
		t.Errorf("BackOff event %s about %+v, want a Warning about container app of pod %s", e.Type, e.InvolvedObject, pods[0].UID)
	}
}

// TestAgentUnhealthyEachFailedProbe: the kubelet posts a Warning Event
// Unhealthy at every failed run of a probe, which the Event recorder
// counts into one Event while the message stays the same. A readiness
// probe of a closed port fails every second and never changes its stored
// result, a failure from the start (P4, P5): the count of the
// Unhealthy Event grows with the failed runs, the local kubelet's
// probe_failed events.
func TestAgentUnhealthyEachFailedProbe(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	_, log := startAgents(t, client, ns, 1, local.KubeletConfig{})
	startScheduler(t)
	d := serveDeployment("unready", 1)
	d.Spec.Template.Spec.Containers[0].ReadinessProbe.ProbeHandler = corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}
	create(t, client, ns, d)
	const runs = 3
	var e corev1.Event
	waitFor(t, fmt.Sprintf("Unhealthy event counted %d times", runs), func() (bool, error) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == "Unhealthy" && ev.Source.Component == "kubelet" && ev.Count >= runs {
				e = ev
				return true, nil
			}
		}
		return false, nil
	})
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.FieldPath != "spec.containers{app}" ||
		!strings.HasPrefix(e.Message, "Readiness probe failed: ") || !strings.Contains(e.Message, "connection refused") {
		t.Errorf("Unhealthy event %s %q about %+v, want a Warning about container app, the readiness probe's refused connection",
			e.Type, e.Message, e.InvolvedObject)
	}
	failed := 0
	for _, le := range log.Events() {
		switch {
		case le.Pod != e.InvolvedObject.Name:
		case le.Kind == cluster.ProbeFailed:
			failed++
		case le.Kind == cluster.ProbeResult, le.Kind == cluster.PodReady:
			t.Errorf("%s %v: the readiness result stays the initial failure", le.Kind, le.Fields)
		}
	}
	if failed < int(e.Count) {
		t.Errorf("Unhealthy counted %d times, more than the %d failed runs", e.Count, failed)
	}
}

// TestAgentEvictionRefusedByPDB: the real API server refuses, 429, the
// eviction of a pod that the agent runs when a PodDisruptionBudget allows
// no disruption, and the pod runs on; once the budget allows one, the
// eviction deletes the pod, which the agent terminates and deletes for
// good.
func TestAgentEvictionRefusedByPDB(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	startAgents(t, client, ns, 2, local.KubeletConfig{})
	startScheduler(t)
	ctx := context.Background()
	minAvailable := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	create(t, client, ns, serveDeployment("web", 2), pdb)
	pods := waitPods(t, client, ns, "app=web", "2 pods Ready", func(pods []corev1.Pod) bool {
		return len(pods) == 2 && podReady(&pods[0]) && podReady(&pods[1])
	})
	waitBudget(t, client, ns, "web", 0)
	victim := pods[0]
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}}
	err := client.PolicyV1().Evictions(ns).Evict(ctx, eviction)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction with no disruption allowed: %v, want 429 Too Many Requests", err)
	}
	p, err := client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil || !podReady(p) {
		t.Fatalf("pod %s after the refused eviction: %v, deleting %v", victim.Name, err, p.DeletionTimestamp)
	}

	minAvailable = intstr.FromInt32(1)
	pdb, err = client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Spec.MinAvailable = &minAvailable
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBudget(t, client, ns, "web", 1)
	if err := client.PolicyV1().Evictions(ns).Evict(ctx, eviction); err != nil {
		t.Fatalf("eviction with a disruption allowed: %v", err)
	}
	waitFor(t, "the evicted pod to be gone from the API", func() (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestAgentRestart: an agent started again with the name of a node that
// is registered (a restarted node) updates its Node and Lease instead of
// failing, and the node is Ready.
func TestAgentRestart(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	agents, _ := startAgents(t, client, ns, 1, local.KubeletConfig{})
	first := agents[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now().Add(-time.Second) // the API's times are whole seconds
	again, err := Start(ctx, Config{Client: client, NodeName: first.cfg.NodeName, Kubelet: first.cfg.Kubelet})
	if err != nil {
		t.Fatalf("restart of node %s: %v", first.cfg.NodeName, err)
	}
	defer again.Close(ctx)
	checkNode(t, client, first.cfg.NodeName)
	l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, first.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.RenewTime.Time.Before(restarted) {
		t.Errorf("lease renewed at %s, before the restart at %s", l.Spec.RenewTime, restarted)
	}
}

// TestAgentForceDelete: a pod deleted with grace 0, gone from the API at
// once, is still killed: the kubelet floors its grace to 1 s (T5), SIGTERM
// is sent and its process ends (T13).
func TestAgentForceDelete(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	_, log := startAgents(t, client, ns, 1, local.KubeletConfig{})
	startScheduler(t)
	ctx := context.Background()
	create(t, client, ns, serveDeployment("web", 1))
	pods := waitPods(t, client, ns, "app=web", "a pod Ready", func(pods []corev1.Pod) bool {
		return len(pods) == 1 && podReady(&pods[0])
	})
	victim := pods[0]
	zero := int64(0)
	if err := client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the force-deleted pod's container to exit", func() (bool, error) {
		for _, e := range log.Events() {
			if e.Pod == victim.Name && e.Kind == cluster.PodTerminated {
				return true, nil
			}
		}
		return false, nil
	})
	checkOrder(t, log, victim.Name, cluster.PodTerminating, cluster.SignalSent, cluster.ContainerExited)
	for _, e := range log.Events() {
		if e.Pod == victim.Name && e.Kind == cluster.PodTerminating && e.Fields["grace"] != "1s" {
			t.Errorf("terminating with grace %s, want 1s: the kubelet's floor for a grace of 0 (T5)", e.Fields["grace"])
		}
	}
}

// TestAgentRefusedPod: a pod the kubelet cannot run (an env source it does
// not support) fails with the reason in its status and a Warning Event;
// deleted, it goes from the API at once, as it never ran.
func TestAgentRefusedPod(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	startAgents(t, client, ns, 1, local.KubeletConfig{})
	startScheduler(t)
	ctx := context.Background()
	spec := serveDeployment("refused", 1).Spec.Template
	spec.Spec.Containers[0].Env = append(spec.Spec.Containers[0].Env, corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "token"}}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "refused", Labels: spec.Labels}, Spec: spec.Spec}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, client, ns, "app=refused", "the pod Failed", func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodFailed
	})
	if msg := pods[0].Status.Message; !strings.Contains(msg, "env TOKEN") {
		t.Errorf("status message %q, want the refused env variable named", msg)
	}
	e := waitEvent(t, client, ns, "refused", "Failed", "kubelet", pods[0].Spec.NodeName)
	if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "env TOKEN") {
		t.Errorf("event %s %q, want a Warning naming env TOKEN", e.Type, e.Message)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, "refused", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused pod to be gone from the API", func() (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "refused", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestAgentSidecarOrder: on the real control plane, a pod with two native
// sidecars and an app container, as the API admits it, starts the
// sidecars first and reports them among its init container statuses;
// deleted, it signals the app first, then the later sidecar once the app
// has exited, then the earlier one once the later one has (C3).
func TestAgentSidecarOrder(t *testing.T) {
	client := controlplanetest.Client(t)
	ns := newNamespace(t, client)
	_, log := startAgents(t, client, ns, 1, local.KubeletConfig{})
	startScheduler(t)
	ctx := context.Background()
	always := corev1.ContainerRestartPolicyAlways
	shell := func(name, onTerm string) corev1.Container {
		return corev1.Container{Name: name, Image: "closingtime",
			Command: []string{"sh", "-c", "trap '" + onTerm + "; exit 0' TERM; while :; do sleep 0.05; done"}}
	}
	first, second := shell("first", "sleep 0.3"), shell("second", "sleep 0.3")
	first.RestartPolicy, second.RestartPolicy = &always, &always
	grace := int64(10)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ordered"}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		InitContainers:                []corev1.Container{first, second},
		Containers:                    []corev1.Container{shell("app", "sleep 1")},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod Ready with its sidecars running", func() (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "ordered", metav1.GetOptions{})
		if err != nil || !podReady(p) || len(p.Status.InitContainerStatuses) != 2 {
			return false, err
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.State.Running == nil || !s.Ready {
				return false, nil
			}
		}
		return true, nil
	})
	if err := client.CoreV1().Pods(ns).Delete(ctx, "ordered", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be gone from the API", func() (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, "ordered", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	var got []string
	for _, e := range log.Events() {
		if e.Pod != "ordered" {
			continue
		}
		switch e.Kind {
		case cluster.ContainerStarted:
			got = append(got, "start "+e.Container)
		case cluster.SignalSent:
			got = append(got, strings.TrimSpace("signal "+e.Container+" "+e.Fields["after"]))
		case cluster.ContainerExited:
			got = append(got, "exit "+e.Container)
		}
	}
	want := "start first, start second, start app, signal app, exit app, signal second app, exit second, signal first app,second, exit first"
	if strings.Join(got, ", ") != want {
		t.Errorf("containers: %s\nwant %s", strings.Join(got, ", "), want)
	}
}

// newNamespace creates a namespace for the test, and returns once its
// default service account, which admission requires of its pods, exists.
// The namespace is deleted after the test.
func newNamespace(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	name = name[:min(len(name), 40)] + "-" + utilrand.String(5)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	waitFor(t, "the default service account of "+name, func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	return name
}

// nodeClient returns a client of the shared control plane with the
// kubelet's rate limits, for the agents and the scheduler.
func nodeClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", controlplanetest.Shared(t).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = cluster.DefaultKubeletAPIQPS, cluster.DefaultKubeletAPIBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// startAgents starts n agents named after the test's namespace, on a pod
// range claimed for the test, each recording into the returned log. After
// the test they are closed, and their Nodes and Leases deleted, so that no
// later test's scheduler binds pods to them.
func startAgents(t *testing.T, client kubernetes.Interface, prefix string, n int, kc local.KubeletConfig) ([]*Agent, *cluster.EventLog) {
	t.Helper()
	cidr, claim, err := local.ClaimFreeRange()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { claim.Close() })
	log := &cluster.EventLog{}
	var agents []*Agent
	for i := 1; i <= n; i++ {
		kc := kc
		kc.PodCIDR = podnet.NodePodCIDR(cidr, i)
		name := fmt.Sprintf("%s-%d", prefix, i)
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		a, err := Start(ctx, Config{Client: nodeClient(t), NodeName: name, Kubelet: kc, Recorder: log})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := a.Close(ctx); err != nil {
				t.Errorf("close agent %s: %v", name, err)
			}
			client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		})
		agents = append(agents, a)
	}
	return agents, log
}

// startScheduler starts a scheduler, closed after the test.
func startScheduler(t *testing.T) *Scheduler {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	s, err := StartScheduler(ctx, nodeClient(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// checkNode checks that node is registered Ready, on 127.0.0.1, with room
// for pods, and that its Lease is held.
func checkNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !schedulable(n) {
		t.Errorf("node %s: conditions %+v, unschedulable %v; want Ready", name, n.Status.Conditions, n.Spec.Unschedulable)
	}
	if len(n.Spec.Taints) > 0 {
		t.Errorf("node %s: taints %v, want none on a Ready node", name, n.Spec.Taints)
	}
	if !slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
		t.Errorf("node %s: addresses %v, want InternalIP 127.0.0.1", name, n.Status.Addresses)
	}
	if pods := n.Status.Allocatable.Pods().Value(); pods != cluster.DefaultMaxPods {
		t.Errorf("node %s: %d allocatable pods, want %d", name, pods, cluster.DefaultMaxPods)
	}
	if !strings.HasPrefix(n.Status.NodeInfo.KubeletVersion, "closingtime") {
		t.Errorf("node %s: kubelet version %q", name, n.Status.NodeInfo.KubeletVersion)
	}
	l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != name || l.Spec.RenewTime == nil ||
		time.Since(l.Spec.RenewTime.Time) > cluster.DefaultNodeLeaseDuration {
		t.Errorf("lease of node %s: %+v, want held by the node and renewed", name, l.Spec)
	}
}

// serveService returns a Service of the pods labelled app=name.
func serveService(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": name},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
	}}
}

// serveDeployment returns a Deployment of `closingtime serve` pods, as the
// scenario catalog runs them, with short periods: a readiness probe every
// second, a 1 s preStop sleep, a 3 s grace period, and env added.
func serveDeployment(name string, replicas int32, env ...corev1.EnvVar) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	grace := int64(3)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name: "app", Image: "closingtime", Command: []string{binary, "serve"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Env: append([]corev1.EnvVar{
							{Name: "SHUTDOWN_MODE", Value: "graceful"},
							{Name: "WORK_MS", Value: "10"},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						}, env...),
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}},
					}},
				},
			},
		},
	}
}

// create creates objects in namespace ns.
func create(t *testing.T, client kubernetes.Interface, ns string, objects ...any) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			_, err = client.CoreV1().Services(ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = client.AppsV1().Deployments(ns).Create(ctx, o, metav1.CreateOptions{})
		case *policyv1.PodDisruptionBudget:
			_, err = client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = client.CoreV1().Pods(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("create %T: not a kind of the tests", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls done every 100 ms until it reports true, and fails the
// test after waitLimit or at its error.
func waitFor(t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, err := done()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, waitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPods waits until the pods of ns that selector selects satisfy done,
// and returns them.
func waitPods(t *testing.T, client kubernetes.Interface, ns, selector, what string, done func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, what, func() (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return done(pods), nil
	})
	return pods
}

// waitBudget waits until the disruption controller has observed budget
// name of ns and allows allowed disruptions.
func waitBudget(t *testing.T, client kubernetes.Interface, ns, name string, allowed int32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("budget %s to allow %d disruptions", name, allowed), func() (bool, error) {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == allowed, nil
	})
}

// waitEvent waits for an Event of reason about pod from component (on
// host, if not empty), and returns it.
func waitEvent(t *testing.T, client kubernetes.Interface, ns, pod, reason, component, host string) corev1.Event {
	t.Helper()
	var found corev1.Event
	waitFor(t, fmt.Sprintf("a %s event about pod %s from %s", reason, pod, component), func() (bool, error) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod && e.Reason == reason &&
				e.Source.Component == component && (host == "" || e.Source.Host == host) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// checkOrder checks that the log holds the kinds about pod, in that
// order.
func checkOrder(t *testing.T, log *cluster.EventLog, pod string, kinds ...cluster.EventKind) {
	t.Helper()
	next := 0
	for _, e := range log.Events() {
		if next < len(kinds) && e.Pod == pod && e.Kind == kinds[next] {
			next++
		}
	}
	if next < len(kinds) {
		t.Errorf("pod %s: events %v in order, got no %s after the first %d", pod, kinds, kinds[next], next)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasCondition(conds []corev1.PodCondition, t corev1.PodConditionType) bool {
	return slices.ContainsFunc(conds, func(c corev1.PodCondition) bool { return c.Type == t })
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
