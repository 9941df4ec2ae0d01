// Package nodeagent runs the nodes of a real Kubernetes control plane
// (etcd, kube-apiserver, kube-controller-manager) on one machine, with
// pods as local processes: each node is closingtime's own kubelet,
// local.Kubelet, the one that the embedded cluster runs, driven through
// client-go as the kubelet is driven by the API server.
//
// An [Agent] is one node. It registers a Node, Ready, renews its Lease in
// kube-node-lease, watches the pods bound to it, hands each version to the
// kubelet, pushes every status change to the pod's status subresource,
// posts the kubelet's Events, and deletes a terminated pod whose deletion
// was requested (docs/kubernetes.md T16; comments here cite that page's
// rules by key). The containers, probes, restarts, back-off, preStop
// hooks, signals and grace periods are the kubelet's, unchanged.
//
// A [Scheduler] binds pods to nodes. closingtime binds them itself rather
// than building and running kube-scheduler: that is no extra program to
// build from the module proxy and start, and the placement rule is the
// embedded cluster's (cluster.ScheduleNode, the schedulable node with the
// fewest pods), so that when `lab --compare` runs a scenario on both
// clusters, their differences come from the controllers and the kubelet,
// never from where the pods were placed. [StartNodes] starts a scheduler
// and N agents, as the embedded cluster has N nodes.
//
// [Nodes] gives the pods the embedded cluster's network: where the system
// allows, a network namespace per pod on its node's bridge (package
// podnet), each node's routing view ([Routes]), fed by the API server's
// EndpointSlices as a node's kube-proxy is, written into the node's
// nftables as kube-proxy's nftables mode writes it, and a relay to the API
// server for the pods ([cluster.PodKubeconfigEnv]), whose `closingtime load`
// resolves Services' names with a [Resolver]. On the loopback model, where
// the system allows no namespaces, a process in a pod routes through a view
// of its own instead, [Routes.DialFromPod], which finds its node in the
// variables of [RoutingEnv].
//
// The control plane runs no node lifecycle controller: a node whose agent
// stopped keeps its last status, Ready included, and its pods, until it is
// deleted.
package nodeagent
