package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster/kube"
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

// runnerConfig sets cfg's clusters: with --kube, NewCluster and
// NewTraffic to real clusters of the flags, with their load pods;
// otherwise NewCluster to embedded clusters whose image closingtime runs
// this binary and whose other images run the commands of images
// ([localClusters]). command names the command in an error.
func (k *kubeFlags) runnerConfig(command string, cfg scenario.RunnerConfig, images map[string][]string) (scenario.RunnerConfig, error) {
	if !k.kube {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("%s: find the closingtime binary for the pods: %w", command, err)
		}
		cfg.NewCluster = localClusters(exe, images)
		return cfg, nil
	}
	kc := k.config()
	cfg.NewCluster = func(scenario.ClusterSettings) (scenario.Cluster, error) { return kube.New(kc) }
	cfg.NewTraffic = k.traffic
	return cfg, nil
}

// traffic returns the load pods of c, a cluster that runnerConfig or
// existing made.
func (k *kubeFlags) traffic(c scenario.Cluster) scenario.TrafficSource {
	var kc *kube.Cluster
	switch c := c.(type) {
	case *kube.Cluster:
		kc = c
	case existingWorkload:
		kc = c.Cluster
	default:
		panic(fmt.Sprintf("cli: load pods of a %T", c))
	}
	return kc.LoadPods(kube.LoadConfig{Image: k.image, Pods: k.loadPods})
}

// existingWorkload is a real cluster whose workload runs already: the
// runner's Apply applies nothing, so that closingtime takes no ownership
// of the workload's fields and changes nothing but what its action does.
type existingWorkload struct{ *kube.Cluster }

// Apply applies nothing: the objects are the cluster's own.
func (existingWorkload) Apply(context.Context, []runtime.Object) error { return nil }

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
// and a drain names the embedded cluster's nodes.
func scenarioRunnable(s *scenario.Scenario) string {
	switch {
	case s.Dependency != nil:
		return "its dependency runs in this process, out of the cluster's reach"
	case s.Action.Kind == scenario.ActionDrain:
		return "its drain names a node of the embedded cluster"
	}
	return ""
}
