package cluster

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"sync"

	"k8s.io/utils/clock"
)

// DefaultMaxLogLines is how many lines a [LogBuffer] keeps of a container,
// across its restarts, unless told otherwise.
const DefaultMaxLogLines = 100_000

// MaxLogLineBytes is the longest line a [LogBuffer] keeps whole; a longer
// one is split into lines of at most this length.
const MaxLogLineBytes = 64 << 10

// LogBuffer keeps the latest lines that one container wrote, across its
// restarts, for [Backend.Logs]. A LogBuffer is safe for concurrent use.
type LogBuffer struct {
	mu    sync.Mutex
	max   int
	lines []LogLine
}

// NewLogBuffer returns an empty LogBuffer that keeps the latest max lines;
// DefaultMaxLogLines if max is zero or negative.
func NewLogBuffer(max int) *LogBuffer {
	if max <= 0 {
		max = DefaultMaxLogLines
	}
	return &LogBuffer{max: max}
}

// Add appends l. The buffer drops its oldest lines half at a time, once it
// holds twice its max, so that dropping costs O(1) a line.
func (b *LogBuffer) Add(l LogLine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, l)
	if len(b.lines) > 2*b.max {
		b.lines = slices.Clone(b.lines[len(b.lines)-b.max:])
	}
}

// Lines returns a copy of the latest max lines, oldest first.
func (b *LogBuffer) Lines() []LogLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines[max(0, len(b.lines)-b.max):])
}

// Capture adds the lines of r, without their newlines, until r ends: each
// line carries stream and restart, and the time clk gives when it was read.
// A line longer than MaxLogLineBytes is split. It returns nil when r ends
// with io.EOF, or the error that ended it; a line that r ends without a
// newline is kept.
func (b *LogBuffer) Capture(r io.Reader, clk clock.PassiveClock, stream string, restart int32) error {
	br := bufio.NewReaderSize(r, MaxLogLineBytes)
	// Each round reads one line or a full buffer; the loop ends at EOF or
	// an error.
	for {
		line, err := br.ReadSlice('\n')
		if n := len(line); n > 0 {
			if line[n-1] == '\n' {
				line = line[:n-1]
			}
			b.Add(LogLine{Time: clk.Now(), Stream: stream, Restart: restart, Text: string(line)})
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}
