package cluster

// NodeLoad is a node as a scheduler sees it when it places a pod.
type NodeLoad struct {
	// Name is the node's name.
	Name string
	// Schedulable reports whether the node takes new pods: it is Ready and
	// not cordoned (spec.unschedulable).
	Schedulable bool
	// Pods is the number of pods bound to the node.
	Pods int
}

// ScheduleNode returns the index in nodes of the node that a pod is bound
// to: of the schedulable nodes, the one with the fewest pods, the first of
// them in the order of nodes on a tie. It returns -1 when no node is
// schedulable: the pod stays Pending until one is.
//
// It is the one placement rule of both the embedded cluster's scheduler and
// the scheduler of the node agents that run a real control plane's pods, so
// that differences between the two clusters come from their controllers and
// kubelets, never from where pods were placed. kube-scheduler scores nodes
// by many plugins; on nodes that are alike and pods without constraints its
// result spreads pods as evenly as this rule does.
func ScheduleNode(nodes []NodeLoad) int {
	best := -1
	for i, n := range nodes {
		if n.Schedulable && (best < 0 || n.Pods < nodes[best].Pods) {
			best = i
		}
	}
	return best
}
