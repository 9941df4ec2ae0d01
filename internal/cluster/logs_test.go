package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestLogBufferFollow: a follower of an instance gets the instance's lines
// already there, then each line as it comes without polling, never a line
// of another instance, and stops once the instance's output ended.
func TestLogBufferFollow(t *testing.T) {
	b := NewLogBuffer(0)
	b.Begin(0)
	b.Add(LogLine{Restart: 0, Text: "zero"})
	b.End(0)
	b.Begin(1)
	b.Add(LogLine{Restart: 1, Text: "one"})
	if got := b.Instances(); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("Instances() = %v, want [0 1]", got)
	}
	batches := make(chan []LogLine)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for batch := range b.Follow(context.Background(), 1) {
			batches <- batch
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case batch := <-batches:
			var texts []string
			for _, l := range batch {
				texts = append(texts, l.Text)
			}
			return strings.Join(texts, ",")
		case <-time.After(10 * time.Second):
			t.Fatal("no batch within 10 s")
			return ""
		}
	}
	if got := next(); got != "one" {
		t.Fatalf("first batch %q, want the line already there, %q", got, "one")
	}
	b.Add(LogLine{Restart: 0, Text: "late line of another instance"})
	b.Add(LogLine{Restart: 1, Text: "two"})
	if got := next(); got != "two" {
		t.Fatalf("second batch %q, want the new line of instance 1 only, %q", got, "two")
	}
	select {
	case <-done:
		t.Fatal("the follower stopped before the instance's output ended")
	case <-time.After(50 * time.Millisecond):
	}
	b.Add(LogLine{Restart: 1, Text: "three"})
	b.End(1)
	// The last line comes before the end, in whatever batches.
	if got := next(); got != "three" {
		t.Fatalf("last batch %q, want %q", got, "three")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not stop after End")
	}
	// An ended instance, or one never begun, gives its lines and stops.
	var got []string
	for batch := range b.Follow(context.Background(), 0) {
		for _, l := range batch {
			got = append(got, l.Text)
		}
	}
	if strings.Join(got, ",") != "zero,late line of another instance" {
		t.Errorf("instance 0 after its end: %q, want its two lines", got)
	}
	for batch := range b.Follow(context.Background(), 7) {
		if len(batch) > 0 {
			t.Errorf("instance 7, never begun, yielded %+v", batch)
		}
	}
}

// TestLogBufferFollowCancel: a follower waiting for an open instance stops
// when its context ends, and a follower that breaks out of its loop is
// not called again.
func TestLogBufferFollowCancel(t *testing.T) {
	b := NewLogBuffer(0)
	b.Begin(0)
	b.Add(LogLine{Text: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		for range b.Follow(ctx, 0) {
			n++
		}
		done <- n
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case n := <-done:
		if n != 1 {
			t.Errorf("%d batches, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not stop when its context ended")
	}
	for range b.Follow(context.Background(), 0) {
		break
	}
}
