// Package controlplanetest gives the tests of a package one real control
// plane (etcd, kube-apiserver, kube-controller-manager), built through the
// cache of package controlplane and started on loopback on first use.
package controlplanetest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/controlplane"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// shared is the control plane of the test binary, started by the first
// test that needs it and stopped by Stop.
var shared struct {
	once sync.Once
	cp   *controlplane.ControlPlane
	dir  string
	err  error
	skip bool
}

// Shared returns the test binary's control plane, building it through the
// cache and starting it on first use. It skips the test where the control
// plane cannot be built (no go command, no module proxy), and fails it
// where it could be built but did not start.
func Shared(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		dir, err := controlplane.DefaultCacheDir()
		if err != nil {
			shared.err = err
			return
		}
		bins, err := controlplane.Build(ctx, dir)
		if errors.Is(err, controlplane.ErrUnavailable) {
			shared.err, shared.skip = err, true
			return
		}
		if err != nil {
			shared.err = err
			return
		}
		if shared.dir, err = os.MkdirTemp("", "closingtime-controlplane"); err != nil {
			shared.err = err
			return
		}
		shared.cp, shared.err = controlplane.Start(ctx, controlplane.Config{Binaries: bins, Dir: shared.dir})
	})
	if shared.skip {
		t.Skipf("no real control plane: %v", shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cp
}

// Client returns an administrator's client of the shared control plane.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	return ClientOf(t, Shared(t).Kubeconfig)
}

// ClientOf returns a client of the kubeconfig at path, such as that of a
// control plane that a test started itself.
func ClientOf(t testing.TB, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// Main builds the closingtime command for the tests' pods as
// testbinary.Main does, setting *binary, runs the tests, and stops the
// shared control plane. It returns the exit status for os.Exit; call it
// from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(controlplanetest.Main(m, &binary)) }
func Main(m *testing.M, binary *string) int {
	code := testbinary.Main(m, binary)
	Stop()
	return code
}

// Stop stops the shared control plane, if a test started it, and removes
// its files. Call it from TestMain after m.Run.
func Stop() {
	if shared.cp != nil {
		shared.cp.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}
