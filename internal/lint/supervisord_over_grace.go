package lint

import (
	"cmp"
	"fmt"
	"path"
	"path/filepath"
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

// configPrograms returns the programs of the one configuration named
// config that workload w's supervisord reads: the only one of that name,
// or else the one beside w's manifest or in a ConfigMap w mounts; none if
// that leaves none or several.
func configPrograms(ix *index, w *workload, config string) []*program {
	byFile := map[string][]*program{}
	var files []string
	for _, p := range ix.supervised {
		if path.Base(p.file) != config {
			continue
		}
		if byFile[p.file] == nil {
			files = append(files, p.file)
		}
		byFile[p.file] = append(byFile[p.file], p)
	}
	if len(files) > 1 {
		files = slices.DeleteFunc(files, func(f string) bool {
			if filepath.Dir(f) == filepath.Dir(w.obj.File) {
				return false
			}
			for _, v := range w.template.Spec.Volumes {
				if v.ConfigMap != nil && strings.HasPrefix(f, "ConfigMap "+v.ConfigMap.Name+"/") {
					return false
				}
			}
			return true
		})
	}
	if len(files) != 1 {
		return nil
	}
	return byFile[files[0]]
}

// stopGroup is what supervisord stops at once: a [group:] section's
// programs, or a program of none, with its longest stopwaitsecs.
type stopGroup struct {
	name           string
	priority, wait int64
}

// stopGroups returns the groups of programs in the order supervisord stops
// them: it sorts its groups by priority, in the order of the
// configuration among equals, and stops them from the end, each once the
// one before has stopped (supervisord's stop_groups).
func stopGroups(programs []*program) []stopGroup {
	var groups []stopGroup
	index := map[*program]int{} // of a [group:] section's entry
	for _, p := range programs {
		priority, wait := stopWait(p)
		if g := p.group; g != nil {
			if i, ok := index[g]; ok {
				groups[i].wait = max(groups[i].wait, wait)
				continue
			}
			priority, _ = stopWait(g)
			index[g] = len(groups)
			groups = append(groups, stopGroup{"group:" + g.name, priority, wait})
			continue
		}
		groups = append(groups, stopGroup{p.name, priority, wait})
	}
	slices.SortStableFunc(groups, func(a, b stopGroup) int { return cmp.Compare(a.priority, b.priority) })
	slices.Reverse(groups)
	return groups
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
			programs := configPrograms(ix, w, config)
			if len(programs) == 0 {
				continue
			}
			preStop, known := preStopSeconds(c)
			need := preStop
			var steps []string
			for _, g := range stopGroups(programs) {
				need += g.wait
				steps = append(steps, fmt.Sprintf("%s (priority %d, stopwaitsecs %d)", g.name, g.priority, g.wait))
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

// UncheckedSupervisord returns, for each container of in's workloads
// that runs supervisord, a line saying so when none of its configuration
// is among in's files: its programs' stop order, stopwaitsecs and
// commands went unchecked ("Deployment app (deploy.yaml:12): container
// app runs supervisord with supervisord.conf, which is not among the
// inputs: …").
func UncheckedSupervisord(in Input) []string {
	var out []string
	for _, ix := range newIndexes(in) {
		for _, w := range ix.workloads {
			for _, c := range w.template.Spec.Containers {
				config, ok := supervisordConfig(c)
				if !ok || len(configPrograms(ix, w, config)) > 0 {
					continue
				}
				out = append(out, fmt.Sprintf("%s (%s:%d): container %s runs supervisord with %s, which is not among the inputs: "+
					"its programs were not checked (give the file to lint too, or the directory or ConfigMap that holds it)",
					w.obj, w.obj.File, w.obj.Line, c.Name, config))
			}
		}
	}
	return out
}
