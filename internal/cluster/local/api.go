package local

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiHistory is how many changes the API keeps for watches that resume
// from a resource version; one older than the oldest kept is answered
// 410 Gone, and the client lists again, as from an API server whose watch
// cache has moved on.
const apiHistory = 4096

// apiBookmarkPeriod is how often a watch that allows bookmarks gets one:
// an API server sends them about once a minute.
const apiBookmarkPeriod = time.Minute

// apiWatchTimeout bounds a watch whose client gave no timeoutSeconds.
const apiWatchTimeout = 30 * time.Minute

// An apiResource is one kind of object the pods' API serves.
type apiResource struct {
	group, version, plural, kind string
}

// The resources the pods' API serves: what a process in a pod watches to
// route to a Service's pods itself, as an ingress controller does, and
// what `closingtime load` reads to resolve Services' names.
var (
	servicesResource       = apiResource{"", "v1", "services", "Service"}
	endpointSlicesResource = apiResource{discoveryv1.GroupName, "v1", "endpointslices", "EndpointSlice"}
)

// apiVersion is the resource's apiVersion field.
func (r apiResource) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// An apiEvent is one change of an object, at resource version rv.
type apiEvent struct {
	rv       uint64
	resource apiResource
	typ      watch.EventType
	obj      metav1.Object
}

// API serves the cluster's Services and EndpointSlices to its pods,
// read-only, in the Kubernetes API's own paths and JSON: get, list and
// watch (resourceVersion, labelSelector, timeoutSeconds, bookmarks and
// sendInitialEvents as a real API server takes them), so that a pod's
// client-go informer runs against it unchanged. It is what a pod's
// process watches to route to a Service's pods itself, as an ingress
// controller does; the kubeconfig it writes names it, and the cluster
// gives its path to every container (cluster.PodKubeconfigEnv). It keeps
// objects as the endpoints controller publishes them, after its sync
// delay: a watcher sees what a real API server would hold.
type API struct {
	ln         net.Listener
	hs         *http.Server
	kubeconfig string
	dir        string

	mu      sync.Mutex
	rv      uint64
	objects map[apiResource]map[string]metav1.Object // by namespace/name
	history []apiEvent                               // the latest apiHistory changes, in order
	changed chan struct{}                            // closed and replaced at every change
}

// newAPI serves the API on ln and writes its kubeconfig in a new
// temporary directory; close stops both.
func newAPI(ln net.Listener) (*API, error) {
	a := &API{ln: ln, objects: map[apiResource]map[string]metav1.Object{servicesResource: {}, endpointSlicesResource: {}},
		changed: make(chan struct{})}
	dir, err := os.MkdirTemp("", "closingtime-api-")
	if err != nil {
		return nil, fmt.Errorf("the pods' API: %w", err)
	}
	a.dir, a.kubeconfig = dir, filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: "http://" + ln.Addr().String()}
	cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod", Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, a.kubeconfig); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the pods' API: %w", err)
	}
	mux := http.NewServeMux()
	for _, r := range []apiResource{servicesResource, endpointSlicesResource} {
		prefix := "/api/" + r.version
		if r.group != "" {
			prefix = "/apis/" + r.group + "/" + r.version
		}
		mux.HandleFunc("GET "+prefix+"/"+r.plural, a.handle(r))
		mux.HandleFunc("GET "+prefix+"/namespaces/{namespace}/"+r.plural, a.handle(r))
		mux.HandleFunc("GET "+prefix+"/namespaces/{namespace}/"+r.plural+"/{name}", a.handle(r))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusNotFound
		if r.Method != http.MethodGet {
			status = http.StatusMethodNotAllowed
		}
		writeStatus(w, status, fmt.Sprintf("%s %s: this API serves only GET of services and endpointslices", r.Method, r.URL.Path))
	})
	a.hs = &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go a.hs.Serve(ln)
	return a, nil
}

// Kubeconfig returns the path of the kubeconfig that names the API, which
// exists until the cluster is closed.
func (a *API) Kubeconfig() string { return a.kubeconfig }

// close stops serving, ends every watch and removes the kubeconfig.
func (a *API) close() {
	a.hs.Close()
	os.RemoveAll(a.dir)
}

