package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/results"
)

// Defaults of a zero [PropagationConfig].
const (
	// DefaultPropagationPods is how many pods are deleted, one by one.
	DefaultPropagationPods = 3
	// DefaultPropagationWindow is how long a deleted pod keeps serving
	// (its preStop sleep): the longest propagation that can be measured.
	DefaultPropagationWindow = 10 * time.Second
	// DefaultPropagationRate is the rate of new connections, in requests
	// per second: its inverse is the measurement's resolution.
	DefaultPropagationRate = 100.0
	// DefaultPropagationMargin is added to the longest propagation seen
	// to recommend a preStop delay.
	DefaultPropagationMargin = time.Second
)

// PropagationConfig configures [PropagationScenario] and
// [MeasurePropagation]. Its zero value uses the defaults.
type PropagationConfig struct {
	// Pods is how many pods are deleted, one by one, each after the
	// previous one's replacement is ready and the pod is gone; zero means
	// DefaultPropagationPods.
	Pods int
	// Window is the preStop sleep of the measured pods: a deleted pod
	// serves every request that still reaches it for that long, so the
	// propagations up to Window are measured. Whole seconds; zero means
	// DefaultPropagationWindow.
	Window time.Duration
	// Rate is the rate of the new-connection client; zero means
	// DefaultPropagationRate.
	Rate float64
	// Margin is added to the longest propagation seen to recommend a
	// preStop delay; zero means DefaultPropagationMargin.
	Margin time.Duration
}

func (c PropagationConfig) withDefaults() PropagationConfig {
	c.Pods = cmp.Or(c.Pods, DefaultPropagationPods)
	c.Window = cmp.Or(c.Window, DefaultPropagationWindow)
	c.Rate = cmp.Or(c.Rate, DefaultPropagationRate)
	c.Margin = cmp.Or(c.Margin, DefaultPropagationMargin)
	return c
}

// propagationManifest is the scenario of a measurement: three pods of the
// lab server that answer at once and keep serving through a preStop sleep
// of the window, behind a Service, under new connections at the rate (a
// kept-alive connection stays on its pod whatever the endpoints say), one
// pod deleted per repetition. Its numbers are filled in by
// PropagationScenario.
const propagationManifest = `name: propagation
description: "Endpoint propagation: from a pod's deletion to the last request that reaches it"
workload:
  manifest: |
    apiVersion: v1
    kind: Service
    metadata:
      name: propagation
    spec:
      selector:
        app: closingtime-propagation
      ports:
      - name: http
        port: 80
        targetPort: http
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: propagation
    spec:
      replicas: 3
      selector:
        matchLabels:
          app: closingtime-propagation
      template:
        metadata:
          labels:
            app: closingtime-propagation
        spec:
          terminationGracePeriodSeconds: %d
          containers:
          - name: serve
            image: closingtime
            args: [serve]
            ports:
            - name: http
              containerPort: 8080
            env:
            - name: SHUTDOWN_MODE
              value: "graceful"
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            readinessProbe:
              httpGet:
                path: /ready
                port: http
              periodSeconds: 1
            lifecycle:
              preStop:
                sleep:
                  seconds: %d
traffic:
  clients:
  - kind: new-conn
    rate: %g
action:
  kind: delete-pod
repetitions: %d
warmUp: 2s
after: 1s
settle: 2s
`

// PropagationScenario returns the scenario that measures a cluster's
// endpoint propagation as seed 001 advises: pods of the lab server whose
// preStop sleeps cfg.Window, so that a deleted pod keeps answering while
// the cluster takes it out of its Service's routing, and a pod deleted in
// each repetition. [MeasurePropagation] reads the result.
func PropagationScenario(cfg PropagationConfig) (*Scenario, error) {
	cfg = cfg.withDefaults()
	if cfg.Window%time.Second != 0 {
		return nil, fmt.Errorf("propagation: window %v: want whole seconds", cfg.Window)
	}
	window := int(cfg.Window / time.Second)
	// The grace period covers the window and the server's own drain.
	data := fmt.Sprintf(propagationManifest, window+5, window, cfg.Rate, cfg.Pods)
	return Parse("propagation", []byte(data), nil)
}

