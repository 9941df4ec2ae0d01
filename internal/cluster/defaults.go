package cluster

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultTerminationGracePeriodSeconds is the grace period of a pod whose
// spec.terminationGracePeriodSeconds is unset, in seconds
// (k8s.io/api core/v1 types.go, DefaultTerminationGracePeriodSeconds).
const DefaultTerminationGracePeriodSeconds = corev1.DefaultTerminationGracePeriodSeconds

// DefaultProbePeriodSeconds and DefaultProbeFailureThreshold are a probe's
// periodSeconds and failureThreshold when unset (k8s.io/kubernetes
// pkg/apis/core/v1/defaults.go, SetDefaults_Probe).
const (
	DefaultProbePeriodSeconds    int32 = 10
	DefaultProbeFailureThreshold int32 = 3
)

// DefaultReplicas is the replica count of a Deployment, ReplicaSet or
// StatefulSet whose spec.replicas is unset (k8s.io/kubernetes
// pkg/apis/apps/v1/defaults.go, SetDefaults_Deployment, SetDefaults_ReplicaSet,
// SetDefaults_StatefulSet).
const DefaultReplicas int32 = 1

// DefaultMaxSurge and DefaultMaxUnavailable are a RollingUpdate Deployment's
// spec.strategy.rollingUpdate fields when unset (k8s.io/kubernetes
// pkg/apis/apps/v1/defaults.go, SetDefaults_Deployment).
const (
	DefaultMaxSurge       = "25%"
	DefaultMaxUnavailable = "25%"
)

// DefaultProgressDeadlineSeconds is a Deployment's
// spec.progressDeadlineSeconds when unset: after this long without progress
// its Progressing condition turns False, reason ProgressDeadlineExceeded
// (k8s.io/kubernetes pkg/apis/apps/v1/defaults.go, SetDefaults_Deployment).
const DefaultProgressDeadlineSeconds int32 = 600

// DefaultDaemonSetMaxUnavailable is a RollingUpdate DaemonSet's
// spec.updateStrategy.rollingUpdate.maxUnavailable when unset (k8s.io/kubernetes
// pkg/apis/apps/v1/defaults.go, SetDefaults_DaemonSet); its maxSurge
// defaults to 0. A percentage is scaled by the nodes that run the
// DaemonSet, rounded up (k8s.io/api apps/v1 types.go, RollingUpdateDaemonSet).
const DefaultDaemonSetMaxUnavailable = 1

// DefaultHPAMinReplicas is a HorizontalPodAutoscaler's spec.minReplicas when
// unset (k8s.io/kubernetes pkg/apis/autoscaling/v2/defaults.go,
// SetDefaults_HorizontalPodAutoscaler).
const DefaultHPAMinReplicas int32 = 1

// ResolveFenceposts returns how many pods a RollingUpdate Deployment of
// replicas pods may run above replicas (surge) and below it (unavailable)
// during a rollout, as the deployment controller computes them
// (k8s.io/kubernetes pkg/controller/deployment/util/deployment_util.go,
// ResolveFenceposts).
//
// A nil maxSurge or maxUnavailable is the unset field and takes its default,
// DefaultMaxSurge or DefaultMaxUnavailable. A percentage is scaled by
// replicas, rounded up for surge and down for unavailable
// (intstr.GetScaledValueFromIntOrPercent); when both resolve to zero,
// unavailable is 1, so that a rollout can always progress. The result is not
// capped at replicas. It returns an error for a string that is not a
// percentage.
func ResolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, replicas int32) (surge, unavailable int32, err error) {
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, intstr.FromString(DefaultMaxSurge)), int(replicas), true)
	if err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, intstr.FromString(DefaultMaxUnavailable)), int(replicas), false)
	if err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if s == 0 && u == 0 {
		// Validation rejects a literal 0 for both, but percentages can round
		// to 0 for both; the controller then lets one pod be unavailable.
		u = 1
	}
	return int32(s), int32(u), nil
}

// DefaultEvictionRetryDelay is how long `kubectl drain` waits before
// evicting a pod again after the eviction API refused it
// (k8s.io/kubectl pkg/cmd/drain/drain.go, which sets pkg/drain's
// Helper.EvictErrorRetryDelay to it).
const DefaultEvictionRetryDelay = 5 * time.Second

// DefaultProbeTimeoutSeconds and DefaultProbeSuccessThreshold are a probe's
// timeoutSeconds and successThreshold when unset (k8s.io/kubernetes
// pkg/apis/core/v1/defaults.go, SetDefaults_Probe).
const (
	DefaultProbeTimeoutSeconds   int32 = 1
	DefaultProbeSuccessThreshold int32 = 1
)

// MinimumGracePeriodSeconds is the least time the kubelet gives a container
// between its stop signal and SIGKILL, even when a preStop hook used up the
// grace period (k8s.io/kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go,
// minimumGracePeriodInSeconds; killContainer applies it).
const MinimumGracePeriodSeconds int64 = 2

