package load

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// A stream is what `closingtime load -o jsonl` writes: one JSON line per
// request as it completes (an [Event]), then, last, one line with the
// run's report, {"report":{...}}, histograms included. It is how the
// load pods of a real cluster hand their results back through their logs.

// reportLine is the last line of a stream.
type reportLine struct {
	Report *Report `json:"report"`
}

// WriteReportLine writes report as the last line of a stream.
func WriteReportLine(w io.Writer, report *Report) error {
	return json.NewEncoder(w).Encode(reportLine{report})
}

// maxLineBytes is the longest line ReadStream accepts: a report line
// carries every second of the run and its histograms.
const maxLineBytes = 16 << 20

// ReadStream reads a stream: the event lines, in order, and the report of
// its last line. A stream without a report line returns the events, a nil
// report and no error: the writer stopped before it finished. A line that
// is neither an event nor a report, or a line after the report, is an
// error that gives its number.
func ReadStream(r io.Reader) ([]Event, *Report, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var events []Event
	var report *Report
	for n := 1; sc.Scan(); n++ {
		if report != nil {
			return nil, nil, fmt.Errorf("read load stream: line %d: a line after the report", n)
		}
		var l struct {
			Event
			reportLine
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, nil, fmt.Errorf("read load stream: line %d: %w", n, err)
		}
		switch {
		case l.Report != nil:
			report = l.Report
		case l.ID != "":
			events = append(events, l.Event)
		default:
			return nil, nil, fmt.Errorf("read load stream: line %d: neither a request nor the report", n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read load stream: %w", err)
	}
	return events, report, nil
}
