package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// A Class is the outcome of one request, decided from the socket: the
// failure classes of docs/load.md, and ok.
type Class uint8

// The classes, in the order in which reports list them.
const (
	// OK is a complete response with a status below 500.
	OK Class = iota
	// Refused is a connect refused by the peer: nothing listened (or a
	// Service had no endpoints and kube-proxy rejected the SYN), or the
	// listener closed with the connect in its queue, which resets it.
	Refused
	// Reset is a connection broken after it was made and before a full
	// response arrived: reset by the peer (ECONNRESET, EPIPE,
	// ECONNABORTED), or closed in the middle of a response.
	Reset
	// Closed is a connection that the peer closed cleanly (EOF) before
	// sending any byte of a response: curl's "empty reply from server".
	Closed
	// ConnectTimeout is a connection not made within the connect timeout,
	// including the wait for a free pooled connection.
	ConnectTimeout
	// ResponseTimeout is a response not complete within the response
	// timeout, counted from when the connection was ready.
	ResponseTimeout
	// HTTP5xx is a complete response with a 5xx status.
	HTTP5xx
	// Error is any other failure: the client could not connect for a
	// reason other than the above (no free local port, no route), or the
	// response was not valid HTTP.
	Error

	numClasses = iota
)

var classNames = [numClasses]string{
	OK:              "ok",
	Refused:         "refused",
	Reset:           "reset",
	Closed:          "closed",
	ConnectTimeout:  "connect-timeout",
	ResponseTimeout: "response-timeout",
	HTTP5xx:         "http5xx",
	Error:           "error",
}

// String returns the class's name as reports and event files spell it.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// MarshalText encodes the class as its name.
func (c Class) MarshalText() ([]byte, error) {
	if int(c) >= len(classNames) {
		return nil, fmt.Errorf("marshal class %d: unknown class", uint8(c))
	}
	return []byte(classNames[c]), nil
}

// UnmarshalText decodes a class from its name.
func (c *Class) UnmarshalText(text []byte) error {
	for i, name := range classNames {
		if name == string(text) {
			*c = Class(i)
			return nil
		}
	}
	return fmt.Errorf("unmarshal class %q: unknown class", text)
}

// Failed reports whether the class is a failure.
func (c Class) Failed() bool { return c != OK }

// classifyConnect sorts an error from making a connection.
func classifyConnect(err error) Class {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return Refused
	case timedOut(err):
		return ConnectTimeout
	default:
		return Error
	}
}

// classifyExchange sorts an error from writing a request or reading its
// response on a connection that was made; gotByte says whether a byte of
// the response had arrived, the only proof that the server got the
// request.
func classifyExchange(err error, gotByte bool) Class {
	switch {
	case timedOut(err):
		return ResponseTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return Reset
	case errors.Is(err, io.EOF) && !gotByte:
		return Closed
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Reset
	default:
		return Error
	}
}

// timedOut reports whether err is a deadline passing: a socket deadline
// (os.ErrDeadlineExceeded) or a dial context's (context.DeadlineExceeded,
// which the net package's timeout error also matches).
func timedOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}
