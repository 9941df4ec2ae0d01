package proxy

import (
	"bytes"
	"net/http"
)

// A Reason is why a proxy answered a request itself, with a 5xx, instead
// of passing its upstream's response on: what the upstream did. Its
// values are stable; results files carry them.
type Reason string

const (
	// UpstreamRefused: the upstream refused the connection (ECONNREFUSED,
	// errno 111): nothing listened on its port.
	UpstreamRefused Reason = "upstream-refused"
	// UpstreamConnectTimeout: the upstream's connect did not complete in
	// the proxy's connect timeout.
	UpstreamConnectTimeout Reason = "upstream-connect-timeout"
	// UpstreamReset: the upstream closed or reset the connection before
	// its response's headers.
	UpstreamReset Reason = "upstream-reset"
	// UpstreamTimeout: the upstream's response did not come in the
	// proxy's route timeout.
	UpstreamTimeout Reason = "upstream-timeout"
)

// envoyReplies are Envoy's local replies, which the sidecar answers with
// (the first of each reason) and Recognize reads, from a real Envoy as
// well.
var envoyReplies = []struct {
	reason Reason
	status int
	body   string
}{
	{UpstreamRefused, http.StatusServiceUnavailable, envoyConnectError + "connection failure, transport failure reason: delayed connect error: 111"},
	{UpstreamConnectTimeout, http.StatusServiceUnavailable, envoyConnectError + "connection timeout"},
	{UpstreamReset, http.StatusServiceUnavailable, envoyConnectError + "connection termination"},
	{UpstreamReset, http.StatusServiceUnavailable, envoyConnectError + "remote reset"},
	{UpstreamTimeout, http.StatusGatewayTimeout, "upstream request timeout"},
}

// envoyConnectError begins Envoy's body for an upstream that failed before
// its response's headers; the reset reason follows.
const envoyConnectError = "upstream connect error or disconnect/reset before headers. reset reason: "

// reply returns the status and body of the local reply for reason.
func reply(reason Reason) (status int, body string) {
	for _, r := range envoyReplies {
		if r.reason == reason {
			return r.status, r.body
		}
	}
	panic("proxy: no reply for reason " + string(reason))
}

// Recognize returns the reason a proxy gave for answering a request
// itself with status and body (its beginning will do, 512 bytes): one of
// Envoy's local replies, closingtime proxy's among them; "" for any other
// answer, an upstream's own 5xx included.
func Recognize(status int, body []byte) Reason {
	if status < 500 {
		return ""
	}
	body = bytes.TrimSpace(body)
	for _, r := range envoyReplies {
		if status == r.status && string(body) == r.body {
			return r.reason
		}
	}
	return ""
}
