package lint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var drainOverGrace = Rule{
	ID:       "drain-over-grace",
	Severity: Error,
	Title:    "The server's own drain timeout is longer than the grace period leaves it",
	Why: "A server told to drain for longer than the pod's grace period, less its preStop hook, is still draining when " +
		"the kubelet sends SIGKILL: the requests it meant to finish are cut, and its drain timeout never comes into play.",
	Fix: "Raise terminationGracePeriodSeconds to at least preStop + the server's own pre-stop delay, if any, + the drain timeout + a few seconds, " +
		"or shorten the drain timeout.",
	check: checkDrainOverGrace,
}

// drainFlags are the command-line flags that set a server's drain
// timeout (gunicorn's --graceful-timeout, uvicorn's
// --timeout-graceful-shutdown, closingtime serve's --drain-timeout and the
// common spellings); drainEnv the environment variables. A bare number is
// seconds.
var (
	drainFlags = []string{"--graceful-timeout", "--timeout-graceful-shutdown", "--graceful-shutdown-timeout",
		"--shutdown-timeout", "--shutdown-grace-period", "--drain-timeout", "--grace-period", "--grace"}
	drainEnv = []string{"GRACEFUL_TIMEOUT", "GRACEFUL_SHUTDOWN_TIMEOUT", "SHUTDOWN_TIMEOUT", "SHUTDOWN_GRACE_PERIOD",
		"DRAIN_TIMEOUT", "CT_DRAIN_TIMEOUT", "GRACE_PERIOD"}
	// preStopFlags and preStopEnv set a server's own delay between the
	// signal and its drain (the graceful library's PreStopDelay,
	// closingtime serve's --pre-stop-delay), which comes before the drain.
	preStopFlags = []string{"--pre-stop-delay"}
	preStopEnv   = []string{"CT_PRE_STOP_DELAY", "PRE_STOP_DELAY"}
)

// durationSetting is a duration a container sets, and where.
type durationSetting struct {
	field string // the field path from the container, "args[1]", "env[0].value"
	name  string // the flag or variable
	d     time.Duration
}

// durationSettings returns the durations container c sets with flags on
// its command line (each word of command and args, and of a shell's
// script) and with env in its env.
func durationSettings(c corev1.Container, flags, env []string) []durationSetting {
	// Every word of the command line, with the field it is written in.
	type word struct{ field, text string }
	var words []word
	for _, list := range []struct {
		field string
		words []string
	}{{"command", c.Command}, {"args", c.Args}} {
		for i, arg := range list.words {
			for _, w := range strings.Fields(arg) {
				words = append(words, word{fmt.Sprintf("%s[%d]", list.field, i), w})
			}
		}
	}
	var out []durationSetting
	for j, w := range words {
		for _, flag := range flags {
			value, ok := strings.CutPrefix(w.text, flag+"=")
			if !ok && w.text == flag && j+1 < len(words) {
				value, ok = words[j+1].text, true
			}
			if d, err := drainDuration(value); ok && err == nil {
				out = append(out, durationSetting{w.field, flag, d})
			}
		}
	}
	for i, e := range c.Env {
		for _, name := range env {
			if e.Name == name && e.ValueFrom == nil {
				if d, err := drainDuration(e.Value); err == nil {
					out = append(out, durationSetting{fmt.Sprintf("env[%d].value", i), name, d})
				}
			}
		}
	}
	return out
}

// serverPreStop returns the longest delay between the signal and the drain
// that container c sets for its server (preStopFlags, preStopEnv).
func serverPreStop(c corev1.Container) time.Duration {
	var d time.Duration
	for _, s := range durationSettings(c, preStopFlags, preStopEnv) {
		d = max(d, s.d)
	}
	return d
}

// serverStop returns how long container c's server may take from the stop
// signal to the end of its drain, as its flags and env say: its own
// pre-stop delay and its longest drain timeout (drainFlags, drainEnv).
func serverStop(c corev1.Container) time.Duration {
	var d time.Duration
	for _, s := range durationSettings(c, drainFlags, drainEnv) {
		d = max(d, s.d)
	}
	return serverPreStop(c) + d
}

// drainDuration reads a Go duration, or a bare number of seconds.
func drainDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative %v", d)
	}
	return d, err
}

func checkDrainOverGrace(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		spec := w.template.Spec
		grace, graceSource := w.grace()
		if grace == 0 {
			continue // termination-grace-zero
		}
		for i, c := range spec.Containers {
			preStop, known := preStopSeconds(c)
			delay := serverPreStop(c)
			for _, s := range durationSettings(c, drainFlags, drainEnv) {
				need := time.Duration(preStop+ExitSlackSeconds)*time.Second + delay + s.d
				if need <= time.Duration(grace)*time.Second {
					continue
				}
				steps := fmt.Sprintf("its preStop of %d s", preStop)
				if delay > 0 {
					steps += fmt.Sprintf(", its own pre-stop delay of %g s", delay.Seconds())
				}
				out = append(out, finding{
					at:    object{w.obj},
					field: w.containerPath(i) + "." + s.field,
					message: fmt.Sprintf("container %q drains for up to %g s (%s): with %s and %d s to exit, %g s, "+
						"more than terminationGracePeriodSeconds %d%s", c.Name, s.d.Seconds(), s.name, steps, ExitSlackSeconds, need.Seconds(), grace, graceSource),
					fix: fmt.Sprintf("Set terminationGracePeriodSeconds to at least %d, or shorten %s.",
						int64((need+time.Second-1)/time.Second), s.name),
					unsure: !known,
				})
			}
		}
	}
	return out
}