// setService records svc, as Apply stores it.
func (a *API) setService(svc *corev1.Service) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setLocked(servicesResource, svc.DeepCopy())
}

// Publish records the EndpointSlices of svc, as the endpoints controller
// publishes them: those of svc that slices no longer holds are deleted.
func (a *API) Publish(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := map[string]bool{}
	for _, s := range slices {
		names[s.Name] = true
		a.setLocked(endpointSlicesResource, s.DeepCopy())
	}
	for key, obj := range a.objects[endpointSlicesResource] {
		if obj.GetNamespace() == svc.Namespace && obj.GetLabels()[discoveryv1.LabelServiceName] == svc.Name && !names[obj.GetName()] {
			delete(a.objects[endpointSlicesResource], key)
			// A copy: the change that added obj keeps its version.
			a.recordLocked(endpointSlicesResource, watch.Deleted, obj.(*discoveryv1.EndpointSlice).DeepCopy())
		}
	}
}

// setLocked stores obj as the latest version of its object, if it
// differs from the one stored.
func (a *API) setLocked(r apiResource, obj metav1.Object) {
	key := obj.GetNamespace() + "/" + obj.GetName()
	prev, ok := a.objects[r][key]
	typ := watch.Added
	if ok {
		obj.SetResourceVersion(prev.GetResourceVersion())
		obj.SetUID(prev.GetUID())
		obj.SetCreationTimestamp(prev.GetCreationTimestamp())
		if equalJSON(prev, obj) {
			return
		}
		typ = watch.Modified
	}
	a.recordLocked(r, typ, obj)
	a.objects[r][key] = obj
}

// recordLocked gives obj the next resource version and keeps the change.
func (a *API) recordLocked(r apiResource, typ watch.EventType, obj metav1.Object) {
	a.rv++
	if created := obj.GetCreationTimestamp(); typ == watch.Added && created.IsZero() {
		obj.SetCreationTimestamp(metav1.Now())
	}
	obj.SetResourceVersion(strconv.FormatUint(a.rv, 10))
	a.history = append(a.history, apiEvent{rv: a.rv, resource: r, typ: typ, obj: obj})
	if len(a.history) > apiHistory {
		a.history = slices.Delete(a.history, 0, len(a.history)-apiHistory)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// equalJSON reports whether a and b encode alike.
func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// handle serves get, list and watch of r.
func (a *API) handle(r apiResource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ns, name := req.PathValue("namespace"), req.PathValue("name")
		q := req.URL.Query()
		selector, err := labels.Parse(q.Get("labelSelector"))
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "labelSelector: "+err.Error())
			return
		}
		if q.Get("fieldSelector") != "" {
			writeStatus(w, http.StatusBadRequest, "fieldSelector: this API takes label selectors only")
			return
		}
		match := func(obj metav1.Object) bool {
			return (ns == "" || obj.GetNamespace() == ns) && (name == "" || obj.GetName() == name) && selector.Matches(labels.Set(obj.GetLabels()))
		}
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			a.watch(w, req, r, match)
		case name != "":
			a.mu.Lock()
			obj, ok := a.objects[r][ns+"/"+name]
			a.mu.Unlock()
			if !ok {
				writeStatus(w, http.StatusNotFound, fmt.Sprintf("%s %q not found", r.plural, name))
				return
			}
			writeJSON(w, typed(r, obj))
		default:
			a.mu.Lock()
			items, rv := a.listLocked(r, match), a.rv
			a.mu.Unlock()
			list := map[string]any{"kind": r.kind + "List", "apiVersion": r.apiVersion(),
				"metadata": metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}, "items": items}
			writeJSON(w, list)
		}
	}
}

// listLocked returns r's objects that match, in the order of their keys,
// with their TypeMeta.
func (a *API) listLocked(r apiResource, match func(metav1.Object) bool) []any {
	items := []any{}
	for _, obj := range sortedValues(a.objects[r]) {
		if match(obj) {
			items = append(items, typed(r, obj))
		}
	}
	return items
}

