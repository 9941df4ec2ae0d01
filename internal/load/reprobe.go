package load

import (
	"net/netip"
	"time"
)

// A Reprobe is a probe that the generator sends on a new connection of its
// own, never from a pool, when a request's FailedAttempt was sent on a
// reused connection: one GET of the same URL, with the request's id and
// "-reprobe" as its X-Request-Id, sent at once after the request ended,
// bounded by the same connect and response timeouts, never retried. It
// tells a failure of the connection (the probe succeeds) from an outage
// of the Service (the probe fails too). It is recorded, not counted as
// traffic: no report total, second, latency, status or pod count has it.
type Reprobe struct {
	// Class is the probe's outcome.
	Class Class
	// Addr is the address its connection reached or its connect tried,
	// as Result's Addr is.
	Addr netip.AddrPort
	// Pod is its response's X-Pod-Name header, and Status its status
	// code, or zero.
	Pod    string
	Status int
	// At is when it was sent, as an offset from the Result's Time; Total
	// is how long it took.
	At, Total time.Duration
}

// reprobeSuffix ends the X-Request-Id of a re-probe, after the id of the
// request it re-probes.
const reprobeSuffix = "-reprobe"

// reprobe sends the request of t once more, at once, on a new connection
// of its own, never retried, and returns what it saw (see [Reprobe]). The
// client's timeouts bound it.
func (s *stream) reprobe(t task) *Reprobe {
	var log attemptLog
	s.sender.send(t.id+reprobeSuffix, &log, true)
	a := &log.attempts[0]
	return &Reprobe{Class: a.class, Addr: a.addr, Pod: a.pod, Status: a.status, At: a.start.Sub(t.at), Total: a.end.Sub(a.start)}
}
