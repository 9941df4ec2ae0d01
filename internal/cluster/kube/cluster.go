package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// FieldManager is the field manager of closingtime's server-side applies
// and patches, as `kubectl` is kubectl's.
const FieldManager = "closingtime"

// drainPollInterval is how often Drain looks whether an evicted pod is
// gone, as `kubectl drain` does (k8s.io/kubectl pkg/drain/drain.go,
// waitForDelete's interval).
const drainPollInterval = time.Second

// ErrOutsideCluster is returned by [Cluster.DialContext]: a client outside
// the cluster cannot reach a Service as a pod does, through kube-proxy's
// rules on its node. The API server's Service proxy and port-forwarding
// both bypass kube-proxy, so neither measures what a rollout does to a
// Service's clients; traffic must come from a pod inside the cluster.
var ErrOutsideCluster = errors.New("kube: cannot dial a Service from outside the cluster: its traffic must come from a pod inside the cluster")

// Config configures a [Cluster]. The zero value uses the kubeconfig that
// kubectl would, its current context and that context's namespace.
type Config struct {
	// Kubeconfig is the path of the kubeconfig file; if empty, the
	// standard loading rules apply: the files listed in $KUBECONFIG, else
	// ~/.kube/config (clientcmd.NewDefaultClientConfigLoadingRules).
	Kubeconfig string
	// Context names the kubeconfig context to use; the current context if
	// empty.
	Context string
	// Namespace is the namespace that objects without one are applied to
	// and that the backend observes; if empty, the context's namespace, or
	// "default" (unless CreateNamespace).
	Namespace string
	// CreateNamespace makes New create the namespace, and Close delete
	// it. Namespace names it; if Namespace is empty, the API server names
	// it closingtime-XXXXX. New fails if a namespace of that name exists:
	// closingtime deletes only what it created.
	CreateNamespace bool
	// Client, if not nil, is the API client to use instead of one built
	// from the kubeconfig; Kubeconfig and Context are ignored then, and
	// Namespace defaults to "default".
	Client kubernetes.Interface
	// Images maps an image of the applied Deployments' containers to the
	// image to run instead, as the embedded cluster maps an image to a
	// command: the catalog's image "closingtime" becomes a tag that the
	// nodes can pull. Images not in the map are applied as written.
	Images map[string]string
	// Clock stamps events and log lines; the real clock if nil.
	Clock clock.Clock
}

// Cluster is a real cluster reached through its API server. It implements
// [cluster.Backend] for the namespace it observes (Namespace): its Events,
// RolloutStatus and Logs see that namespace only, while the methods that
// change objects accept any namespace the credentials allow. It is safe
// for concurrent use; Close stops it.
type Cluster struct {
	client    kubernetes.Interface
	namespace string
	created   bool // the namespace was created by New
	clock     clock.Clock
	images    map[string]string
	log       cluster.EventLog
	factory   informers.SharedInformerFactory
	ctx       context.Context // ends with Close
	stop      context.CancelFunc
	wg        sync.WaitGroup // the log followers

	mu       sync.Mutex
	synced   bool                          // the informers listed what was there at the start
	changed  chan struct{}                 // closed and replaced at every change an informer sees
	pods     map[types.UID]*podState       // what was last seen of each pod
	services map[string][]cluster.Endpoint // by namespace/name: the endpoints last recorded
	rollouts map[string]*rollout           // by namespace/name of the Deployment
	logs     map[string]*cluster.LogBuffer // by namespace/pod/container
	loadRuns map[string]bool               // the runs of load pods not yet deleted
	// kubeletEvents holds, by namespace/name, the occurrences seen of
	// each of the kubelet's Events about pods.
	kubeletEvents map[string]int32
	// podLister reads the pods informer's cache.
	podLister corelisters.PodLister
}

var _ cluster.Backend = (*Cluster)(nil)

