package target_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// binary is the closingtime command that TestMain builds, which the tests
// run as real processes.
var binary string

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m, &binary)) }

// serve starts `closingtime serve args...` with env added to the
// environment and, if attr is not nil, those process attributes.
func serve(t *testing.T, attr *syscall.SysProcAttr, env []string, args ...string) *testbinary.Proc {
	t.Helper()
	return testbinary.Start(t, binary, attr, env, append([]string{"serve"}, args...)...)
}
