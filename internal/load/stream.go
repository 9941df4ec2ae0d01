package load

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// A stream is what `closingtime load -o jsonl` writes: first one line that
// says when the run began sending, {"start":TIME}, after any wait for the
// target to answer (--wait-serving); then one JSON line per request as it
// completes (an [Event]); then, last, one line with the run's report,
// {"report":{...}}, histograms included. It is how the load pods of a real
// cluster say that their traffic flows, and hand their results back,
// through their logs.

// startLine is the first line of a stream.
type startLine struct {
	Start *time.Time `json:"start"`
}

// reportLine is the last line of a stream.
type reportLine struct {
	Report *Report `json:"report"`
}

// WriteStartLine writes the first line of a stream, which says that the
// run begins sending at start. w should not buffer it: a reader that
// follows the stream learns from it that the requests flow.
func WriteStartLine(w io.Writer, start time.Time) error {
	start = start.UTC()
	return json.NewEncoder(w).Encode(startLine{&start})
}

// IsStartLine reports whether line, with or without its newline, is the
// start line of a stream.
func IsStartLine(line []byte) bool {
	var l startLine
	return json.Unmarshal(line, &l) == nil && l.Start != nil
}

// WriteReportLine writes report as the last line of a stream.
func WriteReportLine(w io.Writer, report *Report) error {
	return json.NewEncoder(w).Encode(reportLine{report})
}

// maxLineBytes is the longest line ReadStream accepts: a report line
// carries every second of the run and its histograms.
const maxLineBytes = 16 << 20

// ReadStream reads a stream: the results of its event lines, in order,
// decoded once here into the values a generator in this process gives
// its OnResult (but for each Err, which keeps only its text, and Time, in
// UTC), and the report of its last line. The start line may be left out;
// it is not returned. A stream without a report line returns the results,
// a nil report and no error: the writer stopped before it finished. A
// line that is neither the start line, an event nor a report, an event
// whose time or address does not parse, a start line after the first
// line, or a line after the report, is an error that gives its number.
func ReadStream(r io.Reader) ([]Result, *Report, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var results []Result
	var report *Report
	for n := 1; sc.Scan(); n++ {
		if report != nil {
			return nil, nil, fmt.Errorf("read load stream: line %d: a line after the report", n)
		}
		var l struct {
			Event
			reportLine
			startLine
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, nil, fmt.Errorf("read load stream: line %d: %w", n, err)
		}
		switch {
		case l.Start != nil && n > 1:
			return nil, nil, fmt.Errorf("read load stream: line %d: a start line after the first line", n)
		case l.Start != nil:
		case l.Report != nil:
			report = l.Report
		case l.ID != "":
			res, err := l.Event.result()
			if err != nil {
				return nil, nil, fmt.Errorf("read load stream: line %d: %w", n, err)
			}
			results = append(results, res)
		default:
			return nil, nil, fmt.Errorf("read load stream: line %d: neither a request nor the report", n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read load stream: %w", err)
	}
	return results, report, nil
}