// New connects to the cluster that cfg names, creates the namespace if
// asked to, and starts observing the namespace: it returns once its
// informers have listed what is there, which raises no events. Close
// stops it.
func New(cfg Config) (*Cluster, error) {
	client, namespace := cfg.Client, cfg.Namespace
	if client == nil {
		rest, ns, err := loadKubeconfig(cfg.Kubeconfig, cfg.Context)
		if err != nil {
			return nil, err
		}
		if client, err = kubernetes.NewForConfig(rest); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		if err := reachable(client, rest.Host); err != nil {
			return nil, err
		}
		if namespace == "" && !cfg.CreateNamespace {
			namespace = ns
		}
	}
	if namespace == "" && !cfg.CreateNamespace {
		namespace = metav1.NamespaceDefault
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Cluster{
		client: client, namespace: namespace, clock: cfg.Clock, images: cfg.Images, ctx: ctx, stop: stop,
		changed: make(chan struct{}), pods: map[types.UID]*podState{}, services: map[string][]cluster.Endpoint{},
		rollouts: map[string]*rollout{}, logs: map[string]*cluster.LogBuffer{}, loadRuns: map[string]bool{},
		kubeletEvents: map[string]int32{},
	}
	if cfg.CreateNamespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		if namespace == "" {
			ns.GenerateName = "closingtime-"
		}
		created, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil {
			stop()
			return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
		}
		c.namespace, c.created = created.Name, true
	}
	if err := c.observe(); err != nil {
		c.Close(context.Background())
		return nil, err
	}
	return c, nil
}

// loadKubeconfig loads the client configuration and namespace of context
// (the current one if empty) from the kubeconfig at path, or from the
// files that the standard loading rules name if path is empty.
func loadKubeconfig(path, context string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, ns, nil
}

// reachTimeout bounds the first request to the API server.
const reachTimeout = 10 * time.Second

// reachable asks the API server at host for its version, so that an
// unreachable server or refused credentials are an error at once rather
// than after the informers' sync timeout.
func reachable(client kubernetes.Interface, host string) error {
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	if err := client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("reach the API server at %s: %w", host, err)
	}
	return nil
}

// Namespace returns the namespace the cluster observes, where objects
// without a namespace are applied.
func (c *Cluster) Namespace() string { return c.namespace }

// Close stops the informers and the log followers, deletes the load pods
// that a LoadPods run left (one that Close interrupted), and, if New
// created the namespace, deletes it (with everything in it, as the
// namespace controller does, after Close returns). It returns ctx.Err()
// if ctx ends before the deletions are accepted. The cluster must not be
// used afterwards.
func (c *Cluster) Close(ctx context.Context) error {
	c.stop()
	if c.factory != nil {
		c.factory.Shutdown()
	}
	c.wg.Wait()
	c.mu.Lock()
	runs := slices.Sorted(maps.Keys(c.loadRuns))
	c.mu.Unlock()
	var errs []error
	for _, run := range runs {
		errs = append(errs, c.deleteLoadPods(ctx, run))
	}
	if err := errors.Join(errs...); err != nil || !c.created {
		return err
	}
	err := c.client.CoreV1().Namespaces().Delete(ctx, c.namespace, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", c.namespace, err)
	}
	return nil
}

