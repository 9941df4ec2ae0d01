// Package report renders scenario results (scenario.Results) for people and
// scripts: a comparison table with a row per scenario and, per run, the
// seconds that had failures and what happened to each old pod (text), the
// documented JSON of docs/lab.md § results.json, and one self-contained
// HTML page with the table and a timeline per run (docs/report.md).
package report
