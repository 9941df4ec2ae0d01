package target

import (
	"net"
	"net/http"
	"sync"
)

// connSet tracks the open connections of an http.Server through its
// ConnState hook, for ModeHostage. It is safe for concurrent use.
type connSet struct {
	mu      sync.Mutex
	states  map[net.Conn]http.ConnState
	changed chan struct{} // receives when a connection closes
}

func newConnSet() *connSet {
	return &connSet{states: make(map[net.Conn]http.ConnState), changed: make(chan struct{}, 1)}
}

// track is the http.Server.ConnState hook.
func (s *connSet) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state != http.StateClosed && state != http.StateHijacked {
		s.states[c] = state
		return
	}
	delete(s.states, c)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// closeIdle closes the connections idle at this moment.
func (s *connSet) closeIdle() {
	var idle []net.Conn
	s.mu.Lock()
	for c, state := range s.states {
		if state == http.StateIdle {
			idle = append(idle, c)
		}
	}
	s.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// open returns the number of open connections.
func (s *connSet) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.states)
}
