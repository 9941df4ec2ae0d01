package cluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"iter"
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
// restarts, for [Backend.Logs]. It can also be followed, as the kubelet's
// log API follows a container: the owner of the container marks each
// instance's output with Begin and End, and Follow waits for the lines of
// an instance until its output ended. A LogBuffer is safe for concurrent
// use.
type LogBuffer struct {
	mu    sync.Mutex
	max   int
	lines []LogLine
	// added counts the lines ever added: lines[i] is line number
	// added-len(lines)+i.
	added int64
	// changed, if not nil, is closed and cleared when a line comes or an
	// instance's output ends; Follow makes it when it waits.
	changed   chan struct{}
	instances []int32        // the restart counts of the instances begun, in order
	open      map[int32]bool // the instances begun whose output has not ended
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
	b.added++
	if len(b.lines) > 2*b.max {
		b.lines = slices.Clone(b.lines[len(b.lines)-b.max:])
	}
	b.changedLocked()
}

// Lines returns a copy of the latest max lines, oldest first.
func (b *LogBuffer) Lines() []LogLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines[max(0, len(b.lines)-b.max):])
}

// Begin records that the instance of the container with restart count
// restart started: its output is open, and Follow waits for its lines,
// until End.
func (b *LogBuffer) Begin(restart int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.instances = append(b.instances, restart)
	if b.open == nil {
		b.open = map[int32]bool{}
	}
	b.open[restart] = true
}

// End records that the output of instance restart ended: every line it
// wrote has been added. Followers of the instance get its last lines and
// stop.
func (b *LogBuffer) End(restart int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, restart)
	b.changedLocked()
}

// Instances returns the restart counts of the instances begun, oldest
// first: the last is the latest instance.
func (b *LogBuffer) Instances() []int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.instances)
}

// Follow returns an iterator over the lines of instance restart, in
// batches, oldest first. The first batch is what the buffer holds of the
// instance now (of its latest max lines), possibly nothing; each later
// batch holds the lines the instance added since the last, as soon as
// they are added. The iteration ends once the instance's output ended
// (End; after the first batch for an instance never begun), when ctx
// ends, or when the loop breaks. Lines that the buffer dropped before a
// follower read them are skipped.
func (b *LogBuffer) Follow(ctx context.Context, restart int32) iter.Seq[[]LogLine] {
	return func(yield func([]LogLine) bool) {
		next := int64(-1) // the number of the next line to read; -1 before the first batch
		// Each round yields what came since the last; the loop ends with
		// the instance's output, ctx or the caller.
		for {
			b.mu.Lock()
			start := len(b.lines) - b.max
			if next >= 0 {
				start = int(next - (b.added - int64(len(b.lines))))
			}
			var batch []LogLine
			for _, l := range b.lines[max(start, 0):] {
				if l.Restart == restart {
					batch = append(batch, l)
				}
			}
			first := next < 0
			next = b.added
			ended := !b.open[restart]
			if !ended && b.changed == nil {
				b.changed = make(chan struct{})
			}
			changed := b.changed
			b.mu.Unlock()
			if (len(batch) > 0 || first) && !yield(batch) {
				return
			}
			if ended {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}
}

// changedLocked wakes the followers.
func (b *LogBuffer) changedLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
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
