package lint

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// Annotations that closingtime reads on workloads (on the object or on its
// pod template) and, for IgnoreAnnotation, on any object.
const (
	// IgnoreAnnotation lists, comma-separated, the IDs of the rules whose
	// findings on the annotated object are suppressed.
	IgnoreAnnotation = "closingtime.dev/ignore"
	// MaxRequestSecondsAnnotation declares the longest request the
	// workload serves, in whole seconds, for the termination budget.
	MaxRequestSecondsAnnotation = "closingtime.dev/max-request-seconds"
	// StartupSecondsAnnotation declares how long the workload's containers
	// take to start serving, in whole seconds, for the liveness rules.
	StartupSecondsAnnotation = "closingtime.dev/startup-seconds"
)

// Severity ranks findings; a larger value is more severe.
type Severity int

const (
	// Info marks a weakness that drops requests only in combination with
	// other events.
	Info Severity = iota
	// Warning marks a setting that drops requests under some conditions:
	// load, failures, scale or node maintenance.
	Warning
	// Error marks a setting that drops or blocks requests on every rollout
	// or drain.
	Error
)

var severityNames = [...]string{Info: "info", Warning: "warning", Error: "error"}

func (s Severity) String() string {
	if s < Info || s > Error {
		return fmt.Sprintf("Severity(%d)", int(s))
	}
	return severityNames[s]
}

// ParseSeverity returns the Severity named s: "info", "warning" or "error".
func ParseSeverity(s string) (Severity, error) {
	for i, name := range severityNames {
		if s == name {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("unknown severity %q: accepted values are info, warning, error", s)
}

// MarshalText encodes s as its name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a severity name.
func (s *Severity) UnmarshalText(text []byte) error {
	v, err := ParseSeverity(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Rule is one check. Its fields describe it for output and documentation.
type Rule struct {
	// ID names the rule in findings, flags and annotations, in kebab-case.
	ID string
	// Severity is the severity of the rule's findings; a finding that the
	// manifests cannot confirm is reported one severity lower.
	Severity Severity
	// Title says in a line what the rule finds.
	Title string
	// Why is the phenomenon the finding causes, in a sentence or two.
	Why string
	// Fix is how to remove the cause; a finding may give a fix of its own.
	Fix string

	check func(*index) []finding
}

// finding is what a rule's check reports; the Linter turns it into a
// Finding.
type finding struct {
	at      subject
	field   string // what to change in it, such as a field path
	message string
	fix     string // empty: the rule's Fix
	// unsure marks a finding that the manifests cannot confirm, such as a
	// check the rule cannot see into; it is reported one severity below
	// the rule's.
	unsure bool
}

// subject is what a finding is about: a Kubernetes object, or a part of a
// Dockerfile or supervisord configuration.
type subject interface {
	// String names it, as "Deployment shop/web".
	String() string
	// position returns where field is written in it.
	position(field string) (file string, line int)
	// ignores reports whether the subject suppresses the rule's findings.
	ignores(rule string) bool
}

// object is a Kubernetes object as a subject.
type object struct{ manifest.Object }

func (o object) position(field string) (string, int) { return o.File, o.FieldLine(field) }

// ignores reports whether the object's IgnoreAnnotation lists rule.
func (o object) ignores(rule string) bool {
	return listed(o.Meta().GetAnnotations()[IgnoreAnnotation], rule)
}

// listed reports whether the comma-separated list has id.
func listed(list, id string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == id {
			return true
		}
	}
	return false
}

// Finding is one problem found in one object, Dockerfile or supervisord
// program. Findings are values; they are not errors.
type Finding struct {
	// Rule is the ID of the rule that found it.
	Rule string `json:"rule"`
	// Severity is the rule's severity, or the one below it for a finding
	// that the manifests cannot confirm.
	Severity Severity `json:"severity"`
	// Object names what has the problem: "Deployment shop/web",
	// "Dockerfile stage build", "supervisord program:grpc".
	Object string `json:"object"`
	// File and Line are where the field to change is written, or where its
	// nearest written ancestor is when the fix is to add it.
	File string `json:"file"`
	Line int    `json:"line"`
	// Field is what to change within it: a field path such as
	// "spec.template.spec.containers[0].readinessProbe", a Dockerfile
	// instruction (CMD) or a supervisord key (stopwaitsecs).
	Field string `json:"field"`
	// Message says what is wrong with this object.
	Message string `json:"message"`
	// Why is the phenomenon it causes, from the rule.
	Why string `json:"why"`
	// Fix is how to remove the cause.
	Fix string `json:"fix"`
}

// String formats f on one line: where, severity, object, field, message and
// rule ID.
func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s: %s: %s [%s]", f.File, f.Line, f.Severity, f.Object, f.Field, f.Message, f.Rule)
}

// Rules returns every rule, ordered by ID.
func Rules() []Rule {
	rules := make([]Rule, len(allRules))
	for i, r := range allRules {
		rules[i] = *r
	}
	slices.SortFunc(rules, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) })
	return rules
}

