package target

import (
	"testing"
	"time"
)

// TestWorkDraw: each part of a Work gets its share of the requests, the
// parts without a share splitting what is left, and each request a time
// of its part's range.
func TestWorkDraw(t *testing.T) {
	w := Work{{Min: time.Millisecond}, {Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Percent: 25}, {Min: 2 * time.Millisecond}}
	if err := w.Check(); err != nil {
		t.Fatal(err)
	}
	const n = 8000
	counts := map[string]int{}
	for range n {
		switch d := w.draw(); {
		case d == time.Millisecond:
			counts["first"]++
		case d == 2*time.Millisecond:
			counts["third"]++
		case d >= 10*time.Millisecond && d <= 20*time.Millisecond:
			counts["tail"]++
		default:
			t.Fatalf("draw() = %v, of no part of %v", d, w)
		}
	}
	// 8000 draws: a share is off by more than 5 points once in many
	// millions of runs.
	for part, want := range map[string]float64{"first": 37.5, "tail": 25, "third": 37.5} {
		if got := float64(counts[part]) * 100 / n; got < want-5 || got > want+5 {
			t.Errorf("%s part: %.1f%% of the requests, want %.1f%%", part, got, want)
		}
	}
	if s := w.String(); s != "1ms,10ms-20ms:25%,2ms" {
		t.Errorf("String() = %q", s)
	}
}
