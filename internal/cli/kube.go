package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// kubeFlags are the flags of the commands that run on a real cluster
// (--kube): where the cluster is, as kubectl finds it, and the load pods.
type kubeFlags struct {
	kube       bool
	kubeconfig string
	context    string
	namespace  string
	image      string
	loadPods   int
}

// bind adds the flags to f.
func (k *kubeFlags) bind(f *pflag.FlagSet) {
	f.BoolVar(&k.kube, "kube", false, "run on the real cluster of the kubeconfig, with traffic from load pods inside it (docs/kube.md)")
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "with --kube, the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&k.context, "context", "", "with --kube, the kubeconfig context (default: its current context)")
	f.StringVarP(&k.namespace, "namespace", "n", "", "with --kube, the namespace to run in (default: a namespace of closingtime's own, deleted at the end)")
	f.StringVar(&k.image, "image", kube.DefaultImage, "with --kube, the closingtime image of the load pods, and of the containers of image closingtime")
	f.IntVar(&k.loadPods, "load-pods", kube.DefaultLoadPods, "with --kube, the load pods that share the traffic, for rates one pod cannot reach")
}

// check returns a usage error if a kube flag is given without --kube, or
// is invalid.
func (k *kubeFlags) check(command string, f *pflag.FlagSet) error {
	if !k.kube {
		for _, name := range []string{"kubeconfig", "context", "namespace", "image", "load-pods"} {
			if f.Changed(name) {
				return usagef("%s: --%s needs --kube", command, name)
			}
		}
		return nil
	}
	if err := positive(command, "--load-pods", k.loadPods); err != nil {
		return err
	}
	if k.image == "" {
		return usagef("%s: --image must not be empty", command)
	}
	return nil
}

// config returns the configuration of a kube.Cluster of the flags: in
// namespace -n, or in one of its own.
func (k *kubeFlags) config() kube.Config {
	return kube.Config{
		Kubeconfig:      k.kubeconfig,
		Context:         k.context,
		Namespace:       k.namespace,
		CreateNamespace: k.namespace == "",
		Images:          map[string]string{scenario.Image: k.image},
	}
}

// runnerConfig sets cfg's clusters: with --kube, real clusters of the
// flags, with their load pods (k.cluster); otherwise embedded clusters
// whose image closingtime runs this binary and whose other images run the
// commands of images ([localClusters]), which say once on warn when their
// pods can have no network of their own. command names the command in an
// error and a warning.
func (k *kubeFlags) runnerConfig(command string, cfg scenario.RunnerConfig, images map[string][]string, warn io.Writer) (scenario.RunnerConfig, error) {
	if !k.kube {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("%s: find the closingtime binary for the pods: %w", command, err)
		}
		cfg.NewCluster = localClusters(exe, images, func(network string) {
			fmt.Fprintf(warn, "%s: the embedded cluster's pods share this machine's network: %s; each pod has a loopback address of its own, and its servers must listen on $(POD_IP); run as root, or inside unshare --user --map-root-user --net, for a network of each pod's own and manifests unchanged (docs/local-cluster.md)\n", command, network)
		})
		return cfg, nil
	}
	kc := k.config()
	cfg.NewCluster = func(scenario.ClusterSettings) (*scenario.Cluster, error) {
		c, err := kube.New(kc)
		if err != nil {
			return nil, err
		}
		return k.cluster(c, false), nil
	}
	return cfg, nil
}

// dnsCheckTimeout bounds the question whether a cluster has cluster DNS.
const dnsCheckTimeout = 10 * time.Second

// cluster returns the run's cluster c, in its namespace, with the load
// pods of the flags; deployed says that the workload runs on c already,
// so that the runner applies none of it (rollout deploy/NAME).
func (k *kubeFlags) cluster(c *kube.Cluster, deployed bool) *scenario.Cluster {
	ctx, cancel := context.WithTimeout(context.Background(), dnsCheckTimeout)
	defer cancel()
	return &scenario.Cluster{
		Backend:      c,
		Namespace:    c.Namespace(),
		Traffic:      c.LoadPods(kube.LoadConfig{Image: k.image, Pods: k.loadPods}),
		NoClusterDNS: !c.HasClusterDNS(ctx),
		Deployed:     deployed,
		Close:        c.Close,
	}
}

// parseDeploymentRef returns the name of ref, deploy/NAME or
// deployment/NAME (or deployment.apps/NAME), as kubectl spells it.
func parseDeploymentRef(ref string) (string, error) {
	kind, name, ok := strings.Cut(ref, "/")
	switch {
	case !ok || name == "" || strings.Contains(name, "/"):
		return "", fmt.Errorf("%q: want deploy/NAME", ref)
	case kind != "deploy" && kind != "deployment" && kind != "deployments" && kind != "deployment.apps":
		return "", fmt.Errorf("%q: only a Deployment can be rolled out: want deploy/NAME", ref)
	}
	return name, nil
}

// scenarioRunnable reports why scenario s cannot run on a real cluster, or
// "" if it can: a dependency runs in this process, out of the pods' reach,
// a drain names the embedded cluster's nodes, and the programs a scenario
// requires, with the closingtime binary, are this machine's.
func scenarioRunnable(s *scenario.Scenario) string {
	switch {
	case s.Dependency != nil:
		return "its dependency runs in this process, out of the cluster's reach"
	case s.Action.Kind == scenario.ActionDrain:
		return "its drain names a node of the embedded cluster"
	case len(s.Programs()) > 0:
		return "its pods run " + strings.Join(s.Programs(), ", ") + " and closingtime from this machine ($" + local.CommandEnv + "), which a real cluster's nodes lack"
	}
	return ""
}
