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

	"github.com/spf13/cobra"
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

// Exit statuses shared by every command.
const (
	// ExitOK means the command did what was asked and found nothing wrong.
	ExitOK = 0
	// ExitError means the tool itself failed.
	ExitError = 1
	// ExitUsage means a flag, argument or environment value was invalid.
	ExitUsage = 2
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

// exitStatus is returned by a command whose outcome is a specific exit status
// rather than an error, such as `serve`, which exits as its server did.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Run executes the command line args and returns the process exit status.
// It prints any error once, to streams.Err.
func Run(ctx context.Context, args []string, streams Streams) int {
	root := newRootCommand(streams)
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
	var usage *usageError
	if errors.As(err, &usage) {
		return ExitUsage
	}
	return ExitError
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
	// Flag errors are usage errors: exit 2, not 1.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%s: %w (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())}
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
	)
	return root
}
