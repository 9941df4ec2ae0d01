package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// NodesConfig configures [StartNodes].
type NodesConfig struct {
	// Kubeconfig is the path of the kubeconfig by which the scheduler and
	// the agents speak to the API server, each with a client of its own at
	// the kubelet's rate limits (cluster.DefaultKubeletAPIQPS and
	// cluster.DefaultKubeletAPIBurst). Every container gets it too, in
	// RoutingEnv with its node's name, so that `closingtime load` in a pod
	// reaches Services through its node's routing view.
	Kubeconfig string
	// KubeletTLS, if not nil, serves each node's kubelet API
	// ([KubeletHandler]: pod logs) on a loopback port of its own, which
	// the node publishes for the API server (Config.KubeletPort); the
	// control plane's KubeletTLS gives it. If nil, the API server cannot
	// read the pods' logs.
	KubeletTLS *tls.Config
	// Nodes is the number of nodes, named node-1, node-2…; local.DefaultNodes
	// if zero.
	Nodes int
	// Kubelet is the template of every node's kubelet; see Config.Kubelet.
	// Its Network, PodCIDR and Services are set per node, and the
	// variables of the pods' routing (RoutingEnv, cluster.PodKubeconfigEnv) are
	// added to its Env.
	Kubelet local.KubeletConfig
	// Network is how pods are networked, as the embedded cluster's
	// (local.Config.Network): local.NetworkAuto if empty.
	Network local.NetworkMode
	// Recorder, if set, receives every node's kubelet events.
	Recorder cluster.Recorder
	// MinPropagationDelay and MaxPropagationDelay bound the delay with
	// which the pods' routing views apply an endpoint change after their
	// watch sees it, as kube-proxy's rules lag behind the EndpointSlices
	// (PropagationDelayEnv). Both zero means the embedded cluster's,
	// cluster.DefaultMinPropagationDelay and
	// cluster.DefaultMaxPropagationDelay, so that the two clusters route
	// alike.
	MinPropagationDelay, MaxPropagationDelay time.Duration
	// NodePorts, if true, serves every Service's node ports on
	// NodeInternalIP, routed through node-1's view with the propagation
	// delays above ([NodePorts]), as kube-proxy serves them on every node:
	// how clients outside the cluster reach its Services.
	NodePorts bool
	// Logf, if not nil, receives what the nodes report outside the API:
	// the node ports served and those that cannot be.
	Logf func(format string, args ...any)
}

// Nodes is a scheduler and the node agents of a cluster, as the embedded
// cluster has them: nodes node-1…node-N, whose pods take their addresses
// from a /24 per node (podnet.NodePodCIDR) of the cluster's pod range.
//
// With network namespaces (NodesConfig.Network), the pod range is
// podnet.DefaultPodCIDR inside a podnet.Network, each node's routing view
// ([Routes]) is written into its namespace, as its kube-proxy would write
// it, and the pods reach the API server at a host of the network that
// relays to it ([cluster.PodKubeconfigEnv]). In the loopback model, the pod range
// is a /16 of 127.0.0.0/8 claimed across the machine's processes
// (local.ClaimFreeRange), and each pod that calls a Service routes
// through a view of its own (RoutingEnv).
type Nodes struct {
	scheduler *Scheduler
	nodePorts *NodePorts // nil unless NodesConfig.NodePorts
	agents    []*Agent
	servers   []*http.Server // the kubelet APIs, one per agent
	network   *podnet.Network
	fallback  string    // why there is no network, where one was wanted
	routes    []*Routes // each node's, with a network
	apiRelay  *apiRelay // with a network
	claim     io.Closer // the loopback range, without a network
	closeOnce sync.Once
	closeErr  error
}

