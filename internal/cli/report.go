package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/report"
)

type reportFlags struct {
	output string
}

func newReportCommand(streams Streams) *cobra.Command {
	var flags reportFlags
	cmd := &cobra.Command{
		Use:   "report RESULTS",
		Short: "Render saved results of lab or rollout again",
		Long: `Read a results file that closingtime lab or closingtime rollout wrote
(docs/lab.md § results.json) and render it: the comparison table and the
per-run lines (-o text), or the JSON again (-o json).`,
		Example: `  closingtime report results.json
  closingtime report results.json -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("report: want exactly one results file, got %d arguments (see closingtime report --help)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(streams, args[0], flags)
		},
	}
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "output format: text or json")
	return cmd
}

func runReport(streams Streams, path string, flags reportFlags) error {
	if flags.output != "text" && flags.output != "json" {
		return usagef("report: invalid --output %q: accepted values are text, json", flags.output)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	results, err := report.ReadJSON(f)
	if err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	if flags.output == "json" {
		return report.WriteJSON(streams.Out, results)
	}
	return report.WriteText(streams.Out, results)
}
