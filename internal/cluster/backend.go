package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// Backend is a Kubernetes cluster that a rollout runs against: the embedded
// local cluster (package local) or a real one (package kube). A Backend is
// safe for concurrent use. Methods that change the cluster return once the
// change is accepted, as the API server's answer would; what follows from
// it (pods starting, terminating, endpoints moving) shows up in Events.
//
// Namespaces are never empty: callers resolve the default namespace.
// Methods that name a missing object return an error that wraps
// [ErrNotFound].
type Backend interface {
	// Apply creates the objects, or updates the ones that exist (server-side
	// apply semantics: the given object replaces the stored spec).
	// Deployments, Services and PodDisruptionBudgets are supported by every
	// backend; an object of another kind is an error that names it, and
	// nothing is applied then.
	Apply(ctx context.Context, objects []runtime.Object) error

	// RolloutRestart restarts Deployment name as `kubectl rollout restart`
	// does: it sets the pod template's kubectl.kubernetes.io/restartedAt
	// annotation to the current time, which starts a rollout.
	RolloutRestart(ctx context.Context, namespace, name string) error

	// Scale sets Deployment name's spec.replicas.
	Scale(ctx context.Context, namespace, name string, replicas int32) error

	// RolloutStatus waits for Deployment name's current rollout and returns
	// its two moments: when it completed (the new ReplicaSet available, the
	// old ones scaled to zero) and when the last old pod was gone. If ctx
	// ends first, it returns what it has seen so far and ctx.Err(). Like
	// `kubectl rollout status`, it fails with what it has seen when the
	// Deployment's Progressing condition says the rollout exceeded its
	// progressDeadlineSeconds (reason ProgressDeadlineExceeded).
	RolloutStatus(ctx context.Context, namespace, name string) (RolloutStatus, error)

	// DeletePod deletes pod name as the API's DELETE does, with
	// gracePeriodSeconds overriding the pod's terminationGracePeriodSeconds
	// when it is not nil. It ignores PodDisruptionBudgets. It returns when
	// the deletion is recorded, not when the pod is gone.
	DeletePod(ctx context.Context, namespace, name string, gracePeriodSeconds *int64) error

	// Evict asks the eviction API to evict pod name. When a
	// PodDisruptionBudget forbids it, the error is an [*EvictionError] with
	// the API's status (429 Too Many Requests) and nothing is deleted.
	Evict(ctx context.Context, namespace, name string) error

	// Cordon marks node unschedulable (true) or schedulable again (false).
	Cordon(ctx context.Context, node string, unschedulable bool) error

	// Drain cordons node and evicts its pods as `kubectl drain` does: it
	// retries an eviction refused by a budget every opts.RetryDelay and
	// waits for the pods to be gone. It returns when they are, or an error
	// when opts.Timeout or ctx ends first; the node stays cordoned either
	// way.
	Drain(ctx context.Context, node string, opts DrainOptions) error

	// Events sends every event of the cluster, from the first one recorded,
	// in order, on the returned channel until ctx ends; the channel is
	// closed then. The caller must receive promptly: a backend may buffer
	// but never drops events.
	Events(ctx context.Context) <-chan Event

	// Logs returns the lines that container wrote in pod name, of every
	// instance the pod ran (restarts included), oldest first. Logs stay
	// available after the pod is gone.
	Logs(ctx context.Context, namespace, pod, container string) ([]LogLine, error)

	// DialContext connects to a Service as a client inside the cluster
	// would. address is "name.namespace:port" (or "name.namespace.svc:port");
	// network must be "tcp". A Service with no usable endpoints refuses the
	// connection (an error wrapping syscall.ECONNREFUSED), as kube-proxy's
	// REJECT rule does; where the kernel's rules do it, a client refused
	// more often than the kernel sends ICMP errors (about once a second)
	// sees its other connects time out, as on a real node. Its signature
	// is load's Dialer.
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// LoopbackOutsideHost is the address on this machine's loopback interface
// where a service outside a cluster, one its pods depend on, listens when
// the pods share the machine's network: in 127.0.0.0/16, which no pod
// range uses, and not 127.0.0.1, the source address of loopback
// connections, whose ephemeral ports could take the service's port while
// it is down.
const LoopbackOutsideHost = "127.0.9.1"

// PodKubeconfigEnv names, in the pods of closingtime's own clusters, the
// kubeconfig file by which a process in a pod reaches its cluster's API:
// the embedded cluster's API for pods (its Services and EndpointSlices,
// read-only), or the API server of `closingtime cluster`, through a host
// of the pods' network that relays to it. `closingtime load` reads it to
// resolve Services' names, `closingtime proxy --role edge` to watch a
// Service's endpoints.
const PodKubeconfigEnv = "CLOSINGTIME_POD_KUBECONFIG"

// RolloutStatus is the outcome of a Deployment's rollout.
type RolloutStatus struct {
	// Complete reports whether the rollout completed: updatedReplicas,
	// replicas and availableReplicas equal spec.replicas, and the status
	// observed the latest generation (k8s.io/kubernetes
	// pkg/controller/deployment/util/deployment_util.go, DeploymentComplete).
	Complete bool
	// CompletedAt is when the backend first saw it complete; zero if it has
	// not. Old pods may still be terminating then.
	CompletedAt time.Time
	// OldPodsGoneAt is when the last pod of an old ReplicaSet was gone; zero
	// if some are still there.
	OldPodsGoneAt time.Time
}

// DrainOptions configure [Backend.Drain]. The zero value is `kubectl drain`'s
// defaults.
type DrainOptions struct {
	// GracePeriodSeconds overrides each pod's terminationGracePeriodSeconds
	// when not nil.
	GracePeriodSeconds *int64
	// Timeout bounds the whole drain; zero means no bound.
	Timeout time.Duration
	// RetryDelay is the wait before evicting a pod again after a budget
	// refused it; zero means DefaultEvictionRetryDelay.
	RetryDelay time.Duration
}

// LogLine is one line a container wrote.
type LogLine struct {
	// Time is when the backend read the line.
	Time time.Time
	// Stream is "stdout" or "stderr" where the backend reads the streams
	// apart (the local cluster), and empty where it cannot: the kube
	// backend reads the pod log API, which merges them.
	Stream string
	// Restart is the container's restart count when it wrote the line: 0
	// for the first instance.
	Restart int32
	// Text is the line, without its newline.
	Text string
}

// ErrNotFound is wrapped by the errors of Backend methods that name an
// object the cluster does not have.
var ErrNotFound = errors.New("not found")

// EvictionError is the eviction API's refusal to evict a pod
// (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go,
// createTooManyRequestsError).
type EvictionError struct {
	// Namespace and Pod name the pod that was not evicted.
	Namespace, Pod string
	// Budget names the PodDisruptionBudget that refused it.
	Budget string
	// Status is the HTTP status of the refusal: 429 when the budget allows
	// no disruption now.
	Status int
}

func (e *EvictionError) Error() string {
	return fmt.Sprintf("evict pod %s/%s: %d: cannot evict pod as it would violate the pod's disruption budget %s",
		e.Namespace, e.Pod, e.Status, e.Budget)
}