// StartNodes starts the network, the scheduler and the agents. ctx bounds
// the start only; Close stops them.
func StartNodes(ctx context.Context, cfg NodesConfig) (*Nodes, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = local.DefaultNodes
	}
	if cfg.Nodes < 1 || cfg.Nodes > local.MaxNodes {
		return nil, fmt.Errorf("%d nodes: want 1 to %d", cfg.Nodes, local.MaxNodes)
	}
	if cfg.MinPropagationDelay == 0 && cfg.MaxPropagationDelay == 0 {
		cfg.MinPropagationDelay, cfg.MaxPropagationDelay = cluster.DefaultMinPropagationDelay, cluster.DefaultMaxPropagationDelay
	}
	if cfg.MinPropagationDelay < 0 || cfg.MaxPropagationDelay < cfg.MinPropagationDelay {
		return nil, fmt.Errorf("propagation delay range %s–%s is not a range of non-negative durations", cfg.MinPropagationDelay, cfg.MaxPropagationDelay)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("nodes: kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	rest.QPS, rest.Burst = cluster.DefaultKubeletAPIQPS, cluster.DefaultKubeletAPIBurst
	newClient := func() (kubernetes.Interface, error) { return kubernetes.NewForConfig(rest) }
	n := &Nodes{}
	if n.network, n.fallback, err = local.NewNetwork(cfg.Network, cfg.Nodes, netip.Prefix{}); err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	var cidr netip.Prefix
	if n.network != nil {
		cidr = n.network.PodCIDR()
		n.apiRelay, err = startAPIRelay(n.network, cfg.Kubeconfig, rest.Host)
	} else {
		cidr, n.claim, err = local.ClaimFreeRange()
	}
	if err != nil {
		n.Close(context.Background())
		return nil, err
	}
	for i := 1; i <= cfg.Nodes; i++ {
		if err := n.start(ctx, cfg, i, podnet.NodePodCIDR(cidr, i), newClient); err != nil {
			n.Close(context.Background())
			return nil, err
		}
	}
	client, err := newClient()
	if err == nil {
		n.scheduler, err = StartScheduler(ctx, client)
	}
	if err == nil && cfg.NodePorts {
		if client, err = newClient(); err == nil {
			pc := NodePortsConfig{Client: client, NodeName: "node-1", MinDelay: cfg.MinPropagationDelay, MaxDelay: cfg.MaxPropagationDelay, Logf: cfg.Logf}
			if n.routes != nil {
				pc.Routes = n.routes[0]
			}
			n.nodePorts, err = StartNodePorts(ctx, pc)
		}
	}
	if err != nil {
		n.Close(context.Background())
		return nil, err
	}
	return n, nil
}

// Network says how the pods are networked: "netns", or "loopback" and,
// where namespaces were wanted, why none could be made.
func (n *Nodes) Network() string {
	if n.network != nil {
		return "netns"
	}
	return podnet.NewLoopbackNode(netip.Prefix{}, n.fallback).Isolation()
}

// start starts the agent of node i, its routing view with a network, and
// its kubelet API if cfg has one.
func (n *Nodes) start(ctx context.Context, cfg NodesConfig, i int, cidr netip.Prefix, newClient func() (kubernetes.Interface, error)) error {
	name := "node-" + strconv.Itoa(i)
	client, err := newClient()
	if err != nil {
		return err
	}
	kc := cfg.Kubelet
	if n.network != nil {
		node := n.network.Nodes()[i-1]
		routes, err := StartRoutes(ctx, RoutesConfig{Client: client, NodeName: name, MinDelay: cfg.MinPropagationDelay, MaxDelay: cfg.MaxPropagationDelay,
			Node: node, PodCIDR: n.network.PodCIDR()})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		n.routes = append(n.routes, routes)
		kc.Network, kc.Services = node, routes.ServicesOf
		kc.Env = append([]corev1.EnvVar{{Name: cluster.PodKubeconfigEnv, Value: n.apiRelay.kubeconfig}, {Name: NodeNetnsEnv, Value: node.Netns().Path()}}, kc.Env...)
	} else {
		kc.Network = podnet.NewLoopbackNode(cidr, n.fallback)
		kc.Env = append(RoutingEnv(cfg.Kubeconfig, name, cfg.MinPropagationDelay, cfg.MaxPropagationDelay), kc.Env...)
	}
	ac := Config{Client: client, NodeName: name, Kubelet: kc, Recorder: cfg.Recorder}
	var ln net.Listener
	if cfg.KubeletTLS != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("node %s: kubelet API: %w", name, err)
		}
		ac.KubeletPort = int32(ln.Addr().(*net.TCPAddr).Port)
	}
	a, err := Start(ctx, ac)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	n.agents = append(n.agents, a)
	if ln != nil {
		srv := &http.Server{Handler: KubeletHandler(a.Kubelet()), ReadHeaderTimeout: 10 * time.Second}
		n.servers = append(n.servers, srv)
		go srv.Serve(tls.NewListener(ln, cfg.KubeletTLS))
	}
	return nil
}

// Close stops the scheduler, the node ports (closing every connection
// they forward), the kubelet APIs and every agent, which kills
// every pod's processes at once, and releases the pod range. It returns
// when everything is gone, or with ctx's error when ctx ends first. The
// Node objects stay in the API. Later calls return the first one's result.
func (n *Nodes) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		if n.scheduler != nil {
			n.scheduler.Close()
		}
		if n.nodePorts != nil {
			n.nodePorts.Close()
		}
		var errs []error
		for _, srv := range n.servers {
			errs = append(errs, srv.Close())
		}
		agentErrs := make([]error, len(n.agents))
		var wg sync.WaitGroup
		for i, a := range n.agents {
			wg.Go(func() { agentErrs[i] = a.Close(ctx) })
		}
		wg.Wait()
		errs = append(errs, agentErrs...)
		// After every pod is gone: the routes, the relay and the network
		// go, or the range is free again.
		for _, r := range n.routes {
			r.Close()
		}
		if n.apiRelay != nil {
			errs = append(errs, n.apiRelay.close())
		}
		if n.network != nil {
			errs = append(errs, n.network.Close())
		}
		if n.claim != nil {
			errs = append(errs, n.claim.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}
