package hostcluster

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/closingtime-dev/closingtime/internal/nodeagent"
)

// Report is a cluster's status, as Status finds it; its JSON is the
// output of `closingtime cluster status -o json`.
type Report struct {
	// Up reports whether the cluster's daemon runs; the fields after
	// StateDir are set only if it does.
	Up bool `json:"up"`
	// Phase is how far the daemon has come.
	Phase Phase `json:"phase,omitempty"`
	// StateDir is the cluster's state directory, absolute.
	StateDir string `json:"stateDir"`
	// PID is the daemon's process ID.
	PID int `json:"pid,omitempty"`
	// Started is when the daemon started.
	Started *time.Time `json:"started,omitempty"`
	// Server is the API server's URL, once the control plane is up.
	Server string `json:"server,omitempty"`
	// Kubeconfig is the path of the administrator's kubeconfig.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// KubernetesVersion is the control plane's version.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Nodes and NodePorts are as the API server lists them, once the
	// daemon is in PhaseReady.
	Nodes     []Node     `json:"nodes,omitempty"`
	NodePorts []NodePort `json:"nodePorts,omitempty"`
}

// Node is a node of a Report.
type Node struct {
	Name string `json:"name"`
	// Ready is the status of the node's Ready condition: True, False or
	// Unknown.
	Ready corev1.ConditionStatus `json:"ready"`
	// Pods counts the pods bound to the node that have not ended
	// (phase neither Succeeded nor Failed).
	Pods int `json:"pods"`
}

// NodePort is a port of a Service that the cluster serves on a node port
// (nodeagent.ServedNodePorts), in a Report.
type NodePort struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Port is the Service's port.
	Port int32 `json:"port"`
	// NodePort is its node port, served at Address.
	NodePort int32 `json:"nodePort"`
	// Address is where clients on this machine reach it,
	// 127.0.0.1:NodePort.
	Address string `json:"address"`
}

// Status returns the status of the cluster in cfg's state directory: down,
// or up with its daemon, API server and kubeconfig, and, once the daemon
// is ready, each node with its Ready condition and the pods bound to it,
// and the Services served on node ports, as the API server lists them. A
// stale state is cleared, with a line on cfg.Notes. Status takes no lock:
// it neither starts nor stops a cluster, and it does not wait for one that
// starts.
func Status(ctx context.Context, cfg Config) (*Report, error) {
	cfg, _, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	st, err := liveState(cfg.Notes, cfg.StateDir, false)
	if err != nil || st == nil {
		return &Report{StateDir: cfg.StateDir}, err
	}
	r := &Report{Up: true, Phase: st.Phase, StateDir: cfg.StateDir, PID: st.PID, Started: &st.Started,
		Server: st.Server, Kubeconfig: st.Kubeconfig, KubernetesVersion: st.KubernetesVersion}
	if st.Phase != PhaseReady {
		return r, nil
	}
	client, err := kubeClient(st.Kubeconfig)
	if err == nil {
		r.Nodes, err = nodes(ctx, client)
	}
	if err == nil {
		r.NodePorts, err = nodePorts(ctx, client)
	}
	if err != nil {
		return nil, fmt.Errorf("the daemon (pid %d) runs, but its API server %s: %w", st.PID, st.Server, err)
	}
	return r, nil
}

// nodes returns the nodes of client's cluster, with their Ready
// condition and the pods bound to them that have not ended.
func nodes(ctx context.Context, client kubernetes.Interface) ([]Node, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			counts[p.Spec.NodeName]++
		}
	}
	var out []Node
	for _, n := range list.Items {
		out = append(out, Node{Name: n.Name, Ready: nodeReady(&n), Pods: counts[n.Name]})
	}
	return out, nil
}

// nodePorts returns the ports of the Services of client's cluster that its
// nodes serve on node ports, by namespace, name and port.
func nodePorts(ctx context.Context, client kubernetes.Interface) ([]NodePort, error) {
	services, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []NodePort
	for _, svc := range services.Items {
		for _, p := range nodeagent.ServedNodePorts(&svc) {
			out = append(out, NodePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Port, NodePort: p.NodePort,
				Address: net.JoinHostPort(nodeagent.NodeInternalIP, strconv.Itoa(int(p.NodePort)))})
		}
	}
	// A Service's ports stay in its order.
	slices.SortStableFunc(out, func(a, b NodePort) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}
