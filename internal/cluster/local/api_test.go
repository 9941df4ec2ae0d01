package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// startAPI serves a pods' API on the loopback interface for the test's
// length.
func startAPI(t *testing.T) *API {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAPI(ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.close()
		if _, err := os.Stat(a.Kubeconfig()); !os.IsNotExist(err) {
			t.Errorf("the kubeconfig is left after close: %v", err)
		}
	})
	return a
}

// slice returns an EndpointSlice of Service web named name, with an
// endpoint per address, each ready if ready.
func slice(name string, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(!ready)}})
	}
	return s
}

// TestAPIInformer: client-go's informers, unchanged, follow the pods' API
// through additions, changes and deletions of EndpointSlices, with their
// label selector, and read a Service by name.
func TestAPIInformer(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	a.setService(svc)
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, "10.244.1.2", "10.244.2.2")})
	// Another Service's slice, which the selector leaves out.
	other := slice("db-0", true, "10.244.1.9")
	other.Labels[discoveryv1.LabelServiceName] = "db"
	a.Publish(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}}, []*discoveryv1.EndpointSlice{other})

	rest, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rest)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	got, err := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || got.Spec.Ports[0].Port != 80 {
		t.Fatalf("get Service web: %v, %v", got, err)
	}
	if _, err := client.CoreV1().Services("default").Get(ctx, "none", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a Service that does not exist: %v, want NotFound", err)
	}
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("create a Service: %v, want MethodNotAllowed", err)
	}

	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "web"}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	lister := factory.Discovery().V1().EndpointSlices().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			t.Fatalf("%v: not synced", typ)
		}
	}
	// readyOf returns the ready addresses of the informer's slices.
	readyOf := func() []string {
		list, _ := lister.List(labels.Everything())
		var out []string
		for _, s := range list {
			if s.Labels[discoveryv1.LabelServiceName] != "web" {
				t.Fatalf("the informer holds %s, which its selector leaves out", s.Name)
			}
			for _, e := range s.Endpoints {
				if *e.Conditions.Ready {
					out = append(out, s.Name+"="+e.Addresses[0])
				}
			}
		}
		return out
	}
	waitFor := func(what string, want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, waitLimit, true, func(context.Context) (bool, error) {
			return strings.Join(readyOf(), ",") == want, nil
		})
		if err != nil {
			t.Fatalf("%s: ready %v, want %s", what, readyOf(), want)
		}
	}
	waitFor("listed", "web-0=10.244.1.2,web-0=10.244.2.2")
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", false, "10.244.1.2"), slice("web-1", true, "10.244.2.3")})
	waitFor("changed and added", "web-1=10.244.2.3")
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, "10.244.1.4")})
	waitFor("deleted", "web-0=10.244.1.4")
}

// TestAPIWatch: a watch resumes after the resource version it is given,
// sends bookmarks that end the initial events when asked for them, and
// answers a version older than its history with 410 Gone.
func TestAPIWatch(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, "10.244.1.2")}) // version 1
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, "10.244.1.3")}) // version 2
	a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, "10.244.1.3")}) // no change
	host := strings.TrimPrefix(mustServer(t, a), "http://")

	// events reads a watch's first n events.
	events := func(query string, n int) []map[string]any {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://%s/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=true&timeoutSeconds=5&%s", host, query))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []map[string]any
		sc := bufio.NewScanner(resp.Body)
		for len(out) < n && sc.Scan() {
			var e map[string]any
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("event %q: %v", sc.Text(), err)
			}
			out = append(out, e)
		}
		return out
	}
	// rv returns an event's object's resource version.
	rv := func(e map[string]any) string {
		return e["object"].(map[string]any)["metadata"].(map[string]any)["resourceVersion"].(string)
	}

	if got := events("resourceVersion=1", 1); len(got) != 1 || got[0]["type"] != "MODIFIED" || rv(got[0]) != "2" {
		t.Errorf("watch from version 1: %v, want the MODIFIED of version 2", got)
	}
	got := events("sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", 2)
	if len(got) != 2 || got[0]["type"] != "ADDED" || rv(got[0]) != "2" || got[1]["type"] != "BOOKMARK" || rv(got[1]) != "2" {
		t.Fatalf("watch with initial events: %v, want ADDED then BOOKMARK at version 2", got)
	}
	if ann := got[1]["object"].(map[string]any)["metadata"].(map[string]any)["annotations"]; ann.(map[string]any)[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark annotations %v, want %s", ann, metav1.InitialEventsAnnotationKey)
	}

	for i := range apiHistory {
		a.Publish(svc, []*discoveryv1.EndpointSlice{slice("web-0", true, fmt.Sprintf("10.244.%d.%d", 2+i/250, i%250))})
	}
	got = events("resourceVersion=1", 1)
	if len(got) != 1 || got[0]["type"] != "ERROR" || got[0]["object"].(map[string]any)["code"] != float64(http.StatusGone) {
		t.Errorf("watch from a version past the history: %v, want an ERROR of 410", got)
	}
}

// mustServer returns the server URL of a's kubeconfig.
func mustServer(t *testing.T, a *API) string {
	t.Helper()
	rest, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return rest.Host
}
