package kube

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// kubeletComponent is the source component of the kubelet's Events, and
// their reporting controller.
const kubeletComponent = "kubelet"

// kubeletEventSelector selects, on the API server, the Events that the
// kubelet posts about pods; the API matches "source" with the reporting
// controller of an Event that has no source component.
var kubeletEventSelector = fields.Set{"involvedObject.kind": "Pod", "source": kubeletComponent}.AsSelector().String()

// kubeletEventInformer is the informer of the kubelet's Events about pods
// in namespace.
func kubeletEventInformer(namespace string) func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
	return func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredEventInformer(client, namespace, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = kubeletEventSelector })
	}
}

// kubeletEventSeen records, for the kubelet's Event e of a pod, the
// cluster event it tells once for each occurrence not seen before: the
// kubelet's recorder counts the repeats of an Event into its count (or
// series), so each increment is one occurrence. An Event of the initial
// list is only remembered, as pods of the initial list are. Events of a
// load pod are left out; a load pod gone from the cache has no probe nor
// hook, so its kubelet posts none of the Events that tell something.
func (c *Cluster) kubeletEventSeen(l listers, e *corev1.Event, initial bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, n := e.Namespace+"/"+e.Name, occurrences(e)
	seen := c.kubeletEvents[key]
	c.kubeletEvents[key] = max(n, seen)
	if initial || n <= seen {
		return
	}
	ev, ok := kubeletEvent(e)
	if !ok {
		return
	}
	if p, err := l.pods.Pods(ev.Namespace).Get(ev.Pod); err == nil {
		if _, load := p.Labels[LoadLabel]; load {
			return
		}
	}
	for range n - seen {
		c.record(ev)
	}
}

// kubeletEventGone forgets the Event e, deleted by the API (Events live
// an hour by default).
func (c *Cluster) kubeletEventGone(e *corev1.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.kubeletEvents, e.Namespace+"/"+e.Name)
}

// occurrences returns how many times the kubelet posted Event e: its
// count (core/v1 recorders), or its series' count (events.k8s.io
// recorders, whose first occurrence has no series), at least one.
func occurrences(e *corev1.Event) int32 {
	n := max(e.Count, 1)
	if e.Series != nil {
		n = max(n, e.Series.Count)
	}
	return n
}

// The reasons of the kubelet's Events that tell what the pod watch does
// not show (k8s.io/kubernetes pkg/kubelet/events).
const (
	reasonKilling           = "Killing"
	reasonUnhealthy         = "Unhealthy"
	reasonFailedPreStopHook = "FailedPreStopHook"
)

// combinedPrefix begins the message of an Event into which client-go's
// recorder folds the Events of an object that share a reason, past ten
// different messages within ten minutes (k8s.io/client-go tools/record,
// EventAggregatorByReasonMessageFunc); the rest is the message of the
// latest.
const combinedPrefix = "(combined from similar events): "

// kubeletEvent returns the cluster event, without its time, that the
// kubelet's Event e tells, or false if it tells none the pod watch does
// not show. It reads the kubelet's messages (k8s.io/kubernetes
// pkg/kubelet/kuberuntime, computePodActions and executePreStopHook;
// pkg/kubelet/prober, runProbe), which closingtime's own kubelet
// writes alike:
//
//   - Killing "Container NAME failed liveness probe, will be restarted"
//     (or startup) is a [cluster.LivenessKill] of container NAME; other
//     kills ("Stopping container NAME") show in the pod watch;
//   - Unhealthy "Readiness probe failed: OUTPUT" (Liveness, Startup; or
//     "… probe errored and resulted in STATE state: ERROR") is a
//     [cluster.ProbeFailed] with its output. The Event says nothing of the
//     failures in a row: there is no failures field;
//   - FailedPreStopHook is a [cluster.PreStopFinished] with its error: what
//     follows "PreStopHook failed: ", or the whole message where the
//     kubelet writes no more (Kubernetes keeps the hook's output out of
//     the Event).
func kubeletEvent(e *corev1.Event) (cluster.Event, bool) {
	obj := e.InvolvedObject
	if obj.Kind != "Pod" || (e.Source.Component != kubeletComponent && e.ReportingController != kubeletComponent) {
		return cluster.Event{}, false
	}
	out := cluster.Event{Namespace: e.Namespace, Pod: obj.Name, Node: e.Source.Host, Container: fieldPathContainer(obj.FieldPath)}
	msg := strings.TrimPrefix(e.Message, combinedPrefix)
	switch e.Reason {
	case reasonKilling:
		container, probe, ok := probeKill(msg)
		if !ok {
			return cluster.Event{}, false
		}
		out.Kind, out.Container, out.Fields = cluster.LivenessKill, container, map[string]string{"probe": probe}
	case reasonUnhealthy:
		probe, output, ok := probeFailure(msg)
		if !ok {
			return cluster.Event{}, false
		}
		out.Kind, out.Fields = cluster.ProbeFailed, map[string]string{"probe": probe, "output": output}
	case reasonFailedPreStopHook:
		reason, ok := strings.CutPrefix(msg, "PreStopHook failed: ")
		if !ok || reason == "" {
			reason = msg
		}
		out.Kind, out.Fields = cluster.PreStopFinished, map[string]string{"error": reason}
	default:
		return cluster.Event{}, false
	}
	return out, true
}

// fieldPathContainer returns the container that an Event's field path
// names, "spec.containers{NAME}", or "".
func fieldPathContainer(path string) string {
	_, rest, ok := strings.Cut(path, "{")
	name, closed := strings.CutSuffix(rest, "}")
	if !ok || !closed {
		return ""
	}
	return name
}

// probeKill reads the message of a kill on a failed probe, "Container
// NAME failed liveness probe, will be restarted" (startup; "Init
// container" for a sidecar; no restart under restartPolicy Never).
func probeKill(msg string) (container, probe string, ok bool) {
	rest, ok := strings.CutPrefix(msg, "Container ")
	if !ok {
		rest, ok = strings.CutPrefix(msg, "Init container ")
	}
	if !ok {
		return "", "", false
	}
	rest = strings.TrimSuffix(rest, ", will be restarted")
	for _, probe := range []string{"liveness", "startup"} {
		if name, ok := strings.CutSuffix(rest, " failed "+probe+" probe"); ok && name != "" {
			return name, probe, true
		}
	}
	return "", "", false
}

// probeFailure reads the message of a failed probe run, "Readiness probe
// failed: OUTPUT" or "Readiness probe errored and resulted in failure
// state: ERROR", and returns the probe, in lower case as in the event
// model, and the output or error.
func probeFailure(msg string) (probe, output string, ok bool) {
	word, rest, ok := strings.Cut(msg, " probe ")
	probe = strings.ToLower(word)
	if !ok || !slices.Contains([]string{"readiness", "liveness", "startup"}, probe) {
		return "", "", false
	}
	if output, ok := strings.CutPrefix(rest, "failed:"); ok {
		return probe, strings.TrimPrefix(output, " "), true
	}
	if rest, ok := strings.CutPrefix(rest, "errored and resulted in "); ok {
		if _, output, ok := strings.Cut(rest, " state: "); ok {
			return probe, output, true
		}
	}
	return "", "", false
}
