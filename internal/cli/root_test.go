package cli

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
)

// TestRunExitStatus pins the exit statuses of README.md § Exit status that
// need no run: ExitOK, ExitFailed (a lint finding), ExitUsage and
// ExitError (the output cannot be written). TestRolloutGate has ExitFailed
// for failed requests, TestNotDeployed ExitSetup and
// TestLabInterrupt ExitInterrupted.
func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		out     io.Writer // standard output; nil for a buffer
		want    int
		wantErr string // in standard error; empty: nothing printed
	}{
		{name: "version", args: []string{"version"}, want: ExitOK},
		{name: "lint finding", args: []string{"lint", "../lint/testdata/readiness-probe-missing/invalid-no-probe.yaml"}, want: ExitFailed},
		{name: "output not written", args: []string{"version", "-o", "json"}, out: brokenPipe{}, want: ExitError, wantErr: "closingtime: write |1: broken pipe\n"},
		{name: "unknown command", args: []string{"bogus"}, want: ExitUsage, wantErr: `unknown command "bogus"`},
		{name: "unknown flag", args: []string{"version", "--bogus"}, want: ExitUsage, wantErr: "closingtime: version: unknown flag: --bogus (see closingtime version --help)\n"},
		{name: "unknown root flag", args: []string{"--bogus"}, want: ExitUsage, wantErr: "closingtime: unknown flag: --bogus (see closingtime --help)\n"},
		{name: "misspelt flag", args: []string{"rollout", "--lcoal"}, want: ExitUsage, wantErr: "closingtime: rollout: unknown flag: --lcoal; did you mean --local? (see closingtime rollout --help)\n"},
		{name: "misspelt subcommand flag", args: []string{"cluster", "up", "--nodse", "2"}, want: ExitUsage, wantErr: "closingtime: cluster up: unknown flag: --nodse; did you mean --nodes?"},
		{name: "unknown shorthand", args: []string{"rollout", "-x"}, want: ExitUsage, wantErr: "closingtime: rollout: unknown shorthand flag: 'x' in -x (see closingtime rollout --help)\n"},
		{name: "extra argument", args: []string{"version", "extra"}, want: ExitUsage, wantErr: `unknown command "extra"`},
		{name: "invalid flag value", args: []string{"version", "-o", "yaml"}, want: ExitUsage, wantErr: "accepted values are text, json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var errOut bytes.Buffer
			out := cmp.Or[io.Writer](tt.out, &bytes.Buffer{})
			got := Run(context.Background(), tt.args, Streams{In: strings.NewReader(""), Out: out, Err: &errOut})
			if got != tt.want {
				t.Errorf("exit status %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
			if tt.wantErr == "" && errOut.Len() > 0 || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr %q, want %q", errOut.String(), tt.wantErr)
			}
		})
	}
}

// brokenPipe is a standard output whose reader has gone.
type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}
}

// TestClosestFlag: a misspelt flag is matched to the nearest flag that help
// shows, never to a hidden or deprecated one, however near.
func TestClosestFlag(t *testing.T) {
	flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
	flags.Bool("local", false, "")
	flags.Bool("debug", false, "")
	flags.Bool("debugger", false, "")
	flags.Bool("verbose", false, "")
	if err := flags.MarkHidden("debug"); err != nil {
		t.Fatal(err)
	}
	if err := flags.MarkDeprecated("verbose", "use --log-level"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"lcoal":  "local",
		"debugg": "debugger", // --debug, hidden, is nearer
		"verbos": "",         // only --verbose, deprecated, is near
	} {
		if got := closestFlag(flags, name); got != want {
			t.Errorf("closestFlag(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestKubectlPlugin runs closingtime as kubectl runs its plugin, by the
// name kubectl-closingtime: it works as closingtime does, and its help
// and errors name it as the user typed it.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args             []string
		want             int
		wantOut, wantErr string
	}{
		{args: []string{"lint", "--help"}, want: ExitOK, wantOut: "kubectl closingtime lint [flags]"},
		{args: []string{"lint", "../lint/testdata/readiness-probe-missing/invalid-no-probe.yaml"}, want: ExitFailed, wantOut: "readiness-probe-missing"},
		{args: []string{"lint", "--bogus"}, want: ExitUsage, wantErr: "closingtime: lint: unknown flag: --bogus (see kubectl closingtime lint --help)\n"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			got := Main(context.Background(), append([]string{"/usr/local/bin/" + KubectlPlugin}, tt.args...), Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if got != tt.want || !strings.Contains(out.String(), tt.wantOut) || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("exit %d, stdout:\n%s\nstderr %q\nwant %d, %q in stdout, %q in stderr", got, out.String(), errOut.String(), tt.want, tt.wantOut, tt.wantErr)
			}
		})
	}
}