// apiError wraps err, an error of the API about op, so that a missing
// object's error wraps cluster.ErrNotFound.
func apiError(op string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w: %w", op, cluster.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Apply applies Deployments, Services and PodDisruptionBudgets with
// server-side apply, as `kubectl apply --server-side --force-conflicts
// --field-manager=closingtime` does: the fields each object sets become
// closingtime's, taken from any other manager, and fields it does not set
// keep their values. An object without a namespace goes to Namespace. An
// object of another kind is an error that names it, and nothing is applied
// then; an object the API refuses stops the apply there, the ones before
// it applied.
func (c *Cluster) Apply(ctx context.Context, objects []runtime.Object) error {
	type patch struct {
		kind, namespace, name string
		data                  []byte
	}
	var patches []patch
	for _, o := range objects {
		var gvk, name, namespace string
		switch d := o.(type) {
		case *appsv1.Deployment:
			gvk, name, namespace = "apps/v1 Deployment", d.Name, d.Namespace
			o = c.mapImages(d)
		case *corev1.Service:
			gvk, name, namespace = "v1 Service", d.Name, d.Namespace
		case *policyv1.PodDisruptionBudget:
			gvk, name, namespace = "policy/v1 PodDisruptionBudget", d.Name, d.Namespace
		default:
			what := o.GetObjectKind().GroupVersionKind().Kind
			if what == "" {
				what = fmt.Sprintf("%T", o)
			}
			if m, err := meta.Accessor(o); err == nil {
				what += " " + m.GetName()
			}
			return fmt.Errorf("apply %s: the kube backend applies Deployments, Services and PodDisruptionBudgets only", what)
		}
		apiVersion, kind, _ := strings.Cut(gvk, " ")
		if namespace == "" {
			namespace = c.namespace
		}
		data, err := applyPatch(o, apiVersion, kind, namespace)
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", kind, name, err)
		}
		patches = append(patches, patch{kind, namespace, name, data})
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	for _, p := range patches {
		var err error
		switch p.kind {
		case "Deployment":
			_, err = c.client.AppsV1().Deployments(p.namespace).Patch(ctx, p.name, types.ApplyPatchType, p.data, opts)
		case "Service":
			_, err = c.client.CoreV1().Services(p.namespace).Patch(ctx, p.name, types.ApplyPatchType, p.data, opts)
		case "PodDisruptionBudget":
			_, err = c.client.PolicyV1().PodDisruptionBudgets(p.namespace).Patch(ctx, p.name, types.ApplyPatchType, p.data, opts)
		}
		if err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", p.kind, p.namespace, p.name, err)
		}
	}
	return nil
}

// mapImages returns d with the images of its containers mapped by
// Config.Images: d itself if none is, a copy otherwise.
func (c *Cluster) mapImages(d *appsv1.Deployment) *appsv1.Deployment {
	var mapped *appsv1.Deployment
	for _, list := range []func(*appsv1.Deployment) []corev1.Container{
		func(d *appsv1.Deployment) []corev1.Container { return d.Spec.Template.Spec.InitContainers },
		func(d *appsv1.Deployment) []corev1.Container { return d.Spec.Template.Spec.Containers },
	} {
		for i, ctr := range list(d) {
			image, ok := c.images[ctr.Image]
			if !ok {
				continue
			}
			if mapped == nil {
				mapped = d.DeepCopy()
			}
			list(mapped)[i].Image = image
		}
	}
	if mapped == nil {
		return d
	}
	return mapped
}

// applyPatch returns o as the body of a server-side apply: with its
// apiVersion, kind and namespace, and without its status and the fields
// that the API server owns (uid, resourceVersion, creationTimestamp,
// managedFields).
func applyPatch(o runtime.Object, apiVersion, kind, namespace string) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u["apiVersion"], u["kind"] = apiVersion, kind
	delete(u, "status")
	meta, _ := u["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		u["metadata"] = meta
	}
	meta["namespace"] = namespace
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"} {
		delete(meta, f)
	}
	return json.Marshal(u)
}

// RolloutRestart restarts Deployment name as `kubectl rollout restart`
// does: a strategic merge patch sets the pod template's
// cluster.RestartedAtAnnotation to the current time, in RFC 3339 with
// seconds. A paused Deployment is an error, as with kubectl, and so is a
// second restart within the same second, which would change nothing.
func (c *Cluster) RolloutRestart(ctx context.Context, namespace, name string) error {
	op := fmt.Sprintf("restart deployment %s/%s", namespace, name)
	d, err := c.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return apiError(op, err)
	}
	if d.Spec.Paused {
		return fmt.Errorf("%s: paused (resume it first)", op)
	}
	at := c.clock.Now().Format(time.RFC3339)
	if d.Spec.Template.Annotations[cluster.RestartedAtAnnotation] == at {
		return fmt.Errorf("%s: already restarted at %s", op, at)
	}
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{cluster.RestartedAtAnnotation: at}}}}})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err = c.client.AppsV1().Deployments(namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return apiError(op, err)
	}
	return nil
}

