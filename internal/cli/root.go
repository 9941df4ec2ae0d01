// Package cli implements the closingtime command line: one file per command,
// each binding its flags to an unexported struct and calling one entry point
// of the package that does the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// Streams are the standard streams a command reads and writes, so that tests
// can capture them.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// StdStreams returns the process's standard streams.
func StdStreams() Streams {
	return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
}

// Exit statuses shared by every command (README.md § Exit status), and
// ExitInterrupted. `serve` alone exits as its server did.
const (
	// ExitOK means the command did what was asked and found nothing wrong.
	ExitOK = 0
	// ExitFailed means the command ran and what it found fails its gate:
	// lint findings at or above --threshold, a run with more failed requests
	// than --max-failures allows.
	ExitFailed = 1
	// ExitUsage means a flag, argument, input file or environment value
	// was invalid, or an output file could not be written where it was
	// named; nothing ran.
	ExitUsage = 2
	// ExitSetup means the setup did not run, so nothing was measured: the
	// workload of a run that sends traffic did not deploy (pods that never
	// all became ready, a Service that never answered, containers that
	// exited before the action: scenario.DeployError), or the target of
	// load --wait-serving never answered (setupError).
	ExitSetup = 3
	// ExitError means the tool itself failed: a cluster that did not come
	// up or could not be reached, a file whose writing failed after the
	// run.
	ExitError = 4
)

// usageError marks an error in the command line or environment; it maps to
// ExitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef formats a usageError.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// inputError returns a usage error for an input that could not be read:
// prefix (the command, then the file or flag and file) and the reason,
// spelled as [manifest.StripPath] does, since prefix names the file:
// "report: results.json: no such file or directory".
func inputError(prefix string, err error) error {
	return usagef("%s: %w", prefix, manifest.StripPath(err))
}

// positive returns a usage error, named by command, that names flag and
// its value v unless v is above zero.
func positive[T int | int64 | float64 | time.Duration](command, flag string, v T) error {
	if v > 0 {
		return nil
	}
	return usagef("%s: invalid %s %v: must be positive", command, flag, v)
}

// nonNegative returns a usage error, named by command, that names flag and
// its value v if v is below zero.
func nonNegative[T int | int64 | float64 | time.Duration](command, flag string, v T) error {
	if v >= 0 {
		return nil
	}
	return usagef("%s: invalid %s %v: must not be negative", command, flag, v)
}

// setupError marks an error of a setup that did not run, so that nothing
// was measured: a target that never answered. It maps to ExitSetup, as a
// scenario.DeployError does.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// exitStatus is returned by a command whose outcome is a specific exit status
// rather than an error, such as `serve`, which exits as its server did.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// KubectlPlugin is the name under which kubectl finds closingtime as a
// plugin: with the binary installed (or linked) as kubectl-closingtime on
// the PATH, `kubectl closingtime lint …` runs `kubectl-closingtime lint …`.
const KubectlPlugin = "kubectl-closingtime"

// Main runs the command line argv, the program's path then its arguments,
// as Run does. A program named KubectlPlugin calls itself `kubectl
// closingtime` in help and usage.
func Main(ctx context.Context, argv []string, streams Streams) int {
	root := newRootCommand(streams)
	if len(argv) > 0 && strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == KubectlPlugin {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl closingtime"}
	}
	return run(ctx, root, argv[min(1, len(argv)):], streams)
}

// Run executes the command line args and returns the process exit status.
// It prints any error once, to streams.Err.
func Run(ctx context.Context, args []string, streams Streams) int {
	return run(ctx, newRootCommand(streams), args, streams)
}

func run(ctx context.Context, root *cobra.Command, args []string, streams Streams) int {
	root.SetArgs(args)
	// Cobra rejects unknown commands and wrong arguments before any command
	// runs; such errors are usage errors.
	ran := false
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if !ran && !errors.As(err, new(*usageError)) {
		err = &usageError{err}
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintf(streams.Err, "closingtime: %v\n", err)
	switch {
	case errors.As(err, new(*usageError)):
		return ExitUsage
	case errors.As(err, new(*scenario.DeployError)), errors.As(err, new(*setupError)):
		return ExitSetup
	}
	return ExitError
}

// closestFlag returns the name of the flag of flags nearest to name, a
// flag that does not exist, as cobra suggests commands: at most two
// letters added, removed or changed ("lcoal" is "local"); "" when none is.
// It never suggests a hidden or deprecated flag, which help does not show.
func closestFlag(flags *pflag.FlagSet, name string) string {
	best, bestDist := "", 3
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		if d := editDistance(name, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance returns the Levenshtein distance between a and b: the
// fewest letters to add, remove or change to turn one into the other.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			change := prev[j-1]
			if a[i-1] != b[j-1] {
				change++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, change)
		}
		prev = cur
	}
	return prev[len(b)]
}

func newRootCommand(streams Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "closingtime",
		Short: "Closing time for pods, without dropping a request",
		Long: `closingtime measures the requests that Kubernetes rollouts, scale-ins and
node drains drop, reproduces them on one machine with real processes,
signals and TCP, and finds their causes before they ship.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	// Flag errors are usage errors: exit 2, not 1. Run prints the
	// "closingtime: " before the command's name.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		hint := ""
		var unknown *pflag.NotExistError
		if errors.As(err, &unknown) && len(unknown.GetSpecifiedName()) > 1 {
			if name := closestFlag(cmd.Flags(), unknown.GetSpecifiedName()); name != "" {
				hint = "; did you mean --" + name + "?"
			}
		}
		err = fmt.Errorf("%w%s (see %s --help)", err, hint, cmd.CommandPath())
		if cmd.HasParent() {
			err = fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), root.DisplayName()+" "), err)
		}
		return &usageError{err}
	})
	root.AddCommand(
		newVersionCommand(streams),
		newServeCommand(streams),
		newLoadCommand(streams),
		newLintCommand(streams),
		newLabCommand(streams),
		newReportCommand(streams),
		newRolloutCommand(streams),
		newPropagationCommand(streams),
		newClusterCommand(streams),
		newProxyCommand(streams),
		newPauseCommand(),
	)
	return root
}
