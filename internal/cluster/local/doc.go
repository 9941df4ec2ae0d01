// Package local is the embedded local cluster, closingtime's default
// backend: Kubernetes' node and control-plane behaviours that decide
// whether requests fail during a rollout, emulated with real processes,
// signals and TCP, and no container runtime.
//
// [Cluster] puts the parts together behind [cluster.Backend]: an object
// store in place of the API server, the deployment and ReplicaSet
// controllers, a scheduler, the eviction API with PodDisruptionBudgets,
// and on each node a [Kubelet] and a [Proxy]. Every part records into one
// event stream stamped by one clock.
//
// The [Kubelet] runs pods as processes, each in a network of its own
// (package podnet: a network namespace on its node's bridge where the
// system allows, else an address of its own on the loopback range) and,
// where the system allows, a PID namespace of its own. It talks only
// through k8s.io/api objects — a *corev1.Pod in, its corev1.PodStatus and
// [cluster.Event]s out — so that the same kubelet can later serve as the
// node agent of a real kube-apiserver. The [Proxy] is a node's routing
// view: it takes Services and EndpointSlices, which the [Endpoints]
// controller computes, after a propagation delay, writes them into its
// node's nftables as kube-proxy does (package proxyrules) where the node
// is a network namespace, and dials Services through them.
//
// Changes move between the parts late but in order, as watches and work
// queues move them: a pod reaches its kubelet after Config.KubeletObserveDelay,
// a status reaches the store after Config.StatusPushDelay, the endpoints
// controller publishes after Config.EndpointSyncDelay (gathering a
// Service's changes over Config.EndpointBatchPeriod), and each node's proxy
// applies them after a delay of its own. The defaults are in package
// cluster; each step records its own event.
//
// The proxy routes as kube-proxy's iptables rules do: Ready endpoints,
// else serving and terminating ones; internalTrafficPolicy Local, whose
// DROP rule makes a connect time out; sessionAffinity ClientIP; REJECT
// when nothing is usable. Topology hints are not read. [Cluster.Dialer]
// dials from a given node; [Cluster.Serve] is a Service's listener for
// clients outside the cluster, a userspace proxy that turns a refused
// backend into a reset.
//
// A container without a command runs the local command its pod's
// [CommandAnnotationPrefix] annotation gives, else the one
// KubeletConfig.ImageCommands maps its image to ([ParseImageCommand]
// parses the --image-command flag). [Cluster.Close] leaves no process,
// goroutine, open file or listener behind.
//
// docs/local-cluster.md describes the cluster for its users. Every rule
// these parts follow is in docs/kubernetes.md, cited by key (T7, P5,
// B2…) next to the code that implements it.
package local