// Scale sets Deployment name's replicas through its scale subresource, as
// `kubectl scale` does.
func (c *Cluster) Scale(ctx context.Context, namespace, name string, replicas int32) error {
	op := fmt.Sprintf("scale deployment %s/%s", namespace, name)
	if replicas < 0 {
		return fmt.Errorf("%s: negative replicas %d", op, replicas)
	}
	data := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	_, err := c.client.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager}, "scale")
	if err != nil {
		return apiError(op, err)
	}
	return nil
}

// DeletePod deletes pod name, with gracePeriodSeconds overriding its own
// when not nil.
func (c *Cluster) DeletePod(ctx context.Context, namespace, name string, gracePeriodSeconds *int64) error {
	err := c.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: gracePeriodSeconds})
	if err != nil {
		return apiError(fmt.Sprintf("delete pod %s/%s", namespace, name), err)
	}
	return nil
}

// Evict evicts pod name through the policy/v1 Eviction API.
func (c *Cluster) Evict(ctx context.Context, namespace, name string) error {
	return c.evict(ctx, namespace, name, nil)
}

// evict is Evict with the eviction's grace period. A refusal that the API
// ties to a budget (a status cause of type DisruptionBudget, with 429 Too
// Many Requests or 403 Forbidden) is a *cluster.EvictionError, recorded as
// an EvictionRefused event; an accepted eviction is recorded as a
// PodEvicted event.
func (c *Cluster) evict(ctx context.Context, namespace, name string, grace *int64) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if grace != nil {
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: grace}
	}
	err := c.client.PolicyV1().Evictions(namespace).Evict(ctx, ev)
	if err == nil {
		c.record(cluster.Event{Kind: cluster.PodEvicted, Namespace: namespace, Pod: name})
		return nil
	}
	if refused := evictionError(namespace, name, err); refused != nil {
		e := cluster.Event{Kind: cluster.EvictionRefused, Namespace: namespace, Pod: name,
			Fields: map[string]string{"budget": refused.Budget, "status": fmt.Sprint(refused.Status)}}
		if refused.Budget != "" {
			e.Object = "PodDisruptionBudget/" + refused.Budget
		}
		c.record(e)
		return refused
	}
	return apiError(fmt.Sprintf("evict pod %s/%s", namespace, name), err)
}

// evictionError returns the *cluster.EvictionError that err, the eviction
// API's answer, stands for, or nil if a budget did not refuse it. The API
// names the budget only in the message of its DisruptionBudget cause
// ("The disruption budget NAME needs…", k8s.io/kubernetes
// pkg/registry/core/pod/storage/eviction.go); Budget is empty if the
// message does not have that form.
func evictionError(namespace, pod string, err error) *cluster.EvictionError {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return nil
	}
	s := status.Status()
	if s.Details == nil {
		return nil
	}
	for _, cause := range s.Details.Causes {
		if cause.Type != policyv1.DisruptionBudgetCause {
			continue
		}
		budget := ""
		if rest, ok := strings.CutPrefix(cause.Message, "The disruption budget "); ok {
			budget, _, _ = strings.Cut(rest, " ")
		}
		code := int(s.Code)
		if code == 0 {
			code = http.StatusTooManyRequests
		}
		return &cluster.EvictionError{Namespace: namespace, Pod: pod, Budget: budget, Status: code}
	}
	return nil
}

// Cordon marks node unschedulable or schedulable again, as `kubectl
// cordon` and `kubectl uncordon` do, and records NodeCordoned or
// NodeUncordoned when that changed it.
func (c *Cluster) Cordon(ctx context.Context, node string, unschedulable bool) error {
	op := fmt.Sprintf("cordon node %s", node)
	n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return apiError(op, err)
	}
	if n.Spec.Unschedulable == unschedulable {
		return nil
	}
	data := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return apiError(op, err)
	}
	kind := cluster.NodeUncordoned
	if unschedulable {
		kind = cluster.NodeCordoned
	}
	c.record(cluster.Event{Kind: kind, Node: node})
	return nil
}

