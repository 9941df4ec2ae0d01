// Package local is the embedded local cluster, closingtime's default
// backend: Kubernetes' node and control-plane behaviours that decide
// whether requests fail during a rollout, emulated with real processes,
// signals and loopback TCP, and no container runtime.
//
// [Cluster] puts the parts together behind [cluster.Backend]: an object
// store in place of the API server, the deployment and ReplicaSet
// controllers, a scheduler, the eviction API with PodDisruptionBudgets,
// and on each node a [Kubelet] and a [Proxy]. Every part records into one
// event stream stamped by one clock.
//
// The [Kubelet] runs pods as processes, each with an address of its own on
// the loopback range and, where the system allows, a PID namespace of its
// own. It talks only through k8s.io/api objects — a *corev1.Pod in, its
// corev1.PodStatus and [cluster.Event]s out — so that the same kubelet can
// later serve as the node agent of a real kube-apiserver. The [Proxy] is a
// node's routing view: it takes Services and EndpointSlices, which the
// [Endpoints] controller computes, after a propagation delay, and dials
// Services as iptables DNAT does.
//
// Every rule these follow is in spec/k8s-semantics.md, cited by key (T7,
// P5, B2…) next to the code that implements it.
package local
