package lint

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config selects the rules a Linter runs and the findings it suppresses.
// The zero Config runs every rule and suppresses nothing.
type Config struct {
	// Enable lists the IDs of the only rules to run; empty means all.
	Enable []string
	// Disable lists the IDs of rules not to run, after Enable.
	Disable []string
	// Suppress lists findings not to report.
	Suppress []Suppression
	// Measured are what rollouts measured, from [Measure], for the rule
	// prestop-shorter-than-measured; none means that rule finds nothing.
	Measured []Measurement
}

// Suppression matches findings not to report. Its empty fields match
// anything; a Suppression with every field empty is invalid.
type Suppression struct {
	// Rule is a rule ID.
	Rule string `json:"rule,omitempty"`
	// Path matches the finding's file, with forward slashes, as a
	// path.Match pattern such as "deploy/staging/*.yaml"; a pattern ending
	// in "/" matches every file under that directory. For an object of a
	// kustomization's or a chart's output, it also matches the
	// kustomization's or chart's directory followed by "/", so that
	// "deploy/staging/" covers what an overlay there builds from a base
	// elsewhere.
	Path string `json:"path,omitempty"`
	// Object matches the finding's object, such as "Deployment shop/web",
	// as a path.Match pattern such as "Deployment shop/*".
	Object string `json:"object,omitempty"`
}

// matches reports whether the suppression covers a finding of rule on
// object in file.
func (s Suppression) matches(rule, file, object string) bool {
	if s.Rule != "" && s.Rule != rule {
		return false
	}
	if s.Path != "" {
		file = filepath.ToSlash(file)
		if ok, _ := path.Match(s.Path, file); !ok && !(strings.HasSuffix(s.Path, "/") && strings.HasPrefix(file, s.Path)) {
			return false
		}
	}
	if s.Object != "" {
		if ok, _ := path.Match(s.Object, object); !ok {
			return false
		}
	}
	return true
}

func (l *Linter) suppressed(rule, object string, files ...string) bool {
	return slices.ContainsFunc(l.suppress, func(s Suppression) bool {
		return slices.ContainsFunc(files, func(file string) bool { return s.matches(rule, file, object) })
	})
}

// validate checks that every rule ID is a rule's and every pattern valid.
func (c Config) validate() error {
	known := func(id string) bool {
		return slices.ContainsFunc(allRules, func(r *Rule) bool { return r.ID == id })
	}
	for _, id := range slices.Concat(c.Enable, c.Disable) {
		if !known(id) {
			return fmt.Errorf("unknown rule %q", id)
		}
	}
	for i, s := range c.Suppress {
		switch {
		case s == Suppression{}:
			return fmt.Errorf("ignore[%d]: empty: give a rule, a path or an object", i)
		case s.Rule != "" && !known(s.Rule):
			return fmt.Errorf("ignore[%d]: unknown rule %q", i, s.Rule)
		}
		for _, p := range []string{s.Path, s.Object} {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("ignore[%d]: pattern %q: %w", i, p, err)
			}
		}
	}
	return nil
}

// DefaultConfigFile is the configuration file that `closingtime lint`
// reads from the current directory when it exists and --config is not
// given.
const DefaultConfigFile = ".closingtime-lint.yaml"

// ConfigFile is the content of a lint configuration file, in YAML:
//
//	enable: [readiness-probe-missing]   # optional: only these rules
//	disable: [pdb-missing]
//	threshold: error                    # lowest severity that fails the run
//	ignore:
//	  - rule: single-replica
//	    path: deploy/staging/
//	  - object: Deployment shop/admin
type ConfigFile struct {
	Enable    []string      `json:"enable,omitempty"`
	Disable   []string      `json:"disable,omitempty"`
	Threshold *Severity     `json:"threshold,omitempty"` // nil when the file sets none
	Ignore    []Suppression `json:"ignore,omitempty"`
}

// ParseConfigFile decodes a configuration file. Unknown fields are errors,
// so that a misspelt key does not silently do nothing.
func ParseConfigFile(data []byte) (ConfigFile, error) {
	var f ConfigFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return ConfigFile{}, err
	}
	return f, nil
}

// Config returns the Config the file describes.
func (f ConfigFile) Config() Config {
	return Config{Enable: f.Enable, Disable: f.Disable, Suppress: f.Ignore}
}