// Drain cordons node and evicts its pods concurrently as `kubectl drain
// --ignore-daemonsets` does: pods that a DaemonSet runs and mirror pods
// stay, a refusal with 429 Too Many Requests is retried every
// opts.RetryDelay, and Drain then waits for each evicted pod to be gone,
// looking every second as kubectl does. Listing the node's pods needs the
// right to list pods in every namespace.
func (c *Cluster) Drain(ctx context.Context, node string, opts cluster.DrainOptions) error {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	if err := c.Cordon(ctx, node, true); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	list, err := c.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("drain node %s: list pods: %w", node, err)
	}
	var targets []*corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName != node || p.Annotations[corev1.MirrorPodAnnotationKey] != "" {
			continue
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		targets = append(targets, &p)
	}
	evict := func(ctx context.Context, p *corev1.Pod) error {
		return c.evict(ctx, p.Namespace, p.Name, opts.GracePeriodSeconds)
	}
	if err := cluster.EvictAll(ctx, targets, opts.RetryDelay, c.clock, evict, c.waitGone); err != nil {
		return fmt.Errorf("drain node %s: %w", node, err)
	}
	return nil
}

// waitGone waits until pod (this UID) is gone, looking every
// drainPollInterval.
func (c *Cluster) waitGone(ctx context.Context, pod *corev1.Pod) error {
	// Each round looks once; the loop ends when the pod is gone or with
	// ctx.
	for {
		p, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID):
			return nil
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("wait for pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if err := c.sleep(ctx, drainPollInterval); err != nil {
			return fmt.Errorf("wait for pod %s/%s to be gone: %w", pod.Namespace, pod.Name, err)
		}
	}
}

// sleep waits for d on the cluster's clock, or returns ctx.Err() if ctx
// ends first.
func (c *Cluster) sleep(ctx context.Context, d time.Duration) error {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DialContext returns ErrOutsideCluster: see its doc. The traffic of a
// scenario on a real cluster comes from a load pod in the cluster instead.
func (c *Cluster) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return nil, fmt.Errorf("dial %s %s: %w", network, address, ErrOutsideCluster)
}

// Workload returns Deployment name of namespace and the Service that
// sends traffic to its pods: the one named service, or, if service is
// empty, the only Service whose selector selects the Deployment's pod
// template. A missing Deployment or Service wraps cluster.ErrNotFound;
// no Service or several selecting the pods are errors that say so.
func (c *Cluster) Workload(ctx context.Context, namespace, name, service string) (*appsv1.Deployment, *corev1.Service, error) {
	d, err := c.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, apiError(fmt.Sprintf("get deployment %s/%s", namespace, name), err)
	}
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	if service != "" {
		svc, err := c.client.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			return nil, nil, apiError(fmt.Sprintf("get service %s/%s", namespace, service), err)
		}
		svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		return d, svc, nil
	}
	list, err := c.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, apiError(fmt.Sprintf("list services of %s", namespace), err)
	}
	var found []*corev1.Service
	var names []string
	for i := range list.Items {
		svc := &list.Items[i]
		sel := svc.Spec.Selector
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, svc)
			names = append(names, svc.Name)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil, fmt.Errorf("no Service in namespace %s selects the pods of deployment %s: give the Service to send traffic to", namespace, name)
	case 1:
		found[0].TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		return d, found[0], nil
	}
	return nil, nil, fmt.Errorf("services %s in namespace %s all select the pods of deployment %s: name the one to send traffic to", strings.Join(names, ", "), namespace, name)
}

// HasClusterDNS reports whether the cluster's pods resolve Service names:
// whether it has Service kube-system/kube-dns, the name kubeadm's and the
// managed clusters' DNS (CoreDNS) keep. closingtime cluster has none. An
// error other than its absence (a role that may not read kube-system)
// reports true: what can't be seen is not said to be missing.
func (c *Cluster) HasClusterDNS(ctx context.Context) bool {
	_, err := c.client.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
	return !apierrors.IsNotFound(err)
}
