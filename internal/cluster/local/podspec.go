package local

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// A SpecError is a field of a pod's spec that the embedded kubelet can't
// run as Kubernetes would.
type SpecError struct {
	// Field is the field's path from the pod's spec:
	// initContainers[0].restartPolicy.
	Field string
	Err   error
}

func (e *SpecError) Error() string { return "spec." + e.Field + ": " + e.Err.Error() }

func (e *SpecError) Unwrap() error { return e.Err }

// CheckPodTemplate returns the first field of a Deployment's pod template
// that the embedded cluster would not run as Kubernetes does, or nil: what
// CheckPodSpec refuses, and a restartPolicy other than Always, which the
// API refuses in a Deployment.
func CheckPodTemplate(t *corev1.PodTemplateSpec, imageCommands map[string][]string) *SpecError {
	if p := t.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
		return &SpecError{"restartPolicy", fmt.Errorf("unsupported value %q: a Deployment's pods may only have %q", p, corev1.RestartPolicyAlways)}
	}
	return CheckPodSpec(t.Annotations, &t.Spec, imageCommands)
}

// CheckPodSpec returns the first field of a pod's spec that the embedded
// kubelet would not run as Kubernetes does, rather than run it as
// something else, or nil: a pod in the node's network, volumes and their
// mounts (its containers would see this machine's files instead), a
// container with no local command ([Entrypoint], with the pod's
// annotations and imageCommands, the kubelet's
// KubeletConfig.ImageCommands), a variable from a ConfigMap, a Secret or
// a field the kubelet does not fill, a postStart hook, a probe or hook
// that it does not run or whose named port the container lacks, or what
// the API refuses in an init container that is not a sidecar (probes,
// lifecycle hooks).
func CheckPodSpec(annotations map[string]string, spec *corev1.PodSpec, imageCommands map[string][]string) *SpecError {
	if spec.HostNetwork {
		return &SpecError{"hostNetwork", errors.New("a pod in the node's network is not run: the embedded kubelet gives every pod a network of its own")}
	}
	// An API server's ServiceAccount admission adds every pod a volume of
	// its API credentials (kube-api-access-…), which the kubelet does not
	// mount: a pod of closingtime's clusters reaches its API by
	// cluster.PodKubeconfigEnv instead.
	apiAccess := map[string]bool{}
	for i, v := range spec.Volumes {
		if !isAPIAccess(v) {
			return &SpecError{fmt.Sprintf("volumes[%d]", i), fmt.Errorf("volume %s: the embedded kubelet mounts no volumes (its containers would see this machine's files instead); give files by their path on this machine", v.Name)}
		}
		apiAccess[v.Name] = true
	}
	check := func(field string, c *corev1.Container, init bool) *SpecError {
		sidecar := cluster.IsSidecar(c)
		var err error
		switch {
		case init && c.RestartPolicy != nil && !sidecar:
			field, err = field+".restartPolicy", fmt.Errorf("init container %s: restartPolicy %s: an init container's may only be Always", c.Name, *c.RestartPolicy)
		case init && !sidecar && (c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil):
			err = fmt.Errorf("init container %s: only a sidecar (restartPolicy Always) may have probes", c.Name)
		case init && !sidecar && c.Lifecycle != nil:
			field, err = field+".lifecycle", fmt.Errorf("init container %s: only a sidecar (restartPolicy Always) may have lifecycle hooks", c.Name)
		case c.Lifecycle != nil && c.Lifecycle.PostStart != nil:
			field, err = field+".lifecycle.postStart", fmt.Errorf("container %s: a postStart hook is not run by the embedded kubelet", c.Name)
		default:
			_, err = Entrypoint(annotations, c, imageCommands)
		}
		if err == nil {
			var f string
			if f, err = checkContainer(c, apiAccess); err != nil {
				field += "." + f
			}
		}
		if err != nil {
			return &SpecError{field, err}
		}
		return nil
	}
	for i := range spec.InitContainers {
		if err := check(fmt.Sprintf("initContainers[%d]", i), &spec.InitContainers[i], true); err != nil {
			return err
		}
	}
	for i := range spec.Containers {
		if err := check(fmt.Sprintf("containers[%d]", i), &spec.Containers[i], false); err != nil {
			return err
		}
	}
	return nil
}

// isAPIAccess reports whether v is the volume of a pod's API credentials
// that a ServiceAccount admission adds: a projected service account
// token.
func isAPIAccess(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// checkContainer returns the first field of c, from c, that the embedded
// kubelet does not run, and why; "" and nil if there is none. A mount of
// a volume of apiAccess passes.
func checkContainer(c *corev1.Container, apiAccess map[string]bool) (string, error) {
	for i, m := range c.VolumeMounts {
		if !apiAccess[m.Name] {
			return fmt.Sprintf("volumeMounts[%d]", i), fmt.Errorf("container %s: volume %s: the embedded kubelet mounts no volumes", c.Name, m.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		return "envFrom", fmt.Errorf("container %s: the embedded cluster has no ConfigMaps or Secrets: give the variables in env with values", c.Name)
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		field := fmt.Sprintf("env[%d].valueFrom", i)
		if e.ValueFrom.FieldRef == nil {
			return field, fmt.Errorf("container %s: env %s: the embedded cluster has no ConfigMaps, Secrets or resource fields: give a value, or a fieldRef", c.Name, e.Name)
		}
		if _, ok := fieldRefValue(&corev1.Pod{}, e.ValueFrom.FieldRef.FieldPath, ""); !ok {
			return field + ".fieldRef.fieldPath", fmt.Errorf("container %s: env %s: fieldRef %s is not filled by the embedded kubelet (it fills %s)",
				c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath, strings.Join(fieldRefPaths, ", "))
		}
	}
	for _, p := range []struct {
		field string
		probe *corev1.Probe
	}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
		if p.probe == nil {
			continue
		}
		h := p.probe.ProbeHandler
		if h.HTTPGet == nil && h.TCPSocket == nil && h.Exec == nil && h.GRPC == nil {
			return p.field, fmt.Errorf("container %s: a probe needs an httpGet, tcpSocket, grpc or exec handler", c.Name)
		}
		if f, err := checkHandlerPort(c, h); err != nil {
			return p.field + "." + f, err
		}
	}
	if l := c.Lifecycle; l != nil && l.PreStop != nil {
		h := corev1.ProbeHandler{HTTPGet: l.PreStop.HTTPGet, TCPSocket: l.PreStop.TCPSocket}
		if f, err := checkHandlerPort(c, h); err != nil {
			return "lifecycle.preStop." + f, err
		}
	}
	return "", nil
}

// checkHandlerPort returns the port field of h, and the error, if it
// names a port that c lacks.
func checkHandlerPort(c *corev1.Container, h corev1.ProbeHandler) (string, error) {
	var err error
	switch {
	case h.HTTPGet != nil:
		_, err = containerPort(c, h.HTTPGet.Port)
		return "httpGet.port", err
	case h.TCPSocket != nil:
		_, err = containerPort(c, h.TCPSocket.Port)
		return "tcpSocket.port", err
	}
	return "", nil
}

// containerPort resolves a probe's or hook's port of container c, a
// number or the name of one of c's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, p.StrVal)
}
