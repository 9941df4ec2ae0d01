// Package controlplane builds and runs a real Kubernetes control plane on
// loopback, for tests of the kube backend against a real API server: etcd
// EtcdVersion, kube-apiserver and kube-controller-manager
// KubernetesVersion, built from the Go module proxy with the go command
// ([Build], cached per user), started on free ports with certificates made
// in Go ([Start]), and stopped with [ControlPlane.Stop].
//
// It has no scheduler, no kubelet and no kube-proxy. The controllers that
// decide a rollout run for real (Deployments, ReplicaSets, EndpointSlices,
// PodDisruptionBudgets, with the eviction API), while the parts of a node
// are the client's to play: binding pods and reporting their status.
package controlplane