// watch streams the changes of r's objects that match, from the
// request's resourceVersion on, as a real API server's watch does: with
// none (or "0"), or with sendInitialEvents=true, first every object as
// ADDED (then, with sendInitialEvents, the bookmark that ends them); a
// version older than the history kept is answered with an ERROR event of
// 410 Gone. It ends after timeoutSeconds, or when the client leaves.
func (a *API) watch(w http.ResponseWriter, req *http.Request, r apiResource, match func(metav1.Object) bool) {
	q := req.URL.Query()
	timeout := apiWatchTimeout
	if s := q.Get("timeoutSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeStatus(w, http.StatusBadRequest, "timeoutSeconds: want a whole number of seconds")
			return
		}
		timeout = time.Duration(n) * time.Second
	}
	rvText, initial := q.Get("resourceVersion"), q.Get("sendInitialEvents") == "true"
	var from uint64
	if rvText != "" && rvText != "0" {
		n, err := strconv.ParseUint(rvText, 10, 64)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "resourceVersion: "+err.Error())
			return
		}
		from = n
	} else {
		initial = true
	}
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	// The client's watch begins with the response's header.
	http.NewResponseController(w).Flush()
	enc := json.NewEncoder(w)
	send := func(typ watch.EventType, obj any) bool {
		if enc.Encode(map[string]any{"type": typ, "object": obj}) != nil {
			return false
		}
		http.NewResponseController(w).Flush()
		return true
	}
	a.mu.Lock()
	if initial {
		items, rv := a.listLocked(r, match), a.rv
		a.mu.Unlock()
		for _, item := range items {
			if !send(watch.Added, item) {
				return
			}
		}
		if q.Get("sendInitialEvents") == "true" {
			bookmark := map[string]any{"kind": r.kind, "apiVersion": r.apiVersion(), "metadata": metav1.ObjectMeta{
				ResourceVersion: strconv.FormatUint(rv, 10), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
			if !send(watch.Bookmark, bookmark) {
				return
			}
		}
		from = rv
		a.mu.Lock()
	}
	// With bookmarks, one a while, as an API server sends them, so that a
	// watcher of quiet objects resumes from a version still in the
	// history.
	var bookmarks <-chan time.Time
	if q.Get("allowWatchBookmarks") == "true" {
		t := time.NewTicker(apiBookmarkPeriod)
		defer t.Stop()
		bookmarks = t.C
	}
	for {
		if len(a.history) > 0 && from+1 < a.history[0].rv {
			oldest := a.history[0].rv - 1
			a.mu.Unlock()
			send(watch.Error, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: fmt.Sprintf("too old resource version: %d (%d)", from, oldest)})
			return
		}
		i, _ := slices.BinarySearchFunc(a.history, from+1, func(e apiEvent, rv uint64) int { return compareUint(e.rv, rv) })
		events := slices.Clone(a.history[i:])
		changed := a.changed
		a.mu.Unlock()
		for _, e := range events {
			from = e.rv
			if e.resource == r && match(e.obj) && !send(e.typ, typed(r, e.obj)) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-bookmarks:
			// At the last change sent or passed over: every change up to
			// it is the watcher's.
			bookmark := map[string]any{"kind": r.kind, "apiVersion": r.apiVersion(), "metadata": metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(from, 10)}}
			if !send(watch.Bookmark, bookmark) {
				return
			}
		}
		a.mu.Lock()
	}
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// typed returns obj with r's kind and apiVersion, as the API sends it.
func typed(r apiResource, obj metav1.Object) any {
	tm := metav1.TypeMeta{Kind: r.kind, APIVersion: r.apiVersion()}
	switch o := obj.(type) {
	case *corev1.Service:
		c := *o
		c.TypeMeta = tm
		return &c
	case *discoveryv1.EndpointSlice:
		c := *o
		c.TypeMeta = tm
		return &c
	}
	panic(fmt.Sprintf("local: the API holds a %T", obj))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// writeStatus answers with a Status object, as the API server's errors
// are.
func writeStatus(w http.ResponseWriter, code int, message string) {
	reason := metav1.StatusReasonBadRequest
	switch code {
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusMethodNotAllowed:
		reason = metav1.StatusReasonMethodNotAllowed
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message})
}
