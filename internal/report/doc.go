// Package report renders measured results ([results.Results]) for people:
// a comparison table with a row per scenario and, per run, the seconds that
// had failures, what happened to each old pod and the causes of its failed
// requests with their fixes (text), and one self-contained HTML page with
// the table and a timeline per run (docs/report.md); and JUnit XML for CI,
// a test case per run. Their JSON is package results'.
package report