// Propagation is what a propagation measurement found.
type Propagation struct {
	// Pods has one entry per deleted pod, in the order of the deletions.
	Pods []PodPropagation `json:"pods"`
	// MaxMS is the longest propagation, in milliseconds.
	MaxMS float64 `json:"maxMs"`
	// WindowMS is the preStop sleep of the measured pods: a propagation
	// that reaches it was cut short and is at least that long.
	WindowMS float64 `json:"windowMs"`
	// MarginMS is the margin added to MaxMS.
	MarginMS float64 `json:"marginMs"`
	// PreStopSeconds is the recommended preStop delay: MaxMS plus
	// MarginMS, rounded up to whole seconds, as lifecycle.preStop.sleep
	// takes them.
	PreStopSeconds int `json:"preStopSeconds"`
	// Saturated reports that a pod still got requests at the end of the
	// window: the propagation is longer than the window can measure.
	Saturated bool `json:"saturated"`
}

// PodPropagation is the propagation seen for one deleted pod.
type PodPropagation struct {
	Pod string `json:"pod"`
	// DeletedMS and LastRequestMS are when the pod was deleted and when
	// the last request that it answered reached it, from the start of its
	// repetition's action.
	DeletedMS     float64 `json:"deletedMs"`
	LastRequestMS float64 `json:"lastRequestMs"`
	// PropagationMS is LastRequestMS minus DeletedMS.
	PropagationMS float64 `json:"propagationMs"`
}

// saturationSlack is how close to the end of the window a last request
// must come to count as cut short.
const saturationSlack = 500 * time.Millisecond

// MeasurePropagation reads the result of a PropagationScenario run with
// cfg: for each deleted pod, the time from its deletion to the last
// request that reached it, and the preStop delay to recommend. A deleted
// pod that answered no request after its deletion (the traffic left it
// before the deletion was seen) counts 0; one that answered none at all
// is an error: the traffic never reached it.
func MeasurePropagation(res *results.Result, cfg PropagationConfig) (*Propagation, error) {
	cfg = cfg.withDefaults()
	p := &Propagation{WindowMS: ms(cfg.Window), MarginMS: ms(cfg.Margin)}
	for _, run := range res.Runs {
		deleted := ""
		var at float64
		for _, e := range run.Timeline {
			if e.Source == results.SourceCluster && e.Kind == string(cluster.PodDeleted) && e.AtMS >= 0 {
				deleted, at = e.Pod, e.AtMS
				break
			}
		}
		if deleted == "" {
			return nil, fmt.Errorf("propagation: repetition %d deleted no pod", run.Repetition)
		}
		i := slices.IndexFunc(run.OldPods, func(o results.OldPod) bool { return o.Name == deleted })
		if i < 0 || run.OldPods[i].LastRequestMS == nil {
			return nil, fmt.Errorf("propagation: repetition %d: pod %s answered no request: did the traffic reach it?", run.Repetition, deleted)
		}
		last := *run.OldPods[i].LastRequestMS
		pp := PodPropagation{Pod: deleted, DeletedMS: at, LastRequestMS: last, PropagationMS: math.Max(0, last-at)}
		p.Pods = append(p.Pods, pp)
		p.MaxMS = math.Max(p.MaxMS, pp.PropagationMS)
		if pp.PropagationMS >= p.WindowMS-ms(saturationSlack) {
			p.Saturated = true
		}
	}
	if len(p.Pods) == 0 {
		return nil, errors.New("propagation: no repetition")
	}
	p.PreStopSeconds = int(math.Ceil((p.MaxMS + p.MarginMS) / 1000))
	return p, nil
}
