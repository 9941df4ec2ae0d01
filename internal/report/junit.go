package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/closingtime-dev/closingtime/internal/results"
)

// NoLimit is the failure limit of WriteJUnit and [Over] that no run
// exceeds: every run passes, whatever failed.
const NoLimit = -1

// Over reports whether run failed more requests than limit allows; no run
// does when limit is negative ([NoLimit]).
func Over(run results.Run, limit int64) bool {
	return limit >= 0 && run.Totals.Failed() > limit
}

// WriteJUnit writes r as JUnit XML, the test report that CI systems read:
// a test suite per scenario, named name/scenario (and its Deployment's
// name), and in it a test case per
// run, "run N", which fails when more of its requests failed than limit
// allows ([Over]). A failure's message counts the failed requests by class;
// its text, and a passing run's standard output, hold the run's figures
// as WriteText writes them, with the fixes of its causes.
func WriteJUnit(w io.Writer, name string, r *results.Results, limit int64) error {
	doc := junitSuites{Name: name}
	for _, s := range r.Scenarios {
		// The Deployment's name, not its namespace, which a run in a
		// namespace of its own changes each time: CI systems follow a
		// test's history by its name.
		suiteName := name + "/" + s.Name
		if _, d, _ := strings.Cut(s.Deployment, "/"); d != "" {
			suiteName += " (Deployment " + d + ")"
		}
		suite := junitSuite{Name: suiteName, Tests: len(s.Runs)}
		if len(s.Runs) > 0 {
			suite.Timestamp = s.Runs[0].Start.UTC().Format("2006-01-02T15:04:05")
		}
		for _, run := range s.Runs {
			var text strings.Builder
			writeRun(&text, s.Name, run, true)
			c := junitCase{Name: fmt.Sprintf("run %d", run.Repetition), Class: suiteName}
			if Over(run, limit) {
				c.Failure = &junitFailure{Type: "failed requests", Message: failureMessage(run, limit), Text: text.String()}
				suite.Failures++
			} else {
				c.Out = &junitText{text.String()}
			}
			suite.Cases = append(suite.Cases, c)
		}
		doc.Tests += suite.Tests
		doc.Failures += suite.Failures
		doc.Suites = append(doc.Suites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// failureMessage says how many of run's requests failed, by class, against
// limit: "12 of 600 requests failed (refused=10 reset=2), more than 0
// allowed".
func failureMessage(run results.Run, limit int64) string {
	t := run.Totals
	var classes []string
	for _, c := range []struct {
		name string
		n    int64
	}{{"refused", t.Refused}, {"reset", t.Reset}, {"closed", t.Closed}, {"timeout", t.Timeout}, {"5xx", t.HTTP5xx}, {"error", t.Error}} {
		if c.n > 0 {
			classes = append(classes, fmt.Sprintf("%s=%d", c.name, c.n))
		}
	}
	return fmt.Sprintf("%d of %d requests failed (%s), more than %d allowed", t.Failed(), t.Requests, strings.Join(classes, " "), limit)
}

// The elements of JUnit XML that WriteJUnit writes, in the shape that
// Jenkins, GitLab and GitHub's test reporters read.
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name      string      `xml:"name,attr"`
		Tests     int         `xml:"tests,attr"`
		Failures  int         `xml:"failures,attr"`
		Timestamp string      `xml:"timestamp,attr,omitempty"`
		Cases     []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name    string        `xml:"name,attr"`
		Class   string        `xml:"classname,attr"`
		Failure *junitFailure `xml:"failure"`
		Out     *junitText    `xml:"system-out"`
	}
	junitFailure struct {
		Type    string `xml:"type,attr"`
		Message string `xml:"message,attr"`
		Text    string `xml:",cdata"`
	}
	// junitText is an element's text, kept as written: a run's figures
	// are lines.
	junitText struct {
		Text string `xml:",cdata"`
	}
)
