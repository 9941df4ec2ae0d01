package hostcluster

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/nodeagent"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// Run is the daemon: it runs the cluster of cfg until ctx is done. It
// starts the control plane and the nodes, writes the administrator's
// kubeconfig, and records each phase in the state directory (which must
// exist); when ctx is done, it stops the nodes, killing every pod, then
// the control plane, and returns once they are stopped. It writes its log
// to log, a line per step with the time. Only the daemon that Up starts
// calls it: Up reads what it records, and Down signals it.
func Run(ctx context.Context, cfg Config, log io.Writer) error {
	cfg, images, err := cfg.resolved()
	if err != nil {
		return err
	}
	dir, nodes := cfg.StateDir, cmp.Or(cfg.Nodes, local.DefaultNodes)
	logf := func(format string, args ...any) {
		fmt.Fprintf(log, "%s cluster: %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	start, _, err := procStat(os.Getpid())
	if err != nil {
		return err
	}
	st := &State{PID: os.Getpid(), ProcessStart: start, Phase: PhaseControlPlane, Started: time.Now(),
		Nodes: nodes, KubernetesVersion: controlplane.KubernetesVersion, ImageCommands: cfg.ImageCommands,
		Kubeconfig: filepath.Join(dir, kubeconfigFile)}
	if err := writeState(dir, st); err != nil {
		return err
	}

	logf("starting the control plane")
	cache, err := controlplane.DefaultCacheDir()
	if err != nil {
		return err
	}
	bins, err := controlplane.Build(ctx, cache)
	if err != nil {
		return err
	}
	cpDir := filepath.Join(dir, controlPlaneDir)
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{Binaries: bins, Dir: cpDir})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the control plane")
		cp.Stop()
		logf("stopped")
	}()
	if err := writeAdminKubeconfig(cp.Kubeconfig, st.Kubeconfig); err != nil {
		return err
	}
	st.Server, st.Phase = cp.Server, PhaseNodes
	if err := writeState(dir, st); err != nil {
		return err
	}
	logf("control plane up at %s; starting %d nodes", cp.Server, nodes)

	kubeletTLS, err := cp.KubeletTLS()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the closingtime binary for the pods: %w", err)
	}
	agents, err := nodeagent.StartNodes(ctx, nodeagent.NodesConfig{Kubeconfig: st.Kubeconfig, KubeletTLS: kubeletTLS, Nodes: nodes,
		Kubelet:   local.KubeletConfig{ImageCommands: imageCommands(exe, images), PauseCommand: []string{exe, "pause"}, Env: []corev1.EnvVar{{Name: local.CommandEnv, Value: exe}}},
		NodePorts: true, Logf: logf})
	if err != nil {
		return err
	}
	logf("pod network: %s", agents.Network())
	defer func() {
		logf("stopping the nodes: every pod is killed")
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout/2)
		defer cancel()
		if err := agents.Close(ctx); err != nil {
			logf("stopping the nodes: %v", err)
		}
	}()
	st.Phase = PhaseReady
	if err := writeState(dir, st); err != nil {
		return err
	}
	logf("ready")
	<-ctx.Done()
	return nil
}

// imageCommands returns the images' commands of the cluster's kubelets:
// closingtime and kube.DefaultImage run exe, and images adds to them or
// overrides them.
func imageCommands(exe string, images map[string][]string) map[string][]string {
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
