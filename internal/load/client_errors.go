package load

// ClientErrors counts the responses with a 4xx status among a run's
// responses. The server answered them, so they count as ok and nothing
// failed; but when most responses are 4xx, the path requested is likely
// not one the server serves, and the run measured little of it.
type ClientErrors struct {
	// Responses counts every response (ok and http5xx); Count, those with
	// a 4xx status.
	Responses, Count int64
	// Commonest is the 4xx status that most responses had, the lowest on
	// a tie; 0 when none had one.
	Commonest int
}

// CountClientErrors counts the 4xx responses of clients, from their
// Statuses.
func CountClientErrors(clients []ClientReport) ClientErrors {
	statuses := map[int]int64{}
	for _, c := range clients {
		for status, n := range c.Statuses {
			statuses[status] += n
		}
	}
	var e ClientErrors
	for status, n := range statuses {
		e.Responses += n
		if status < 400 || status > 499 {
			continue
		}
		e.Count += n
		if c := statuses[e.Commonest]; e.Commonest == 0 || n > c || n == c && status < e.Commonest {
			e.Commonest = status
		}
	}
	return e
}

// Mostly reports whether more than half of the responses had a 4xx status.
func (e ClientErrors) Mostly() bool { return e.Count*2 > e.Responses }
