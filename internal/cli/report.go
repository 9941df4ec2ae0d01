package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/report"
	"github.com/closingtime-dev/closingtime/internal/results"
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
(docs/lab.md § results.json) and render it on standard output: the
comparison table and the per-run lines with the causes of the failed
requests (-o text), the JSON again (-o json), or one self-contained HTML
page with the table and a timeline per run (-o html, docs/report.md).
Each run's failed requests are diagnosed again by this version's rules
(docs/diagnosis.md); a file written before the diagnosis shows no causes.`,
		Example: `  closingtime report results.json
  closingtime report results.json -o json
  closingtime report results.json -o html > report.html`,
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
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "output format: text, json or html")
	return cmd
}

func runReport(streams Streams, path string, flags reportFlags) error {
	var write func(io.Writer, *results.Results) error
	switch flags.output {
	case "text":
		write = report.WriteText
	case "json":
		write = results.Write
	case "html":
		write = report.WriteHTML
	default:
		return usagef("report: invalid --output %q: accepted values are text, json, html", flags.output)
	}
	f, err := os.Open(path)
	if err != nil {
		return inputError("report: "+path, err)
	}
	defer f.Close()
	res, err := results.Read(f)
	if err != nil {
		return inputError("report: "+path, err)
	}
	rediagnose(res)
	return write(streams.Out, res)
}

// rediagnose gives each run of r that has a diagnosis the diagnosis of
// this version's rules, from the requests and the timeline it holds; a
// run without one (results written before the diagnosis) stays without.
func rediagnose(r *results.Results) {
	for i := range r.Scenarios {
		for j := range r.Scenarios[i].Runs {
			if run := &r.Scenarios[i].Runs[j]; run.Diagnosis != nil {
				run.Diagnosis = diagnosis.Diagnose(run, run.Diagnosis.Requests)
			}
		}
	}
}
