package lint

import (
	"fmt"
	"strings"
)

var supervisordNoExec = Rule{
	ID:       "supervisord-no-exec",
	Severity: Error,
	Title:    "A supervisord program runs the server under a shell or a package manager",
	Why: "supervisord sends the stop signal to the process it started. A shell does not pass it on (sh, and bash before 5.1; bash 5.1 and later replace themselves with a script's last command, which leaves it to the image's bash), so the server never runs " +
		"its shutdown handler and is killed when stopwaitsecs runs out; npm and yarn exit at once and take the server with them. " +
		"Either way requests in flight are cut.",
	Fix: "End the command with exec, as command=bash -c \"… && exec python server.py\", so that the server replaces the shell; " +
		"or set stopasgroup=true so that the signal reaches the whole process group.",
	check: checkSupervisordNoExec,
}

func checkSupervisordNoExec(ix *index) []finding {
	var out []finding
	for _, p := range ix.programs {
		if strings.EqualFold(p.settings["stopasgroup"].value, "true") {
			continue
		}
		msg := firstProcessProblem(splitWords(p.settings["command"].value))
		if msg == "" {
			continue
		}
		out = append(out, finding{at: p, field: "command", message: fmt.Sprintf("%s, and stopasgroup is off", msg)})
	}
	return out
}

// splitWords splits a command line into words as a POSIX shell (and
// supervisord, with Python's shlex) does: at unquoted blanks, with single
// quotes, double quotes and backslash escapes.
func splitWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			w.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