// allRules lists the rules, one per file of this package.
var allRules = []*Rule{
	&readinessProbeMissing,
	&livenessSameAsReadiness,
	&livenessChecksDependency,
	&livenessWithoutStartupProbe,
	&preStopDelayMissing,
	&preStopExecSleep,
	&preStopShorterThanMeasured,
	&terminationBudget,
	&terminationGraceZero,
	&shellPID1,
	&nextManualSigHandle,
	&rollingUpdateUnavailable,
	&singleReplica,
	&pdbMissing,
	&pdbBlocksDrain,
	&pdbSelectsNothing,
	&hpaPDBBlocksDrain,
	&supervisordNoExec,
	&supervisordStopWaitSecs,
	&supervisordOverGrace,
	&drainOverGrace,
	&proxyNotSidecar,
	&sidecarPreStopSleep,
	&grpcHeadlessMaxAge,
}

// Linter checks manifests against a set of rules. It is safe for concurrent
// use.
type Linter struct {
	rules    []*Rule
	suppress []Suppression
	measured []Measurement
}

// New returns a Linter that runs the rules cfg selects. It returns an error
// naming any rule ID in cfg that is not a rule's, and any invalid pattern.
func New(cfg Config) (*Linter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Linter{suppress: cfg.Suppress, measured: cfg.Measured}
	for _, r := range allRules {
		if len(cfg.Enable) > 0 && !slices.Contains(cfg.Enable, r.ID) {
			continue
		}
		if slices.Contains(cfg.Disable, r.ID) {
			continue
		}
		l.rules = append(l.rules, r)
	}
	return l, nil
}

// Rules returns the rules l runs, ordered by ID.
func (l *Linter) Rules() []Rule {
	var rules []Rule
	for _, r := range Rules() {
		if slices.ContainsFunc(l.rules, func(x *Rule) bool { return x.ID == r.ID }) {
			rules = append(rules, r)
		}
	}
	return rules
}

// Lint checks in, relating the objects of each directory to each other as
// one cluster's objects, and returns the findings that neither an ignore annotation or
// comment nor a Suppression of l's Config suppresses, ordered by file, line
// and rule. Objects of kinds no rule reads are ignored.
func (l *Linter) Lint(in Input) []Finding {
	var out []Finding
	for _, ix := range newIndexes(in) {
		ix.measured = l.measured
		for _, r := range l.rules {
			for _, f := range r.check(ix) {
				if found, ok := l.report(r, f); ok {
					out = append(out, found)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), strings.Compare(a.Rule, b.Rule))
	})
	return out
}

// report turns what rule r found into a Finding, or returns false when the
// subject or l's Config suppresses it.
func (l *Linter) report(r *Rule, f finding) (Finding, bool) {
	file, line := f.at.position(f.field)
	files := []string{file}
	if o, ok := f.at.(object); ok && o.Build != "" {
		files = append(files, o.Build+string(filepath.Separator))
	}
	if f.at.ignores(r.ID) || l.suppressed(r.ID, f.at.String(), files...) {
		return Finding{}, false
	}
	fix := f.fix
	if fix == "" {
		fix = r.Fix
	}
	severity := r.Severity
	if f.unsure && severity > Info {
		severity--
	}
	return Finding{
		Rule:     r.ID,
		Severity: severity,
		Object:   f.at.String(),
		File:     file,
		Line:     line,
		Field:    f.field,
		Message:  f.message,
		Why:      r.Why,
		Fix:      fix,
	}, true
}
