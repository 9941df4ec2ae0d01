package load

import (
	"encoding/json"
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
