package target

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWorkLog(t *testing.T) {
	sigterm := time.Date(2026, 11, 29, 13, 43, 30, 411e6, time.UTC)
	tests := []struct {
		name          string
		before        []time.Duration // arrivals, before SIGTERM
		after         int             // arrivals after SIGTERM
		wantPerSecond []int
		wantLast      time.Duration // before SIGTERM; 0: none
	}{
		{
			name:          "no requests",
			wantPerSecond: []int{0, 0, 0, 0, 0, 0},
		},
		{
			name: "each second counted, oldest first",
			before: []time.Duration{
				7 * time.Second, // outside the window
				6 * time.Second, 5500 * time.Millisecond, 5001 * time.Millisecond,
				5 * time.Second, 4 * time.Second,
				999 * time.Millisecond, time.Millisecond,
			},
			after:         2,
			wantPerSecond: []int{3, 1, 1, 0, 0, 2},
			wantLast:      time.Millisecond,
		},
		{
			name:          "last request long before",
			before:        []time.Duration{time.Minute},
			wantPerSecond: []int{0, 0, 0, 0, 0, 0},
			wantLast:      time.Minute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var l workLog
			for _, d := range tt.before {
				l.arrive(sigterm.Add(-d))
			}
			perSecond, last := l.signalled(sigterm)
			if diff := cmp.Diff(tt.wantPerSecond, perSecond); diff != "" {
				t.Errorf("per second (-want +got):\n%s", diff)
			}
			var wantLast time.Time
			if tt.wantLast != 0 {
				wantLast = sigterm.Add(-tt.wantLast)
			}
			if !last.Equal(wantLast) {
				t.Errorf("last request = %v, want %v", last, wantLast)
			}
			for i := range tt.after {
				l.arrive(sigterm.Add(time.Duration(i+1) * time.Second))
			}
			after, last := l.drained()
			if after != tt.after {
				t.Errorf("requests after SIGTERM = %d, want %d", after, tt.after)
			}
			if tt.after > 0 && !last.Equal(sigterm.Add(time.Duration(tt.after)*time.Second)) {
				t.Errorf("last request after drain = %v, want the last one after SIGTERM", last)
			}
		})
	}
}
