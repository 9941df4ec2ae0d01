// Package scenario runs rollout experiments: a scenario file says which
// workload to deploy, what traffic to send through its Service, what to do
// to it (restart a rollout, delete or evict a pod, drain a node, scale, roll
// out new environment variables, take a dependency down for a while) and
// how often; the runner does it on a cluster.Backend and turns the client's
// results, the pods' logs and the cluster's events into one timeline and the
// request and old-pod figures of docs/lab.md, with the disruption figures
// beyond them: capacity, back-offs, evictions, a drain's outcome, the recovery
// after an outage.
//
// The built-in catalog (Catalog) holds the seeds' experiments as scenario
// files embedded in the binary. Their pods run `closingtime serve` from the
// image named [Image], which a local cluster maps to the running binary.
//
// The file format is documented in docs/scenario.md.
package scenario
