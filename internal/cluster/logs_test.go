package cluster

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/clock"
)

// TestLogBufferCapture: Capture splits a line longer than MaxLogLineBytes,
// keeps a last line without its newline, and stamps each line with its
// stream and restart count.
func TestLogBufferCapture(t *testing.T) {
	b := NewLogBuffer(0)
	long := strings.Repeat("x", MaxLogLineBytes+10)
	if err := b.Capture(strings.NewReader("one\ntwo\n"+long+"\nlast"), clock.RealClock{}, "stderr", 4); err != nil {
		t.Fatalf("Capture: %v, want nil at EOF", err)
	}
	var got []string
	for _, l := range b.Lines() {
		if l.Restart != 4 || l.Stream != "stderr" || l.Time.IsZero() {
			t.Errorf("line %+v: want restart 4, stream stderr, a time", l)
		}
		got = append(got, l.Text)
	}
	want := []string{"one", "two", long[:MaxLogLineBytes], long[MaxLogLineBytes:], "last"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %d lines, want %d: a long line split at %d bytes, the last kept without its newline", len(got), len(want), MaxLogLineBytes)
	}
}

// TestLogBufferMax: a buffer keeps its latest max lines, oldest first,
// whichever way the drops fell.
func TestLogBufferMax(t *testing.T) {
	b := NewLogBuffer(3)
	for i := range 10 {
		b.Add(LogLine{Text: fmt.Sprint(i)})
		lines := b.Lines()
		first := max(0, i-2)
		if len(lines) != i-first+1 || lines[0].Text != fmt.Sprint(first) || lines[len(lines)-1].Text != fmt.Sprint(i) {
			t.Fatalf("after line %d: %+v, want lines %d to %d", i, lines, first, i)
		}
	}
	if NewLogBuffer(-1).max != DefaultMaxLogLines {
		t.Errorf("NewLogBuffer(-1) keeps %d lines, want DefaultMaxLogLines", NewLogBuffer(-1).max)
	}
}
