// Package results holds what a measured run produces: the figures and the
// timeline of each scenario's runs, as `closingtime lab` and `closingtime
// rollout` write them to results.json and as `closingtime report` and
// `closingtime lint --measured` read them back. The runner (package
// scenario) fills them; the renderers (package report) and the linter read
// them without importing the runner.
package results
