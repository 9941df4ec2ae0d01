package scenario

import (
	"context"
	"time"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/retry"
)

// A TrafficSource sends a scenario's traffic to its Service: from this
// process through the backend's DialContext ([LocalTraffic]), or from load
// pods inside a real cluster (package kube), so that it crosses the
// cluster's own routing. The runner does not know which; what a source
// returns is the same either way. A TrafficSource is used by one
// repetition at a time.
type TrafficSource interface {
	// WaitServing waits until the Service at cfg.URL answers, with the
	// timeouts of cfg (its Dial is the source's to set), or returns an
	// error that wraps ctx.Err() (with the last failure) if ctx ends
	// first; it calls failed, if not nil, with each failure on the way.
	// "Answers" is load.WaitServing's rule, judged from where the traffic
	// comes from; a source that cannot judge it from here does as much as
	// it can, and its Run then waits for the rule before its requests
	// begin (package kube's load pods).
	WaitServing(ctx context.Context, cfg load.Config, failed func(error)) error

	// Run sends the requests that cfg describes (its Dial, OnResult and
	// Events are the source's to set) until cfg.Duration has passed or
	// ctx ends, waits for the requests in flight, and returns the run's
	// report and the result of each request. It calls started once, when
	// the requests begin to flow; if it fails before, it returns without
	// calling it.
	Run(ctx context.Context, cfg load.Config, started func()) (*load.Report, []load.Result, error)
}

// LocalTraffic returns the TrafficSource that generates the traffic in
// this process, connecting through dial: the local cluster's DialContext,
// which routes a Service's address as a node's kube-proxy would. lookup,
// if not nil, is the cluster's DNS for a traffic whose channels resolve
// the Service's name themselves (Traffic.ResolveInterval); nil leaves
// them the system's resolver.
func LocalTraffic(dial load.Dialer, lookup load.Lookup) TrafficSource {
	return localTraffic{dial, lookup}
}

type localTraffic struct {
	dial   load.Dialer
	lookup load.Lookup
}

// configure gives cfg the source's dialer, and its lookup to a traffic
// that resolves names itself.
func (l localTraffic) configure(cfg *load.Config) {
	cfg.Dial = l.dial
	if r := cfg.Resolve; r != nil && r.Lookup == nil {
		cfg.Resolve = &load.Resolve{Lookup: l.lookup, Interval: r.Interval}
	}
}

// WaitServing waits until cfg.URL answers through the local cluster's
// routing, by load.WaitServing's rule.
func (l localTraffic) WaitServing(ctx context.Context, cfg load.Config, failed func(error)) error {
	l.configure(&cfg)
	return load.WaitServing(ctx, cfg, failed)
}

// Run runs a load generator in this process, which hands it each
// request's result as it completes.
func (l localTraffic) Run(ctx context.Context, cfg load.Config, started func()) (*load.Report, []load.Result, error) {
	var requests []load.Result
	l.configure(&cfg)
	cfg.Events = nil
	cfg.OnResult = func(r load.Result) { requests = append(requests, r) }
	gen, err := load.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	started()
	report, err := gen.Run(ctx)
	if err != nil {
		return nil, nil, err
	}
	return report, requests, nil
}

// loadConfig returns the generator configuration of traffic t to target,
// sending requests for at most limit.
func loadConfig(t Traffic, target string, limit time.Duration) load.Config {
	var clients []load.Client
	for _, c := range t.Clients {
		clients = append(clients, load.Client{Kind: c.Kind, Rate: c.Rate, Connections: c.Connections,
			Limits: load.Limits{MaxIdle: c.MaxIdle, MaxLifetime: c.MaxLifetime}})
	}
	var policy *retry.Policy
	if t.Retry != nil {
		policy = &retry.Policy{Attempts: t.Retry.Attempts, BaseDelay: t.Retry.BaseDelay}
	}
	var resolve *load.Resolve
	if t.ResolveInterval > 0 {
		resolve = &load.Resolve{Interval: t.ResolveInterval}
	}
	return load.Config{
		URL:             target,
		Clients:         clients,
		Duration:        limit,
		ConnectTimeout:  t.ConnectTimeout,
		ResponseTimeout: t.ResponseTimeout,
		Retry:           policy,
		Resolve:         resolve,
	}
}
