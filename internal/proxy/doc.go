// Package proxy is the lab's reverse proxy behind `closingtime proxy`: a
// sidecar in front of its pod's app that behaves as the proxies users run
// there do, Envoy and Istio's agent, so that a scenario shows what they
// turn an app's shutdown into.
//
// [Run] forwards every request on its listener to one upstream, the app
// on the pod's own loopback, on a connection of its own: a pool's hidden
// resend of a request whose reused connection broke would change the
// failure the client sees. When the upstream
// fails before its response's headers, the sidecar answers itself, with
// Envoy's status and body for the [Reason]: 503 `… delayed connect error:
// 111` for a refused connect, 503 for a reset, 504 when the route timeout
// passes. [Recognize] reads those answers back, from a real Envoy as
// well.
//
// On SIGTERM it exits at once ([ModeExit], Envoy's own) or drains first
// ([ModeDrain], Istio's agent). An admin listener serves Envoy's
// shutdown endpoints: POST /drain_listeners[?graceful],
// /healthcheck/fail, /healthcheck/ok, /quitquitquit, and GET /ready;
// [Call] is the client a preStop hook runs. A hold file keeps the
// listener closed until the app says it is ready, as seed 003's wrapper
// held Envoy.
//
// The log is the lab server's (target.NewLogger): started,
// admin_listening, holding, held, listening, sigterm, draining,
// health_failed, live, listener_closed, request, signal_ignored, exiting. docs/proxy.md lists
// their fields.
package proxy
