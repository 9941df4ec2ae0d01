package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Check's failures instead of
// failing the test; its Fatalf ends the goroutine as testing's does.
type recorder struct {
	testing.TB
	name          string
	failed, fatal bool
	message       string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }

func (r *recorder) Errorf(format string, args ...any) {
	r.failed = true
	r.message = fmt.Sprintf(format, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	runtime.Goexit()
}

// check runs Check as the test (or subtest) named name with -update set
// to rewrite, on its own goroutine as Fatalf needs, and returns what it
// recorded.
func check(t *testing.T, name string, rewrite bool, path string, got string) *recorder {
	t.Helper()
	saved := *update
	*update = rewrite
	defer func() { *update = saved }()
	r := &recorder{TB: t, name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Check(r, path, []byte(got))
	}()
	<-done
	return r
}

func write(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.golden")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckSame(t *testing.T) {
	path := write(t, "one\ntwo\n")
	if r := check(t, "TestX", false, path, "one\ntwo\n"); r.failed {
		t.Errorf("Check of the golden file's own content failed: %s", r.message)
	}
}

// TestCheckDiffers checks that a difference fails the test, not fatally,
// with the lines that differ and the command that rewrites the file.
func TestCheckDiffers(t *testing.T) {
	path := write(t, "one\ntwo\n")
	r := check(t, "TestRender/table.txt", false, path, "one\nthree\n")
	if !r.failed || r.fatal {
		t.Fatalf("failed = %v, fatal = %v; want a failure that lets the test go on", r.failed, r.fatal)
	}
	for _, want := range []string{path, "-want +got", "two", "three", "go test ./internal/golden -run '^TestRender$' -update rewrites it"} {
		if !strings.Contains(r.message, want) {
			t.Errorf("the message lacks %q:\n%s", want, r.message)
		}
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "one\ntwo\n" {
		t.Errorf("the golden file now holds %q, %v; want it unchanged", data, err)
	}
}

// TestCheckMissing checks that a missing golden file stops the test with
// the command that creates it, and is not created.
func TestCheckMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.golden")
	r := check(t, "TestParse/valid-pod.yaml", false, path, "one\n")
	if !r.fatal {
		t.Fatalf("Check of a missing file did not stop the test (message %q)", r.message)
	}
	for _, want := range []string{path, "go test ./internal/golden -run '^TestParse$' -update creates it"} {
		if !strings.Contains(r.message, want) {
			t.Errorf("the message lacks %q:\n%s", want, r.message)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) = %v; want the file still missing", path, err)
	}
}

// TestCheckUpdate checks that -update rewrites a golden file that
// differs and creates one that is missing, and that the test then passes.
func TestCheckUpdate(t *testing.T) {
	stale := write(t, "one\ntwo\n")
	missing := filepath.Join(t.TempDir(), "new.golden")
	for _, path := range []string{stale, missing} {
		if r := check(t, "TestX", true, path, "one\nthree\n"); r.failed {
			t.Errorf("Check under -update of %s failed: %s", path, r.message)
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != "one\nthree\n" {
			t.Errorf("%s holds %q, %v after -update; want the output", path, data, err)
		}
	}
}
