package proxy

import (
	"net/http"
	"slices"
	"strings"
)

// edgeReasons are the reasons the edge names in its X-Proxy-Reason.
var edgeReasons = []Reason{UpstreamRefused, UpstreamUnreachable, UpstreamConnectTimeout, UpstreamReset, UpstreamTimeout, NoEndpoints}

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
	// UpstreamUnreachable: the upstream's connect failed with no host to
	// answer it (EHOSTUNREACH, errno 113: its address had gone from its
	// network).
	UpstreamUnreachable Reason = "upstream-unreachable"
	// UpstreamReset: the upstream closed or reset the connection before
	// its response's headers.
	UpstreamReset Reason = "upstream-reset"
	// UpstreamTimeout: the upstream's response did not come in the
	// proxy's route timeout (the sidecar) or read timeout (the edge).
	UpstreamTimeout Reason = "upstream-timeout"
	// UpstreamError: the upstream refused, reset or closed the
	// connection, and the proxy does not say which: NGINX's 502.
	UpstreamError Reason = "upstream-error"
	// NoEndpoints: the proxy had no endpoint to send the request to: an
	// ingress's 503 for a Service without ready endpoints.
	NoEndpoints Reason = "no-endpoints"
)

// envoyReplies are the sidecar's answers, Envoy's local replies: the
// status and body for each reason.
var envoyReplies = map[Reason]struct {
	status int
	body   string
}{
	UpstreamRefused:        {http.StatusServiceUnavailable, envoyConnectError + "connection failure, transport failure reason: delayed connect error: 111"},
	UpstreamConnectTimeout: {http.StatusServiceUnavailable, envoyConnectError + "connection timeout"},
	UpstreamUnreachable:    {http.StatusServiceUnavailable, envoyConnectError + "connection failure, transport failure reason: delayed connect error: 113"},
	UpstreamReset:          {http.StatusServiceUnavailable, envoyConnectError + "connection termination"},
	UpstreamTimeout:        {http.StatusGatewayTimeout, "upstream request timeout"},
}

// envoyConnectError begins Envoy's body for an upstream that failed before
// its response's headers; the reset reason follows.
const envoyConnectError = "upstream connect error or disconnect/reset before headers. reset reason: "

// reply returns the status and body of the sidecar's answer for reason.
func reply(reason Reason) (status int, body string) {
	r := envoyReplies[reason]
	return r.status, r.body
}

// Recognize returns the reason a proxy gave for answering a request
// itself with status, header and body (its beginning will do, 512
// bytes): Envoy's local replies, the sidecar's among them, in the words of
// the Envoy versions that write the errno (`delayed connect error: 111`)
// and of those that name it (`remote connection failure, … Connection
// refused`); NGINX's 502 and 504 pages, the edge's among them, whose
// reason the edge's X-Proxy-Reason header tells (UpstreamError and
// UpstreamTimeout without it); "" for any other answer, an upstream's own
// 5xx included.
func Recognize(status int, header http.Header, body []byte) Reason {
	text := strings.TrimSpace(string(body))
	// NGINX's page ends with its name, and its version unless
	// server_tokens is off.
	if strings.Contains(text, "<hr><center>nginx") {
		if r := Reason(header.Get(reasonHeader)); slices.Contains(edgeReasons, r) {
			return r
		}
		switch status {
		case http.StatusBadGateway:
			return UpstreamError
		case http.StatusGatewayTimeout:
			return UpstreamTimeout
		}
		return ""
	}
	if status == http.StatusGatewayTimeout && text == "upstream request timeout" {
		return UpstreamTimeout
	}
	reset, ok := strings.CutPrefix(text, envoyConnectError)
	if status != http.StatusServiceUnavailable || !ok {
		return ""
	}
	switch {
	case strings.Contains(reset, "connection failure"):
		// The transport's reason names the connect's error.
		if strings.HasSuffix(reset, ": 111") || strings.HasSuffix(reset, "Connection refused") {
			return UpstreamRefused
		}
		if strings.HasSuffix(reset, ": 110") || strings.Contains(reset, "timed out") {
			return UpstreamConnectTimeout
		}
		if strings.HasSuffix(reset, ": 113") || strings.HasSuffix(reset, "No route to host") {
			return UpstreamUnreachable
		}
		return ""
	case strings.HasPrefix(reset, "connection timeout"):
		return UpstreamConnectTimeout
	case strings.HasPrefix(reset, "connection termination"), strings.HasPrefix(reset, "remote reset"):
		return UpstreamReset
	}
	return ""
}
