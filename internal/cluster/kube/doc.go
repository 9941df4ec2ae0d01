// Package kube is the client-go backend: it runs scenarios and rollouts on
// a real Kubernetes cluster (kind, k3s, a cloud's, or a control plane on
// loopback) through its API server.
//
// [Cluster] implements [cluster.Backend]. It finds the cluster as kubectl
// does (KUBECONFIG, an explicit kubeconfig path, a context, a namespace),
// applies manifests with server-side apply under the field manager
// [FieldManager], restarts, scales, deletes, evicts and drains as kubectl
// does, and turns what its informers see of Pods, EndpointSlices,
// ReplicaSets and Deployments into the same [cluster.Event] stream as the
// embedded cluster, where the API shows the same thing, and so the
// kubelet's Events about pods that tell a liveness kill, a failed probe
// run or a failed preStop hook. It follows the log of every container
// from its start, so that logs outlive their pods.
//
// What a real cluster does not show through its API is not invented: there
// is no pid, no preStop hook's start nor its success, no signal, no probe
// result and no per-node routing view in the events, and
// [Cluster.DialContext] refuses, because a client outside the cluster
// cannot reach a Service the way a pod does (through kube-proxy). That
// traffic comes from inside the cluster:
// [LoadPods] runs `closingtime load` in pods and merges what their logs
// hand back. docs/kube.md maps each event kind to the API change it comes
// from, and describes the load pods and the permissions.
package kube
