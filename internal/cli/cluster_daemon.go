package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// runClusterDaemon runs the cluster until SIGTERM or SIGINT: it starts
// the control plane and the nodes, writes the kubeconfig, records each
// phase in the state file, and on the signal stops the nodes (killing
// every pod), then the control plane. Its output is the daemon's log.
func runClusterDaemon(ctx context.Context, streams Streams, flags clusterFlags) error {
	images, err := nodeFlags("cluster run", flags)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := clusterStateDir(flags.stateDir)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(streams.Err, "%s cluster: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	start, _, err := procStat(os.Getpid())
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	st := &clusterState{PID: os.Getpid(), ProcessStart: start, Phase: phaseControlPlane, Started: time.Now(),
		Nodes: flags.nodes, KubernetesVersion: controlplane.KubernetesVersion, ImageCommands: flags.images,
		Kubeconfig: filepath.Join(dir, clusterKubeconfig)}
	if err := writeClusterState(dir, st); err != nil {
		return err
	}

	logf("starting the control plane")
	cache, err := controlplane.DefaultCacheDir()
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	bins, err := controlplane.Build(ctx, cache)
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	cpDir := filepath.Join(dir, clusterControlPlaneDir)
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{Binaries: bins, Dir: cpDir})
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	defer func() {
		logf("stopping the control plane")
		cp.Stop()
		logf("stopped")
	}()
	if err := writeAdminKubeconfig(cp.Kubeconfig, st.Kubeconfig); err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	st.Server, st.Phase = cp.Server, phaseNodes
	if err := writeClusterState(dir, st); err != nil {
		return err
	}
	logf("control plane up at %s; starting %d nodes", cp.Server, flags.nodes)

	kubeletTLS, err := cp.KubeletTLS()
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cluster run: find the closingtime binary for the pods: %w", err)
	}
	nodes, err := nodeagent.StartNodes(ctx, nodeagent.NodesConfig{Kubeconfig: st.Kubeconfig, KubeletTLS: kubeletTLS, Nodes: flags.nodes,
		Kubelet: local.KubeletConfig{ImageCommands: clusterImageCommands(exe, images)}, NodePorts: true, Logf: logf})
	if err != nil {
		return fmt.Errorf("cluster run: %w", err)
	}
	defer func() {
		logf("stopping the nodes: every pod is killed")
		ctx, cancel := context.WithTimeout(context.Background(), clusterStopTimeout/2)
		defer cancel()
		if err := nodes.Close(ctx); err != nil {
			logf("stopping the nodes: %v", err)
		}
	}()
	st.Phase = phaseReady
	if err := writeClusterState(dir, st); err != nil {
		return err
	}
	logf("ready")
	<-ctx.Done()
	return nil
}

// clusterImageCommands returns the images' commands of the cluster's
// kubelets: closingtime and kube.DefaultImage run exe, and images adds to
// them or overrides them.
func clusterImageCommands(exe string, images map[string][]string) map[string][]string {
	commands := map[string][]string{scenario.Image: {exe}, kube.DefaultImage: {exe}}
	maps.Copy(commands, images)
	return commands
}

// writeAdminKubeconfig writes the kubeconfig at src to dst with its
// certificates embedded, its cluster, user and context named closingtime,
// so that it can be copied and merged into others.
func writeAdminKubeconfig(src, dst string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return err
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", src, err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil {
		return fmt.Errorf("kubeconfig %s: no current context", src)
	}
	out := clientcmdapi.NewConfig()
	out.Clusters["closingtime"] = cfg.Clusters[current.Cluster]
	out.AuthInfos["closingtime-admin"] = cfg.AuthInfos[current.AuthInfo]
	out.Contexts["closingtime"] = &clientcmdapi.Context{Cluster: "closingtime", AuthInfo: "closingtime-admin"}
	out.CurrentContext = "closingtime"
	return clientcmd.WriteToFile(*out, dst)
}
