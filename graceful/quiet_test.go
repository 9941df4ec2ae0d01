package graceful

import (
	"testing"
	"time"
)

// TestQuietClockCountsRunningTime pins the quiet rule's clock: a stall of
// the process between two looks of the drain loop, when nothing could be
// read, does not make a connection quiet.
func TestQuietClockCountsRunningTime(t *testing.T) {
	t0 := time.Now()
	q := quietClock{last: t0}
	looks := []struct {
		at   time.Duration
		want time.Duration
	}{
		{quietLook, quietLook},
		{quietLook + 5*time.Second, quietStep}, // a five-second stall
		{2*quietLook + 5*time.Second, quietLook},
		{quietLook, 0}, // a clock that went back credits nothing
	}
	var total time.Duration
	for _, l := range looks {
		got := q.look(t0.Add(l.at))
		if got != l.want {
			t.Errorf("look at +%v credited %v, want %v", l.at, got, l.want)
		}
		total += got
	}
	if total >= quietGrace {
		t.Errorf("%v of quiet time credited across a stall, want under the %v grace", total, quietGrace)
	}
}
