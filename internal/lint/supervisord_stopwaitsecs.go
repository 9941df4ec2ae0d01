package lint

import (
	"fmt"
	"strconv"
)

// DefaultStopWaitSecs is supervisord's stopwaitsecs when a program does not
// set it: how long it waits after the stop signal before SIGKILL
// (supervisord configuration reference, [program:x] section,
// https://supervisord.org/configuration.html).
const DefaultStopWaitSecs = 10

var supervisordStopWaitSecs = Rule{
	ID:       "supervisord-stopwaitsecs",
	Severity: Error,
	Title:    "supervisord kills a program before its declared drain can finish",
	Why: "supervisord sends SIGKILL stopwaitsecs after the stop signal; a server still finishing its requests then " +
		"has them cut. The rule needs the drain declared in the program's section, as a comment " +
		"\"; closingtime.dev/max-request-seconds: N\".",
	Fix: "Raise stopwaitsecs to at least the drain + a few seconds, and keep the pod's terminationGracePeriodSeconds " +
		"above preStop + stopwaitsecs.",
	check: checkSupervisordStopWaitSecs,
}

func checkSupervisordStopWaitSecs(ix *index) []finding {
	var out []finding
	for _, p := range ix.programs {
		if p.drain == nil {
			continue
		}
		drain, err := strconv.ParseInt(p.drain.value, 10, 64)
		if err != nil || drain < 0 {
			out = append(out, finding{at: programLine{p, p.drain.line}, field: MaxRequestSecondsAnnotation,
				message: fmt.Sprintf("%q is not a whole number of seconds", p.drain.value),
				fix:     "Write the drain in whole seconds, such as \"; closingtime.dev/max-request-seconds: 25\"."})
			continue
		}
		wait, source := int64(DefaultStopWaitSecs), " (the default)"
		if s, ok := p.settings["stopwaitsecs"]; ok {
			v, err := strconv.ParseInt(s.value, 10, 64)
			if err != nil {
				continue // supervisord itself refuses to start
			}
			wait, source = v, ""
		}
		need := drain + ExitSlackSeconds
		if wait >= need {
			continue
		}
		out = append(out, finding{
			at:    p,
			field: "stopwaitsecs",
			message: fmt.Sprintf("stopwaitsecs %d%s is shorter than the program's drain of %d s (%s) + %d s to exit",
				wait, source, drain, MaxRequestSecondsAnnotation, ExitSlackSeconds),
			fix: fmt.Sprintf("Set stopwaitsecs=%d or more, and keep the pod's terminationGracePeriodSeconds above preStop + stopwaitsecs.", need),
		})
	}
	return out
}

// programLine is a program reported at one line of its section.
type programLine struct {
	*program
	line int
}

func (p programLine) position(string) (string, int) { return p.file, p.line }