// The delays between the components of a cluster, which upstream leaves to
// the environment (docs/kubernetes.md §10, E5, E11, T17). The embedded
// cluster takes each as a setting; these are its defaults. Each step keeps
// its own event, so that a timeline shows where the time went.
const (
	// DefaultKubeletObserveDelay is the time from a change of a pod in the
	// API (its binding, its deletion) to the kubelet acting on it: the
	// latency of the kubelet's watch, which delivers the change as soon as
	// the API server stores it (k8s.io/kubernetes pkg/kubelet/config/apiserver.go,
	// NewSourceApiserver). Upstream gives no number; on a healthy cluster it
	// is milliseconds, so the default adds none. The grace period counts
	// from the end of this delay, not from deletionTimestamp (T17).
	DefaultKubeletObserveDelay time.Duration = 0
	// DefaultStatusPushDelay is the time from the kubelet's change of a
	// pod's status (a probe result that makes it Ready) to the API, and so
	// the EndpointSlice controller, seeing it. The status manager sends a
	// change at once, not at its 10 s resync (k8s.io/kubernetes
	// pkg/kubelet/status/status_manager.go, SetPodStatus): no delay.
	DefaultStatusPushDelay time.Duration = 0
	// DefaultEndpointSyncDelay is the time from a pod change the API has
	// to the EndpointSlice controller writing the slices; its work queue
	// takes a change at once: no delay.
	DefaultEndpointSyncDelay time.Duration = 0
	// DefaultEndpointSliceBatchPeriod is kube-controller-manager's
	// --endpointslice-updates-batch-period, during which the controller
	// gathers a Service's pod changes into one update; the flag has no
	// default, which is no batching (E11).
	DefaultEndpointSliceBatchPeriod time.Duration = 0
	// DefaultMinPropagationDelay and DefaultMaxPropagationDelay bound the
	// time from the EndpointSlice update to a node's proxy rules following
	// it: the watch, then kube-proxy's sync, rate-limited by its
	// minSyncPeriod (1 s in iptables mode; k8s.io/kubernetes
	// pkg/proxy/apis/config/v1alpha1/defaults.go). Upstream gives no
	// number (E11); seed 001 measured the last request to a deleted pod
	// 0.02 to 1.03 s after its deletion, which this range reproduces.
	DefaultMinPropagationDelay = 100 * time.Millisecond
	DefaultMaxPropagationDelay = time.Second
)

// DefaultSessionAffinityTimeout is how long a Service with sessionAffinity
// ClientIP keeps sending a client to the endpoint it used last when
// spec.sessionAffinityConfig.clientIP.timeoutSeconds is unset: 10800 s,
// three hours (k8s.io/api core/v1 types.go,
// DefaultClientIPServiceAffinitySeconds; k8s.io/kubernetes
// pkg/apis/core/v1/defaults.go, SetDefaults_Service).
const DefaultSessionAffinityTimeout = time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second

// The kubelet's node heartbeats: it renews its Lease in the kube-node-lease
// namespace, of DefaultNodeLeaseDuration, every DefaultNodeLeaseRenewInterval
// (a quarter of the duration), and posts its node status, the Ready
// condition's lastHeartbeatTime included, at least every
// DefaultNodeStatusReportFrequency when nothing changed (k8s.io/kubernetes
// pkg/kubelet/apis/config/v1beta1/defaults.go, nodeLeaseDurationSeconds 40
// and nodeStatusReportFrequency 5m; pkg/kubelet/kubelet.go,
// nodeLeaseRenewIntervalFraction 0.25).
const (
	DefaultNodeLeaseDuration         = 40 * time.Second
	DefaultNodeLeaseRenewInterval    = DefaultNodeLeaseDuration / 4
	DefaultNodeStatusReportFrequency = 5 * time.Minute
)

// DefaultMaxPods is how many pods a kubelet runs at most, the pods capacity
// of its Node (k8s.io/kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go,
// maxPods 110).
const DefaultMaxPods = 110

// DefaultKubeletAPIQPS and DefaultKubeletAPIBurst are the rate at which a
// kubelet's client may send requests to the API server, and the burst
// above it (k8s.io/kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go,
// kubeAPIQPS 50 and kubeAPIBurst 100). A node agent's client should have
// them: client-go's own defaults, 5 and 10, delay a node's status updates
// by seconds once a few pods start at once.
const (
	DefaultKubeletAPIQPS   = 50
	DefaultKubeletAPIBurst = 100
)

// DefaultServiceCIDR is the range of Services' cluster IPs of the embedded
// cluster and of `closingtime cluster`'s API server, as kubeadm's default --service-cluster-ip-range (its first
// address is the API server's own Service, "kubernetes"). It exists only
// inside the cluster's network namespaces.
const DefaultServiceCIDR = "10.96.0.0/12"
