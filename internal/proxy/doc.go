// Package proxy is the lab's reverse proxy behind `closingtime proxy`: a
// sidecar in front of its pod's app that behaves as the proxies users run
// there do, Envoy and Istio's agent, so that a scenario shows what they
// turn an app's shutdown into.
//
// [Run] forwards every request on its listener to one upstream, the app
// on the pod's own loopback, over a pool of keep-alive connections that
// never resends a request silently, as Envoy's. When the upstream fails
// before its response's headers, the sidecar answers itself, with
// Envoy's status and body for the [Reason]: 503 `… delayed connect error:
// 111` for a refused connect, 503 for a reset (a pooled connection that
// the app closed as the request came included), 504 when the route
// timeout passes. [Recognize] reads those answers back, from a real
// Envoy as well.
//
// With the edge role ([RoleEdge]) it is an ingress instead: it watches a
// Service's EndpointSlices, sends each request straight to a Ready
// endpoint, round-robin, retries as NGINX's proxy_next_upstream does,
// and answers NGINX's 502, 503 and 504 pages.
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
