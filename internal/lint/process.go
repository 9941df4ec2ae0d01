package lint

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// process returns the argument vector of the container's first process
// and the field that writes it. It is command followed by args; when
// command is unset, the image's ENTRYPOINT runs args, and it is taken to
// exec them, as the entrypoint scripts of official images do. It returns
// nil when neither is set: the process is the image's, which only a
// Dockerfile shows.
func process(c corev1.Container) (argv []string, field string) {
	switch {
	case len(c.Command) > 0:
		return append(append([]string(nil), c.Command...), c.Args...), "command"
	case len(c.Args) > 0:
		return c.Args, "args"
	}
	return nil, ""
}

// shells are the programs that run a script given with -c.
var shells = map[string]bool{"sh": true, "bash": true, "ash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true}

// packageManagers are the programs that run the server as their child.
var packageManagers = map[string]bool{"npm": true, "npx": true, "yarn": true, "pnpm": true}

// initShims forward signals to their child and reap zombies; the
// container's real first process is the one they start.
var initShims = map[string]bool{"tini": true, "dumb-init": true, "catatonit": true}

// stripInit removes an init shim and its options from the front of argv:
// tini [-options] [--] program…
func stripInit(argv []string) []string {
	if len(argv) == 0 || !initShims[path.Base(argv[0])] {
		return argv
	}
	rest := argv[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
		if rest[0] == "--" {
			return rest[1:]
		}
		rest = rest[1:]
	}
	return rest
}

// shellScript returns the script of an argv that runs `sh -c script`
// (any shell, with -c alone or among other single-letter options such as
// -ec), and whether argv is one.
func shellScript(argv []string) (string, bool) {
	if len(argv) < 2 || !shells[path.Base(argv[0])] {
		return "", false
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") || a == "-" || strings.HasPrefix(a, "--") {
			return "", false
		}
		if strings.Contains(a, "c") {
			if i+1 < len(argv) {
				return argv[i+1], true
			}
			return "", false
		}
	}
	return "", false
}

// commandSeparator splits a shell script into its simple commands. It does
// not parse quotes: a separator inside a quoted string splits it too, which
// errs towards seeing more commands than there are.
var commandSeparator = regexp.MustCompile(`&&|\|\||[;&|\n]`)

// lastCommand returns the words of the last simple command of script.
func lastCommand(script string) []string {
	parts := commandSeparator.Split(script, -1)
	for i := len(parts) - 1; i >= 0; i-- {
		if words := strings.Fields(parts[i]); len(words) > 0 {
			return words
		}
	}
	return nil
}

// sleepSeconds returns the seconds of an argv that only sleeps: `sleep N`
// or a shell running `sleep N` as its whole script, with N whole seconds,
// optionally suffixed with s.
func sleepSeconds(argv []string) (int64, bool) {
	if script, ok := shellScript(argv); ok {
		argv = strings.Fields(script)
	}
	if len(argv) != 2 || path.Base(argv[0]) != "sleep" {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(argv[1], "s"), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// preStopSeconds returns how long the container's preStop hook delays the
// stop signal: its sleep action's seconds, or N for an exec of `sleep N`;
// known reports whether that can be told from the manifest (an httpGet or
// another command takes as long as it takes).
func preStopSeconds(c corev1.Container) (seconds int64, known bool) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0, true
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return h.Sleep.Seconds, true
	case h.Exec != nil:
		return sleepSeconds(h.Exec.Command)
	}
	return 0, false
}

// sidecars returns the native sidecars of spec: its init containers with
// restartPolicy Always.
func sidecars(spec corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.InitContainers {
		if cluster.IsSidecar(&c) {
			out = append(out, c)
		}
	}
	return out
}
