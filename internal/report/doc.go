// Package report renders measured results ([results.Results]) for people:
// a comparison table with a row per scenario and, per run, the seconds that
// had failures and what happened to each old pod (text), and one
// self-contained HTML page with the table and a timeline per run
// (docs/report.md); and JUnit XML for CI, a test case per run. Their JSON
// is package results'.
package report
