// Package golden compares test output with golden files under testdata:
// a test renders what it checks, and [Check] compares it byte for byte
// with the file that holds what it should be. Run the tests with -update
// to rewrite the golden files from the output instead, then review the
// change with git diff before committing it.
//
// The package registers the -update flag, so a test binary that imports
// it must not define a flag of that name.
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Check compares got with the golden file at path, relative to the test's
// package directory (testdata/…). A difference fails the test with
// t.Errorf, giving it line by line (-want +got) and the go test command
// that rewrites the file; a missing or unreadable file fails it with
// t.Fatalf, naming the command that creates it.
//
// Under -update, Check first writes got to path, creating or replacing
// the file (never its directory), so the comparison then passes.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	diff, err := compare(path, got, *update)
	if err != nil {
		t.Fatalf("%v (%s creates it)", err, command(t.Name()))
	}
	if diff != "" {
		t.Errorf("%s differs (-want +got; %s rewrites it):\n%s", path, command(t.Name()), diff)
	}
}

// compare writes got to path if rewrite is set, then returns how path's
// content differs from got, "" if it does not.
func compare(path string, got []byte, rewrite bool) (string, error) {
	if rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			return "", err
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return cmp.Diff(string(want), string(got)), nil
}

// command returns the go test command that reruns the top-level test of
// the test (or subtest) named name with -update, naming the package by
// its directory below the module's root, the nearest directory above the
// working directory with a go.mod file. If there is none, the package is
// the working directory: ".".
func command(name string) string {
	test, _, _ := strings.Cut(name, "/")
	return fmt.Sprintf("go test %s -run '^%s$' -update", packageDir(), test)
}

// packageDir returns the working directory as a go test package pattern
// relative to the module's root ("./internal/report"), or "." if no
// directory above it holds a go.mod file.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "."
		}
		root = parent
	}
}
