package retry_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/closingtime-dev/closingtime/retry"
)

// A GET whose keep-alive connection is reset by a dying server is sent
// again on a new connection; a POST in the same situation is not, because
// the server may have processed it.
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// Die in the middle of the first request: abort its connection.
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
			return
		}
		fmt.Fprintf(w, "%s served", r.Method)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retry.Transport{}}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println("GET:", err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("GET: %s after %d attempts\n", body, calls.Load())

	calls.Store(0)
	_, err = client.Post(srv.URL, "text/plain", strings.NewReader("order=42"))
	fmt.Printf("POST: failed=%t after %d attempt\n", err != nil, calls.Load())
	// Output:
	// GET: GET served after 2 attempts
	// POST: failed=true after 1 attempt
}

// A Transport that retries the 503 that an Envoy sidecar returns when it
// could not connect to its application, whatever the method, and that
// renews its connections every 30 seconds.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("X-Envoy-Connect-Failure", "true")
			http.Error(w, "upstream connect error or disconnect/reset before headers. reset reason: connection failure", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "created")
	}))
	defer srv.Close()

	tr := &retry.Transport{
		Policy: retry.Policy{
			// This proxy marks the responses it made without reaching the
			// application; a status code alone would not prove it.
			Unprocessed: func(resp *http.Response) bool {
				return resp.StatusCode == http.StatusServiceUnavailable &&
					resp.Header.Get("X-Envoy-Connect-Failure") == "true"
			},
		},
		MaxConnLifetime: 30 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("order=42"))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "after", calls.Load(), "attempts")
	// Output: 200 OK after 2 attempts
}

// A Policy with more, slower attempts, for a client that would rather wait
// out a rollout than fail.
func ExamplePolicy() {
	client := &http.Client{
		Transport: &retry.Transport{Policy: retry.Policy{
			Attempts:  5,
			BaseDelay: 500 * time.Millisecond,
			MaxDelay:  5 * time.Second,
		}},
		// The whole exchange, retries included, fits in this timeout.
		Timeout: 30 * time.Second,
	}
	_ = client
}

// countingTransport is a RoundTripper of the caller's own, wrapping an
// *http.Transport.
type countingTransport struct {
	base *http.Transport
	sent atomic.Int32
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	return c.base.RoundTrip(req)
}

// A Base of the caller's own cannot promise a new connection for a retry,
// so the Transport refuses to run with it alone (ErrNoFreshConn); Fresh
// says how retries get their connection.
func ExampleTransport_fresh() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	base := &countingTransport{base: &http.Transport{}}
	defer base.base.CloseIdleConnections()

	_, err := (&http.Client{Transport: &retry.Transport{Base: base}}).Get(srv.URL)
	fmt.Println(errors.Is(err, retry.ErrNoFreshConn))

	// Retries go out on connections that are never reused.
	fresh := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: &retry.Transport{Base: base, Fresh: fresh}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "sent by Base:", base.sent.Load())
	// Output:
	// true
	// 200 OK sent by Base: 1
}
