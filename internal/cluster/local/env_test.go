package local

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

func TestContainerEnv(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}}
	c := &corev1.Container{
		Name:    "app",
		Command: []string{"serve", "--listen=$(LISTEN)"},
		Args:    []string{"--pod=$(POD_NAME)", "$(LATER)"},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			// An entry sees the entries before it only.
			{Name: "LISTEN", Value: "$(POD_IP):8080 $(LATER)"},
			{Name: "LATER", Value: "x"},
		},
	}
	vars, entries, err := containerEnv(pod, c, "127.77.0.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POD_NAME=web-1", "POD_NAMESPACE=shop", "POD_IP=127.77.0.9", "LISTEN=127.77.0.9:8080 $(LATER)", "HOSTNAME=web-1"} {
		if !slices.Contains(entries, want) {
			t.Errorf("env %q missing from %q", want, entries)
		}
	}
	argv, err := commandLine(pod, c, vars, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serve", "--listen=127.77.0.9:8080 $(LATER)", "--pod=web-1", "x"}
	if !slices.Equal(argv, want) {
		t.Errorf("commandLine() = %q, want %q", argv, want)
	}
}

// TestContainerEnvNodeEnv: the kubelet's own variables come first, as the
// Service variables do; the container's entries of the same name win, and
// its values, command and args may refer to them.
func TestContainerEnvNodeEnv(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}}
	nodeEnv := []corev1.EnvVar{{Name: "ROUTES", Value: "/etc/kubeconfig"}, {Name: "MODE", Value: "node"}, {Name: "RAW", Value: "$(ROUTES)"}}
	c := &corev1.Container{
		Name:    "app",
		Command: []string{"run", "--routes=$(ROUTES)"},
		Env: []corev1.EnvVar{
			{Name: "FROM_NODE", Value: "$(MODE)"},
			{Name: "MODE", Value: "own"},
			{Name: "AFTER", Value: "$(MODE)"},
		},
	}
	vars, entries, err := containerEnv(pod, c, "127.77.0.9", nodeEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ROUTES=/etc/kubeconfig", "MODE=own", "RAW=$(ROUTES)", "FROM_NODE=node", "AFTER=own"}
	for _, w := range want {
		if !slices.Contains(entries, w) {
			t.Errorf("env %q missing from %q", w, entries)
		}
	}
	// One entry per name, the node's first, in their order.
	if i, j := slices.Index(entries, "ROUTES=/etc/kubeconfig"), slices.Index(entries, "FROM_NODE=node"); i > j {
		t.Errorf("env %q: the node's variables come after the container's", entries)
	}
	modes := 0
	for _, e := range entries {
		if strings.HasPrefix(e, "MODE=") {
			modes++
		}
	}
	if modes != 1 {
		t.Errorf("env %q: MODE %d times, want once", entries, modes)
	}
	argv, err := commandLine(pod, c, vars, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"run", "--routes=/etc/kubeconfig"}; !slices.Equal(argv, want) {
		t.Errorf("commandLine() = %q, want %q", argv, want)
	}
}

// TestKubeletEnv: a container's process gets KubeletConfig.Env, behind its
// own variables; an entry with a valueFrom is refused by NewKubelet, with
// an error that names it.
func TestKubeletEnv(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{Env: []corev1.EnvVar{{Name: "ROUTES", Value: "from-node"}, {Name: "MODE", Value: "node"}}})
	pod := servePod("env", 1)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Command = []string{"sh", "-c", `echo "$ROUTES $MODE"`}
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "MODE", Value: "own"})
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, 0, cluster.ContainerStarted, "env")
	waitLogLine(t, k, "env", "from-node own")

	_, err := NewKubelet(KubeletConfig{Env: []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}})
	if err == nil || !strings.Contains(err.Error(), "NODE") {
		t.Errorf("NewKubelet() with a valueFrom: error = %v, want one naming NODE", err)
	}
}

func TestContainerEnvUnsupported(t *testing.T) {
	t.Parallel()
	c := &corev1.Container{Name: "app", Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{Key: "token"}}}}}
	if _, _, err := containerEnv(&corev1.Pod{}, c, "", nil); err == nil || !strings.Contains(err.Error(), "TOKEN") {
		t.Errorf("containerEnv() error = %v, want one naming TOKEN", err)
	}
}

