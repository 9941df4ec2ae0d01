package lint

import (
	"fmt"
	"path"
	"strings"
)

var shellPID1 = Rule{
	ID:       "shell-pid1",
	Severity: Error,
	Title:    "The container's first process is a shell or a package manager, not the server (in a pod spec or a Dockerfile)",
	Why: "The stop signal goes only to the container's first process. A shell does not pass SIGTERM on (sh, and bash before 5.1; bash 5.1 and later replace themselves with a script's last command, which leaves it to the image's bash), so the server " +
		"never sees it and is killed with SIGKILL when the grace period ends; npm and yarn exit at once on SIGTERM and " +
		"the server dies with them. Either way requests in flight are reset.",
	Fix: "Start the server itself in exec form, such as command: [\"node\", \"server.js\"]; " +
		"in a shell script, start it with exec so that it replaces the shell.",
	check: checkShellPID1,
}

func checkShellPID1(ix *index) []finding {
	var out []finding
	for _, w := range ix.workloads {
		if w.batch() {
			continue // a Job's script serves no requests
		}
		for i, c := range w.template.Spec.Containers {
			argv, field := process(c)
			msg := firstProcessProblem(argv)
			if msg == "" {
				continue
			}
			out = append(out, finding{
				at:      object{w.obj},
				field:   w.containerPath(i) + "." + field,
				message: fmt.Sprintf("container %q: %s", c.Name, msg),
			})
		}
	}
	for _, d := range ix.dockerfiles {
		argv, in := d.process()
		msg := firstProcessProblem(argv)
		if msg == "" {
			continue
		}
		if in.exec == nil {
			msg = "shell form: " + msg
		}
		out = append(out, finding{at: in, field: in.keyword, message: msg})
	}
	return out
}

// firstProcessProblem describes why argv, a container's first process,
// keeps the stop signal from the server, or returns "" when it does not.
// An init shim in front (tini, dumb-init) does not help: it signals the
// shell or package manager, which behaves as it would as PID 1's child.
func firstProcessProblem(argv []string) string {
	argv = stripInit(argv)
	if len(argv) == 0 {
		return ""
	}
	if pm := path.Base(argv[0]); packageManagers[pm] {
		return fmt.Sprintf("%q runs the server as a child of %s", strings.Join(argv, " "), pm)
	}
	script, ok := shellScript(argv)
	if !ok {
		return ""
	}
	last := lastCommand(script)
	if len(last) == 0 || last[0] != "exec" {
		msg := fmt.Sprintf("%s -c %q runs the server as a child of the shell (no exec)", path.Base(argv[0]), script)
		if path.Base(argv[0]) == "bash" {
			// bash 5.1 and later exec the last command of a -c string
			// themselves (its CHANGES, bash-5.1 "one-shot"
			// optimizations); dash and older bash fork it.
			msg += ", unless the image's bash is 5.1 or later, which replaces itself with the script's last command"
		}
		return msg
	}
	if len(last) > 1 && packageManagers[path.Base(last[1])] {
		return fmt.Sprintf("%s -c %q execs %s, which runs the server as its child", path.Base(argv[0]), script, path.Base(last[1]))
	}
	return ""
}
