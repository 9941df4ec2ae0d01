package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

type versionFlags struct {
	output string
}

// versionInfo is what `closingtime version -o json` prints; its field names
// are stable.
type versionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func newVersionCommand(streams Streams) *cobra.Command {
	var flags versionFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of closingtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVersion(streams, flags)
		},
	}
	cmd.Flags().StringVarP(&flags.output, "output", "o", "text", "output format: text or json")
	return cmd
}

// buildVersion returns what `closingtime version` reports of this
// binary, from the build information Go stamps into it.
func buildVersion() versionInfo {
	info := versionInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Revision = s.Value
			}
		}
	}
	return info
}

// String returns the version and the revision's first 12 digits, as
// `closingtime version` prints them: "v1.2.0", "(devel) (0123456789ab)".
func (v versionInfo) String() string {
	if v.Revision == "" {
		return v.Version
	}
	return fmt.Sprintf("%s (%.12s)", v.Version, v.Revision)
}

func runVersion(streams Streams, flags versionFlags) error {
	info := buildVersion()
	switch flags.output {
	case "text":
		fmt.Fprintf(streams.Out, "closingtime %s %s %s\n", info, info.GoVersion, info.Platform)
		return nil
	case "json":
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	default:
		return usagef("version: invalid --output %q: accepted values are text, json", flags.output)
	}
}
