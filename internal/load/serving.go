package load

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The rule of [WaitServing].
const (
	// ServingInARow is how many requests in a row must be answered for a
	// target to count as serving.
	ServingInARow = 10
	// servingRetryDelay is the pause after a failed request before the
	// next one.
	servingRetryDelay = 100 * time.Millisecond
	// servingTimeout bounds each request: connect and response.
	servingTimeout = DefaultConnectTimeout + DefaultResponseTimeout
)

// WaitServing waits until target, an http URL, answers: until
// [ServingInARow] GET requests in a row get a complete response with a
// status below 500 (class [OK]), each on a new connection made by dial (nil
// means a net.Dialer), each bounded by the default connect and response
// timeouts. After a failed request it waits 100 ms and counts from zero
// again. It is the rule by which the runner starts a scenario's traffic,
// whichever the backend: a generator that starts before its target answers
// counts the target's start-up as failures.
//
// Judged through the dialer of the traffic, from where the traffic comes
// from: the local cluster's routing view for the embedded cluster, the load
// pod's own network (`closingtime load --wait-serving`) on a real one.
//
// If ctx ends first, WaitServing returns an error that wraps ctx.Err() and
// gives the last failure.
func WaitServing(ctx context.Context, dial Dialer, target string) error {
	if _, err := http.NewRequest(http.MethodGet, target, nil); err != nil {
		return fmt.Errorf("wait for the target to answer: %w", err)
	}
	transport := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: servingTimeout}
	var last error // the last failure before ctx ended
	for good := 0; good < ServingInARow; {
		err := askServing(ctx, client, target)
		if err == nil {
			good++
			continue
		}
		if ctx.Err() == nil {
			last = err
		}
		good = 0
		select {
		case <-time.After(servingRetryDelay):
		case <-ctx.Done():
			err := fmt.Errorf("wait for %s to answer %d requests in a row: %w", target, ServingInARow, ctx.Err())
			if last != nil {
				err = fmt.Errorf("%w (last failure: %v)", err, last)
			}
			return err
		}
	}
	return nil
}

// askServing sends one request of WaitServing: nil if it got a complete
// response with a status below 500.
func askServing(ctx context.Context, client *http.Client, target string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode >= 500 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
