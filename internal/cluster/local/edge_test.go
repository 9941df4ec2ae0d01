package local

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestEdgeInCluster: `closingtime proxy --role edge` in a pod of the
// cluster watches its Service's EndpointSlices through the pods' API
// (cluster.PodKubeconfigEnv) and routes to the pods' own addresses; a
// terminating pod, still serving in its preStop sleep, gets requests from
// the edge for the edge's update delay after the endpoints controller
// took it out, and none once the edge has applied the change.
func TestEdgeInCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout of pods behind an edge")
	}
	t.Parallel()
	const updateDelay = 2 * time.Second
	c := startCluster(t, Config{MinPropagationDelay: 50 * time.Millisecond, MaxPropagationDelay: 50 * time.Millisecond,
		EndpointSyncDelay: 100 * time.Millisecond})
	web, webSvc := webDeployment(2, 30)
	app := &web.Spec.Template.Spec.Containers[0]
	app.ReadinessProbe = httpProbe("/ready", 1)
	// The pod serves on through its preStop sleep, whoever still sends.
	app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "8"}}}}

	edge, edgeSvc := web.DeepCopy(), webSvc.DeepCopy()
	edge.Name, edgeSvc.Name = "edge", "edge"
	labels := map[string]string{"app": "edge"}
	edge.Spec.Replicas = new(int32)
	*edge.Spec.Replicas = 1
	edge.Spec.Selector.MatchLabels, edge.Spec.Template.Labels, edgeSvc.Spec.Selector = labels, labels, labels
	proxy := &edge.Spec.Template.Spec.Containers[0]
	proxy.Command = []string{binary, "proxy", "--role=edge", "--service=default/web", "--port=http", "--update-delay=" + updateDelay.String(),
		"--listen=$(POD_IP):8080", "--admin=none", "--access-log", "--keepalive=0"}
	proxy.Args, proxy.ReadinessProbe, proxy.Lifecycle = nil, nil, nil

	ctx, cancel := context.WithTimeout(context.Background(), 4*waitLimit)
	defer cancel()
	rollout(t, c, []runtime.Object{web, webSvc, edge, edgeSvc}, 0)
	if _, err := c.RolloutStatus(ctx, "default", "edge"); err != nil {
		t.Fatal(err)
	}
	var edgePod, victim *corev1.Pod
	for _, p := range activePods(c) {
		if p.Labels["app"] == "edge" {
			edgePod = p
		} else {
			victim = p
		}
	}
	// edgeLog returns the edge's "endpoints" log lines.
	edgeLog := func() []cluster.LogLine {
		logs, err := c.Logs(ctx, "default", edgePod.Name, "app")
		if err != nil {
			t.Fatal(err)
		}
		var out []cluster.LogLine
		for _, l := range logs {
			if strings.Contains(l.Text, `"event":"endpoints"`) {
				out = append(out, l)
			}
		}
		return out
	}
	// Until the edge routes to both pods.
	for {
		if l := edgeLog(); len(l) > 0 && strings.Count(l[len(l)-1].Text, "web-") == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the edge never routed to both pods: %v", edgeLog())
		case <-time.After(50 * time.Millisecond):
		}
	}

	// A request every 20 ms through the edge's Service, until stop.
	type served struct {
		at  time.Time
		pod string
	}
	var (
		mu     sync.Mutex
		got    []served
		failed []string
	)
	stop := getEvery(c, "http://edge.default:80/work", 20*time.Millisecond, func(at time.Time, resp *http.Response, _ []byte, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		if resp.StatusCode != http.StatusOK {
			failed = append(failed, resp.Status+" via "+resp.Header.Get("X-Upstream-Addr"))
		}
		got = append(got, served{at, resp.Header.Get("X-Pod-Name")})
	})
	time.Sleep(time.Second)
	deleted := time.Now()
	if err := c.DeletePod(ctx, "default", victim.Name, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(updateDelay + 3*time.Second)
	stop()

	// When the endpoints controller took the victim out, and when the
	// edge applied it.
	var published, applied time.Time
	for _, e := range c.EventLog().Events() {
		if e.Kind == cluster.EndpointsPublished && e.Object == "Service/default/web" && e.Time.After(deleted) && published.IsZero() {
			published = e.Time
		}
	}
	logs := edgeLog()
	for _, l := range logs {
		if !strings.Contains(l.Text, victim.Name) && l.Time.After(deleted) {
			applied = l.Time
			break
		}
	}
	if published.IsZero() || applied.IsZero() {
		t.Fatalf("the endpoints controller published at %v, the edge applied at %v: want both after the deletion; edge log: %v", published, applied, logs)
	}
	if d := applied.Sub(published); d < updateDelay-100*time.Millisecond {
		t.Errorf("the edge applied the change %v after its publication, before its update delay %v", d, updateDelay)
	}
	var last time.Time
	for _, s := range got {
		if s.pod == victim.Name {
			last = s.at
		}
	}
	if last.Before(published.Add(updateDelay / 2)) {
		t.Errorf("the terminating pod's last request through the edge was sent %v after the publication, want it to get them for about the update delay %v",
			last.Sub(published), updateDelay)
	}
	// A request sent after the edge applied the change goes elsewhere;
	// one sent just before may still be on its way.
	if last.After(applied.Add(200 * time.Millisecond)) {
		t.Errorf("the terminating pod got a request sent %v after the edge applied its removal", last.Sub(applied))
	}
	if len(failed) > 0 {
		t.Errorf("%d requests failed through the edge, want none (the pod serves through its preStop): %v", len(failed), failed)
	}
}

// getEvery sends a GET of url through c's dialer every period, each on a
// new connection and in a goroutine of its own, and gives handle, which
// may be called concurrently, the time it was sent, the response and its
// body's first 512 bytes, or the error. The returned function stops it
// and returns once every request has been handled.
func getEvery(c *Cluster, url string, period time.Duration, handle func(at time.Time, resp *http.Response, body []byte, err error)) (stop func()) {
	client := &http.Client{Transport: &http.Transport{DialContext: c.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-tick.C:
			}
			wg.Go(func() {
				at := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					handle(at, nil, nil, err)
					return
				}
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				handle(at, resp, body, nil)
			})
		}
	})
	return func() {
		close(stopped)
		wg.Wait()
	}
}
