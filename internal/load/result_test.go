package load

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestDurationMS reads back every latency the histogram can report, to the
// microsecond up to 10 s, exactly as the reports write it, although their
// form is a float of milliseconds.
func TestDurationMS(t *testing.T) {
	for us := range 10_000_000 {
		d := time.Duration(us) * time.Microsecond
		if got := DurationMS(ms(d)); got != d {
			t.Fatalf("%v written as %v ms read back as %v", d, ms(d), got)
		}
	}
	in := Percentiles{P50: 282 * time.Microsecond, P90: 520 * time.Microsecond, P99: 4023 * time.Microsecond, Max: 4023 * time.Microsecond}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got Percentiles
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got != in {
		t.Errorf("%+v written as %s read back as %+v", in, data, got)
	}
}

// TestFailedAttempt: the attempt a diagnosis explains is the last one of a
// failed request, retried or not, the first failure of an absorbed one (its
// class alone when the result does not carry it), and none for a request
// that succeeded the first time.
func TestFailedAttempt(t *testing.T) {
	addr := netip.MustParseAddrPort("10.77.0.3:8080")
	reset := errors.New("read response: connection reset by peer")
	first := &Attempt{Class: Reset, Addr: addr, ConnRequests: 4, ConnAge: time.Second, Connect: time.Millisecond, Total: 2 * time.Millisecond, Err: reset}
	last := Attempt{Class: Refused, Addr: addr, Total: 300 * time.Millisecond, Err: errors.New("connection refused")}
	tests := []struct {
		name   string
		r      Result
		want   Attempt
		wantOK bool
	}{
		{"ok", Result{Class: OK, FirstClass: OK, Attempts: 1, Addr: addr, ConnRequests: 2}, Attempt{}, false},
		{"failed", Result{Class: Reset, FirstClass: Reset, Attempts: 1, Addr: addr, ConnRequests: 4, ConnAge: time.Second,
			Connect: time.Millisecond, Total: 2 * time.Millisecond, Err: reset}, *first, true},
		{"failed after retries", Result{Class: Refused, FirstClass: Reset, Attempts: 3, FirstFailure: first, Addr: addr,
			Total: 300 * time.Millisecond, Err: last.Err}, last, true},
		{"absorbed", Result{Class: OK, FirstClass: Reset, Attempts: 2, FirstFailure: first}, *first, true},
		{"absorbed, first failure not carried", Result{Class: OK, FirstClass: Closed, Attempts: 2}, Attempt{Class: Closed}, true},
	}
	for _, tt := range tests {
		got, ok := tt.r.FailedAttempt()
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: FailedAttempt() = %+v, %t; want %+v, %t", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}
