// Package cluster defines the backend interface and the event model shared by
// the local and kube backends, and Kubernetes' defaults, each with its source.
//
// A default that Kubernetes applies to an object it admits (a grace period, a
// rollout's surge) has one home here, so that the embedded cluster, the kube
// backend and the linter read the same value. Each constant and function names
// the upstream file that defines the behaviour it reproduces.
package cluster
