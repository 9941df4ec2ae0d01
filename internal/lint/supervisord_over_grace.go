package lint

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultPriority is supervisord's priority when a program does not set
// it (supervisord configuration reference, [program:x] section).
const DefaultPriority = 999

var supervisordOverGrace = Rule{
	ID:       "supervisord-over-grace",
	Severity: Error,
	Title:    "supervisord's stop of its programs, one after the other, outlasts the grace period",
	Why: "On SIGTERM supervisord stops its programs one at a time, the highest priority first, each given up to its " +
		"stopwaitsecs before SIGKILL. The pod's grace period must cover the preStop hook and all of them in a row; " +
		"the kubelet kills whatever is still running when it ends, the last programs in the order first.",
	Fix: "Raise terminationGracePeriodSeconds to at least preStop + the sum of the programs' stopwaitsecs, or lower the " +
		"stopwaitsecs of the programs that need less.",
	check: checkSupervisordOverGrace,
}

// supervisordConfig returns the base name of the configuration file that
// container c's supervisord reads (-c FILE, --configuration FILE), or
// supervisord.conf, its default, and whether c runs supervisord.
func supervisordConfig(c corev1.Container) (string, bool) {
	argv, _ := process(c)
	argv = stripInit(argv)
	if script, ok := shellScript(argv); ok {
		argv = lastCommand(strings.TrimPrefix(strings.TrimSpace(script), "exec "))
	}
	if len(argv) == 0 || path.Base(argv[0]) != "supervisord" {
		return "", false
	}
	for i, a := range argv[1:] {
		switch {
		case (a == "-c" || a == "--configuration") && i+2 < len(argv):
			return path.Base(argv[i+2]), true
		case strings.HasPrefix(a, "--configuration="):
			return path.Base(strings.TrimPrefix(a, "--configuration=")), true
		case strings.HasPrefix(a, "-c") && len(a) > 2:
			return path.Base(a[2:]), true
		}
	}
	return "supervisord.conf", true
}

// stopWait returns a program's priority and stopwaitsecs, with
// supervisord's defaults.
func stopWait(p *program) (priority, wait int64) {
	priority, wait = DefaultPriority, DefaultStopWaitSecs
	if v, err := strconv.ParseInt(p.settings["priority"].value, 10, 64); err == nil {
		priority = v
	}
	if v, err := strconv.ParseInt(p.settings["stopwaitsecs"].value, 10, 64); err == nil {
		wait = v
	}
	return priority, wait
}

func checkSupervisordOverGrace(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		spec := w.template.Spec
		grace, graceSource := w.grace()
		if grace == 0 {
			continue // termination-grace-zero
		}
		for _, c := range spec.Containers {
			config, ok := supervisordConfig(c)
			if !ok {
				continue
			}
			var programs []*program
			for _, p := range ix.supervised {
				if path.Base(p.file) == config {
					programs = append(programs, p)
				}
			}
			if len(programs) == 0 {
				continue
			}
			// supervisord sorts its groups by priority, in the order of the
			// configuration among equals, and stops them from the end,
			// each after the one before has stopped (stop_groups).
			slices.SortStableFunc(programs, func(a, b *program) int {
				pa, _ := stopWait(a)
				pb, _ := stopWait(b)
				return cmp.Compare(pa, pb)
			})
			slices.Reverse(programs)
			preStop, known := preStopSeconds(c)
			need := preStop
			var steps []string
			for _, p := range programs {
				priority, wait := stopWait(p)
				need += wait
				steps = append(steps, fmt.Sprintf("%s (priority %d, stopwaitsecs %d)", p.name, priority, wait))
			}
			if need <= grace {
				continue
			}
			out = append(out, finding{
				at:    object{w.obj},
				field: w.specPath() + ".terminationGracePeriodSeconds",
				message: fmt.Sprintf("container %q runs supervisord (%s), which stops its programs one after the other, %s: "+
					"with the preStop of %d s, up to %d s, more than terminationGracePeriodSeconds %d%s",
					c.Name, config, strings.Join(steps, " then "), preStop, need, grace, graceSource),
				fix:    fmt.Sprintf("Set terminationGracePeriodSeconds to at least %d, or lower the stopwaitsecs of the programs that need less.", need),
				unsure: !known,
			})
		}
	}
	return out
}
