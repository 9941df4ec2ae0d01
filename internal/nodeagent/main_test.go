package nodeagent

import (
	"os"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/controlplane/controlplanetest"
)

// binary is the closingtime command, built once for the pods of the tests.
var binary string

// TestMain builds closingtime for the pods, runs the tests, and stops the
// control plane they shared.
func TestMain(m *testing.M) { os.Exit(controlplanetest.Main(m, &binary)) }
