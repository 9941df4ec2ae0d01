package target

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// A WorkPart is a share of the /work requests and the time each of them
// takes: uniformly distributed between Min and Max, or Min when Max is
// zero or equal to it.
type WorkPart struct {
	Min, Max time.Duration
	// Percent is the part's share of the requests, above 0 and at most
	// 100; zero gives the part an equal share of what the parts with a
	// Percent leave.
	Percent float64
}

// Work is the time a /work request takes: each request falls in one of the
// parts, by their shares, and takes a time of that part's range. Seed 003's
// model server, most requests 2 s and a tail of dense documents at 19 s, is
// Work{{Min: 2 * time.Second}, {Min: 19 * time.Second, Percent: 5}}. An
// empty Work answers at once.
type Work []WorkPart

// String formats w as `closingtime serve --work` takes it: "200ms",
// "100ms-300ms", "2s,19s:5%"; "0s" for none.
func (w Work) String() string {
	if len(w) == 0 {
		return "0s"
	}
	parts := make([]string, len(w))
	for i, p := range w {
		parts[i] = p.Min.String()
		if p.Max != 0 && p.Max != p.Min {
			parts[i] += "-" + p.Max.String()
		}
		if p.Percent != 0 {
			parts[i] += ":" + strconv.FormatFloat(p.Percent, 'f', -1, 64) + "%"
		}
	}
	return strings.Join(parts, ",")
}

// Check returns what is wrong with w: a range that ends before it starts,
// a negative time, a share out of range, or shares that do not make up
// every request.
func (w Work) Check() error {
	sum, unshared := 0.0, 0
	for _, p := range w {
		switch {
		case p.Min < 0:
			return fmt.Errorf("negative work %v", p.Min)
		case p.Max != 0 && p.Max < p.Min:
			return fmt.Errorf("work range %v-%v ends before it starts", p.Min, p.Max)
		case p.Percent < 0 || p.Percent > 100 || math.IsNaN(p.Percent):
			return fmt.Errorf("work %v: share %v%% is not above 0%% and at most 100%%", p.Min, p.Percent)
		case p.Percent == 0:
			unshared++
		}
		sum += p.Percent
	}
	const epsilon = 1e-9
	switch {
	case sum > 100+epsilon:
		return fmt.Errorf("work %v: shares sum to %v%%, over 100%%", w, sum)
	case unshared == 0 && len(w) > 0 && sum < 100-epsilon:
		return fmt.Errorf("work %v: shares sum to %v%%, not 100%%: leave one part without a share to give it the rest", w, sum)
	case unshared > 0 && sum > 100-epsilon:
		return fmt.Errorf("work %v: the shares leave nothing for the parts without one", w)
	}
	return nil
}

// draw returns the work time of one request of w, which Check accepts.
func (w Work) draw() time.Duration {
	if len(w) == 0 {
		return 0
	}
	sum, unshared := 0.0, 0
	for _, p := range w {
		sum += p.Percent
		if p.Percent == 0 {
			unshared++
		}
	}
	at := rand.Float64() * 100
	part := w[len(w)-1]
	for _, p := range w {
		share := p.Percent
		if share == 0 {
			share = (100 - sum) / float64(unshared)
		}
		if at < share {
			part = p
			break
		}
		at -= share
	}
	d := part.Min
	if span := part.Max - part.Min; span > 0 {
		d += rand.N(span + 1)
	}
	return d
}
