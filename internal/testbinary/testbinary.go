// Package testbinary builds the closingtime command once per test binary,
// for tests that run it as a real process: the lab server, pods of the
// embedded cluster, the targets of the load generator. It also runs the
// command and reads its JSON log as it is written, and drives HTTP/1.1
// connections to the server by hand, so that tests can wait for an event
// and choose when each request is sent.
package testbinary

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Main builds cmd/closingtime, copies it into a temporary directory, sets
// *path to the copy, runs the tests and removes the directory. It returns
// the exit status for os.Exit; call it from TestMain:
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
	if err := build(*path); err != nil {
		fmt.Fprintf(os.Stderr, "build closingtime: %v\n", err)
		return 1
	}
	return m.Run()
}

// build writes the closingtime command of the module the test runs in to
// path. It builds into a directory of the user's cache kept for that
// module, where go build links again only when the command's code
// changed, so that only the first of the test binaries that run it links
// (a link of closingtime takes about 10 s of CPU). The go command's
// temporary files go to that directory too: go build then renames its
// output into place, so test binaries that build at once each see a whole
// binary. The tests run a copy, which no later build rewrites.
func build(path string) error {
	dir, err := cacheDir()
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	cached := filepath.Join(dir, "closingtime")
	cmd := exec.Command("go", "build", "-o", cached, "github.com/closingtime-dev/closingtime/cmd/closingtime")
	cmd.Env = append(os.Environ(), "GOTMPDIR="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return copyFile(path, cached)
}

// cacheDir returns the directory of the user's cache that holds the
// command built from the module in the working directory: one per
// checkout, so that tests of two checkouts never run each other's build.
func cacheDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(out))))
	return filepath.Join(cache, "closingtime", "testbinary", hex.EncodeToString(sum[:8])), nil
}

// copyFile copies the executable at src to a new file at dst.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
