package controlplane

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The versions the control plane is built at: the Kubernetes release that
// matches closingtime's k8s.io/api, and the etcd it is tested with.
const (
	KubernetesVersion = "1.37.2"
	EtcdVersion       = "3.7.3"
)

// ErrUnavailable is wrapped by the errors of Build when this machine
// cannot build the control plane: it has no go command, or the Go module
// proxy cannot be reached to download the modules.
var ErrUnavailable = errors.New("controlplane: cannot be built here")

// modules holds the go.mod and go.sum of the two modules that build the
// binaries, written out as modules/<name>/go.mod and go.sum. They pin every
// dependency: etcd's server module at EtcdVersion; k8s.io/kubernetes at
// KubernetesVersion, with its k8s.io/* replacements (./staging/… in its own
// go.mod, which `go install` refuses) pointed at their published
// v0.37.2 tags. Each was made by `go mod tidy` on a go.mod that requires
// the module and lists its commands in a tool directive.
//
//go:embed modules/etcd.mod modules/etcd.sum modules/kubernetes.mod modules/kubernetes.sum
var modules embed.FS

// Binaries are the paths of the control plane's programs.
type Binaries struct {
	Etcd, APIServer, ControllerManager string
}

// DefaultCacheDir returns the directory that Build keeps the binaries of
// these versions in: closingtime/controlplane/<versions> in the user's
// cache directory ($XDG_CACHE_HOME or ~/.cache on Linux).
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	return filepath.Join(dir, "closingtime", "controlplane", "kubernetes-v"+KubernetesVersion+"-etcd-v"+EtcdVersion), nil
}

// Build returns the binaries in dir, building them there first if they are
// not all present. It builds with the go command on PATH, from the Go
// module proxy (GOPROXY), with CGO_ENABLED=0 and -trimpath, so that the Go
// build cache serves a second build: a first build downloads about 1 GB of
// modules and compiles for minutes; a build with a warm cache takes
// seconds. Concurrent Builds of one dir, in any process, build once.
//
// An error wraps ErrUnavailable when there is no go command or the modules
// cannot be downloaded; any other error is a failed build, with the go
// command's output.
func Build(ctx context.Context, dir string) (Binaries, error) {
	bin := filepath.Join(dir, "bin")
	b := Binaries{Etcd: filepath.Join(bin, "etcd"), APIServer: filepath.Join(bin, "kube-apiserver"),
		ControllerManager: filepath.Join(bin, "kube-controller-manager")}
	if b.present() {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, fmt.Errorf("controlplane: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return b, err
	}
	defer unlock()
	if b.present() {
		return b, nil // another process built them while this one waited
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return b, fmt.Errorf("%w: no go command: %w", ErrUnavailable, err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return b, fmt.Errorf("controlplane: %w", err)
	}
	defer os.RemoveAll(tmp)
	version := "k8s.io/component-base/version"
	major, minor, _ := strings.Cut(KubernetesVersion, ".")
	minor, _, _ = strings.Cut(minor, ".")
	kubeLdflags := fmt.Sprintf("-s -w -X %[1]s.gitVersion=v%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		version, KubernetesVersion, major, minor)
	for _, m := range []struct {
		module, pkg, ldflags, out string
	}{
		{"etcd", "go.etcd.io/etcd/server/v3", "-s -w", b.Etcd},
		{"kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", kubeLdflags, b.APIServer},
		{"kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", kubeLdflags, b.ControllerManager},
	} {
		src := filepath.Join(tmp, "src", m.module)
		if err := writeModule(src, m.module); err != nil {
			return b, err
		}
		if out, err := goCommand(ctx, gobin, src, "mod", "download"); err != nil {
			return b, fmt.Errorf("%w: download the modules of %s: %w\n%s", ErrUnavailable, m.pkg, err, out)
		}
		// Each binary is built beside its destination and renamed into
		// place, so that a binary present is a binary complete.
		part := filepath.Join(tmp, "out", filepath.Base(m.out))
		if out, err := goCommand(ctx, gobin, src, "build", "-trimpath", "-ldflags", m.ldflags, "-o", part, m.pkg); err != nil {
			return b, fmt.Errorf("controlplane: build %s: %w\n%s", m.pkg, err, out)
		}
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return b, fmt.Errorf("controlplane: %w", err)
		}
		if err := os.Rename(part, m.out); err != nil {
			return b, fmt.Errorf("controlplane: %w", err)
		}
	}
	return b, nil
}

// present reports whether every binary exists.
func (b Binaries) present() bool {
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// writeModule writes the embedded module name into dir.
func writeModule(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	for ext, file := range map[string]string{".mod": "go.mod", ".sum": "go.sum"} {
		data, err := modules.ReadFile("modules/" + name + ext)
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
	}
	return nil
}

// goCommand runs the go command in dir and returns its combined output.
// The build ignores the caller's workspace and module flags, and links no
// C.
func goCommand(ctx context.Context, gobin, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
