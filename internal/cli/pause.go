package cli

import (
	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
)

// newPauseCommand is the pause process that the embedded kubelet starts
// for a pod with shareProcessNamespace.
func newPauseCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "pause",
		Short:  "Hold a pod's shared PID namespace as its PID 1, reaping orphans, until SIGTERM (the embedded kubelet runs it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		Run:    func(*cobra.Command, []string) { local.Pause() },
	}
}
