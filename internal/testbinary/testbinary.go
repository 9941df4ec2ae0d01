// Package testbinary builds the closingtime command once per test binary,
// for tests that run it as a real process: the lab server, pods of the
// embedded cluster, the targets of the load generator.
package testbinary

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds cmd/closingtime into a temporary directory, sets *path to the
// binary, runs the tests and removes the directory. It returns the exit
// status for os.Exit; call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }
func Main(m *testing.M, path *string) int {
	dir, err := os.MkdirTemp("", "closingtime-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*path = filepath.Join(dir, "closingtime")
	build := exec.Command("go", "build", "-o", *path, "github.com/closingtime-dev/closingtime/cmd/closingtime")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build closingtime: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}
