// Package controlplanetest gives the tests of a package one real control
// plane (etcd, kube-apiserver, kube-controller-manager), built through the
// cache of package controlplane and started on loopback on first use.
// Under -short, every test that asks for it skips.
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

// built is the test binary's build of the control plane, made by the
// first test that needs it.
var built struct {
	once sync.Once
	bins controlplane.Binaries
	err  error
}

// shared is the control plane of the test binary, started by the first
// test that needs it and stopped by Stop.
var shared struct {
	once sync.Once
	cp   *controlplane.ControlPlane
	dir  string
	err  error
}

// Binaries returns the control plane's programs, built through the cache
// of package controlplane on first use. It skips the test under -short,
// which runs no control plane, and where the control plane cannot be
// built (no go command, no module proxy); it fails the test where the
// build failed.
func Binaries(t testing.TB) controlplane.Binaries {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs a real control plane (etcd, kube-apiserver, kube-controller-manager)")
	}
	built.once.Do(func() {
		dir, err := controlplane.DefaultCacheDir()
		if err != nil {
			built.err = err
			return
		}
		built.bins, built.err = controlplane.Build(context.Background(), dir)
	})
	if errors.Is(built.err, controlplane.ErrUnavailable) {
		t.Skipf("no real control plane: %v", built.err)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bins
}

// Shared returns the test binary's control plane, starting it on first
// use with the programs of [Binaries], which skips the test under -short
// and where they cannot be built. It fails the test where the control
// plane did not start.
func Shared(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	bins := Binaries(t)
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "closingtime-controlplane"); shared.err != nil {
			return
		}
		shared.cp, shared.err = controlplane.Start(context.Background(), controlplane.Config{Binaries: bins, Dir: shared.dir})
	})
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
