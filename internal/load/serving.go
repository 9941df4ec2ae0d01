package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The rule of [WaitServing].
const (
	// ServingInARow is how many requests in a row must be answered for a
	// target to count as serving.
	ServingInARow = 10
	// servingRetryDelay is the pause after a failed request before the
	// next one.
	servingRetryDelay = 100 * time.Millisecond
)

// WaitServing waits until cfg.URL answers: until [ServingInARow] requests
// in a row (GETs over HTTP/1.1 or HTTP/2, as its scheme says, or the
// run's gRPC calls) get a complete response with a status below 500, or
// status OK (class [OK]), each on a new connection made by cfg.Dial
// (nil means a net.Dialer), each bounded as a run of cfg bounds its
// requests: the connect by cfg.ConnectTimeout, the response, from the
// connection on, by cfg.ResponseTimeout (zero means their defaults). The
// other fields of cfg are ignored. After a failed request it calls failed,
// if not nil, with what failed (the status, or the connect's or response's
// error, a timeout named as such), waits 100 ms and counts from zero
// again. It is the rule by which the runner starts a scenario's traffic,
// whichever the backend: a generator that starts before its target answers
// counts the target's start-up as failures.
//
// Judged through the dialer of the traffic, from where the traffic comes
// from: the local cluster's routing view for the embedded cluster, the load
// pod's own network (`closingtime load --wait-serving`) on a real one.
//
// If ctx ends first, WaitServing returns an error that wraps ctx.Err() and
// quotes the last failure. An invalid cfg.URL is an error at once, and so
// is a server that does not speak HTTP/2 to an h2c or grpc URL
// ([ErrNotH2C]), or a gRPC server that answers the URL's call itself with
// a status no wait mends: Unimplemented, InvalidArgument, Unauthenticated.
func WaitServing(ctx context.Context, cfg Config, failed func(error)) error {
	target, err := parseTarget(cfg.URL)
	if err != nil {
		return err
	}
	if cfg.ConnectTimeout < 0 || cfg.ResponseTimeout < 0 {
		return errors.New("timeouts must not be negative")
	}
	connectTimeout := cmp.Or(cfg.ConnectTimeout, DefaultConnectTimeout)
	responseTimeout := cmp.Or(cfg.ResponseTimeout, DefaultResponseTimeout)
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	transport := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			c, err := dial(dctx, network, address)
			if err != nil {
				return nil, &connectError{err}
			}
			// The response's time counts from the connection, as the
			// generator's client counts it.
			c.SetDeadline(time.Now().Add(responseTimeout))
			return c, nil
		}}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	ask := func() error {
		return askServing(ctx, client, target.String(), connectTimeout, responseTimeout)
	}
	var s sender
	switch target.Scheme {
	case "grpc":
		// The run's call, on a channel of its own each.
		s = newGRPCSender(dial, target.Host, grpcMethod(target), cfg.Resolve, connectTimeout, responseTimeout, 0, Limits{})
	case "h2c":
		template, err := newTemplate(target)
		if err != nil {
			return err
		}
		c := newH2Client(dial, connectTimeout, responseTimeout, 0, Limits{})
		s = &httpSender{rt: c, fresh: c, closeIdle: c.close, template: template}
	}
	if s != nil {
		// The generator's own sender, on a connection of its own each.
		ask = func() error {
			var log attemptLog
			err := s.send("wait-serving", &log, true)
			a := log.attempts[len(log.attempts)-1]
			switch {
			case a.answered && refusesEmptyCalls(status.Code(err)):
				// The server's own status, in its trailers; not one
				// that grpc-go made of an HTTP status, such as a
				// proxy's 404 for a route it does not have yet.
				return &unservableError{method: strings.TrimPrefix(grpcMethod(target), "/"), code: status.Code(err), err: err}
			case err != nil:
				return fmt.Errorf("%s: %w", a.class, err)
			case a.class != OK:
				return fmt.Errorf("%s: status %d", a.class, a.status)
			}
			return nil
		}
	}
	var last error // the last failure before ctx ended
	for good := 0; good < ServingInARow; {
		err := ask()
		if err == nil {
			good++
			continue
		}
		var unservable *unservableError
		if errors.Is(err, ErrNotH2C) || errors.As(err, &unservable) {
			return fmt.Errorf("%s: %w", cfg.URL, err)
		}
		if ctx.Err() == nil {
			last = err
			if failed != nil {
				failed(err)
			}
		}
		good = 0
		select {
		case <-time.After(servingRetryDelay):
		case <-ctx.Done():
			err := fmt.Errorf("wait for %s to answer %d requests in a row: %w", cfg.URL, ServingInARow, ctx.Err())
			if last != nil {
				err = fmt.Errorf("%w (last failure: %v)", err, last)
			}
			return err
		}
	}
	return nil
}

// refusesEmptyCalls reports whether a server that answered a call with
// code answers every call of the method so: it has not the method, or not
// with the empty request the load sends, or not for a caller without
// credentials.
func refusesEmptyCalls(code codes.Code) bool {
	switch code {
	case codes.Unimplemented, codes.InvalidArgument, codes.Unauthenticated:
		return true
	}
	return false
}

// An unservableError is a gRPC server's answer to the run's call that no
// wait mends (refusesEmptyCalls).
type unservableError struct {
	method string
	code   codes.Code
	err    error
}

func (e *unservableError) Error() string {
	return fmt.Sprintf("the server answers %s, called with the empty request, %s, which no wait mends: call a unary method of its own that answers the empty request OK, such as /grpc.health.v1.Health/Check where it serves health (the URL's path; rollout's --path; a scenario's traffic.path): %v",
		e.method, e.code, e.err)
}

func (e *unservableError) Unwrap() error { return e.err }

// connectError marks an error of WaitServing's dial.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// askServing sends one request of WaitServing: nil if it got a complete
// response with a status below 500; otherwise an error that gives the
// status, or the connect's or the exchange's error (not wrapped in the
// *url.Error that names the URL again), a timeout as the one of
// connectTimeout and responseTimeout that passed.
func askServing(ctx context.Context, client *http.Client, target string, connectTimeout, responseTimeout time.Duration) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ce *connectError
	switch {
	case err == nil && resp.StatusCode >= 500:
		return fmt.Errorf("status %s", resp.Status)
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err
	case errors.As(err, &ce) && timedOut(err):
		return fmt.Errorf("no connection within %v, the connect timeout", connectTimeout)
	case timedOut(err):
		return fmt.Errorf("no complete response within %v of connecting, the response timeout", responseTimeout)
	}
	return err
}