// TestCommandLineImage: a container without a command runs the command
// that its pod's annotation gives, else the one its image maps to, then its
// args; with neither, the error names the container and the image and says
// how to map it.
func TestCommandLineImage(t *testing.T) {
	t.Parallel()
	c := &corev1.Container{Name: "web", Image: "nginx:1.27", Args: []string{"-g", "daemon off;"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}}
	_, err := commandLine(pod, c, nil, nil)
	for _, want := range []string{"container web", `"nginx:1.27"`, "--image-command 'nginx:1.27=CMD ARGS…'", "closingtime.dev/command.web"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("commandLine() error = %v, want one containing %s", err, want)
		}
	}
	images := map[string][]string{"nginx:1.27": {"/usr/sbin/nginx"}}
	argv, err := commandLine(pod, c, nil, images)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/sbin/nginx", "-g", "daemon off;"}; !slices.Equal(argv, want) {
		t.Errorf("commandLine() with an image mapping = %q, want %q", argv, want)
	}

	// The annotation wins over the image mapping, for its container only,
	// and its $(VAR) references expand.
	pod.Annotations = map[string]string{
		CommandAnnotationPrefix + "web":   `./nginx-local --addr="$(POD_IP):80" 'a b'`,
		CommandAnnotationPrefix + "other": "ignored",
	}
	argv, err = commandLine(pod, c, map[string]string{"POD_IP": "127.77.0.5"}, images)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"./nginx-local", "--addr=127.77.0.5:80", "a b", "-g", "daemon off;"}; !slices.Equal(argv, want) {
		t.Errorf("commandLine() with an annotation = %q, want %q", argv, want)
	}
	// A container's own command wins over both.
	withCommand := c.DeepCopy()
	withCommand.Command = []string{"nginx"}
	if argv, err := commandLine(pod, withCommand, nil, images); err != nil || argv[0] != "nginx" {
		t.Errorf("commandLine() with a command = %q, %v; want nginx first", argv, err)
	}
	pod.Annotations[CommandAnnotationPrefix+"web"] = "run 'unclosed"
	if _, err := commandLine(pod, c, nil, images); err == nil || !strings.Contains(err.Error(), "closingtime.dev/command.web") {
		t.Errorf("commandLine() with a bad annotation: error = %v, want one naming the annotation", err)
	}
}

// TestKubeletNoImageCommand: the kubelet refuses a pod whose container has
// no command and no mapping, with an error that names the pod, the
// container and the image; the annotation makes the same pod run.
func TestKubeletNoImageCommand(t *testing.T) {
	t.Parallel()
	k, log := newKubelet(t, KubeletConfig{})
	pod := servePod("mapped", 1)
	command := pod.Spec.Containers[0].Command
	pod.Spec.Containers[0].Command = nil
	err := k.SyncPod(pod)
	for _, want := range []string{"pod default/mapped", "container app", `image "closingtime"`, "--image-command"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SyncPod() error = %v, want one containing %s", err, want)
		}
	}
	pod.Annotations = map[string]string{CommandAnnotationPrefix + "app": strings.Join(command, " ")}
	if err := k.SyncPod(pod); err != nil {
		t.Fatal(err)
	}
	e, _ := waitFor(t, log, 0, cluster.ContainerStarted, "mapped")
	if e.Fields["pid"] == "" {
		t.Errorf("ContainerStarted without a pid: %v", e)
	}
}

func TestParseImageCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantImage string
		wantArgv  []string
		wantErr   string
	}{
		{name: "plain", in: "web:1.2=/usr/bin/server --port 8080", wantImage: "web:1.2", wantArgv: []string{"/usr/bin/server", "--port", "8080"}},
		{name: "digest and registry", in: "registry.example.com:5000/team/web@sha256:abc=server", wantImage: "registry.example.com:5000/team/web@sha256:abc", wantArgv: []string{"server"}},
		{name: "equals in the command", in: "web=server --listen=$(POD_IP):8080", wantImage: "web", wantArgv: []string{"server", "--listen=$(POD_IP):8080"}},
		{name: "blanks collapse", in: "web=  a \t b\n", wantImage: "web", wantArgv: []string{"a", "b"}},
		{name: "single quotes", in: `web=sh -c 'exec server "$PORT" | tee'`, wantImage: "web", wantArgv: []string{"sh", "-c", `exec server "$PORT" | tee`}},
		{name: "double quotes", in: `web=echo "a 'b' \"c\" \\ \n"`, wantImage: "web", wantArgv: []string{"echo", `a 'b' "c" \ \n`}},
		{name: "adjacent quotes join", in: `web=a'b c'"d"e`, wantImage: "web", wantArgv: []string{"ab cde"}},
		{name: "empty quoted word", in: `web=run ''`, wantImage: "web", wantArgv: []string{"run", ""}},
		{name: "backslash", in: `web=run a\ b`, wantImage: "web", wantArgv: []string{"run", "a b"}},
		{name: "no equals", in: "web server", wantErr: "want IMAGE=CMD"},
		{name: "no image", in: "=server", wantErr: "want IMAGE=CMD"},
		{name: "no command", in: "web= ", wantErr: "no command"},
		{name: "unclosed single", in: "web=run 'a", wantErr: "unclosed '"},
		{name: "unclosed double", in: `web=run "a\"`, wantErr: `unclosed "`},
		{name: "trailing backslash", in: `web=run \`, wantErr: "trailing"},
		{name: "pipe", in: "web=server | tee log", wantErr: "shell operator"},
		{name: "and", in: "web=a && b", wantErr: "shell operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			image, argv, err := ParseImageCommand(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ParseImageCommand(%q) = %q, %q, %v; want an error containing %q", tt.in, image, argv, err, tt.wantErr)
				}
				return
			}
			if err != nil || image != tt.wantImage || !slices.Equal(argv, tt.wantArgv) {
				t.Errorf("ParseImageCommand(%q) = %q, %q, %v; want %q, %q", tt.in, image, argv, err, tt.wantImage, tt.wantArgv)
			}
		})
	}
}
