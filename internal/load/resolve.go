package load

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/resolver"
)

// DefaultResolveInterval is the shortest time between two lookups of a
// gRPC client that resolves its target's name itself: grpc-go's DNS
// resolver's minimum resolution interval, 30 s.
const DefaultResolveInterval = 30 * time.Second

// A Lookup returns the addresses of a host name, as DNS does.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// Resolve makes each gRPC channel resolve its target's host itself, as a
// client of a headless Service does through DNS, and balance its calls
// round robin over every address the lookup gives (grpc-go's round_robin),
// rather than dial the host as it is (one connection per channel, which a
// ClusterIP's kube-proxy sends to one pod).
type Resolve struct {
	// Lookup returns the addresses of host. Nil means the system's
	// resolver (net.DefaultResolver), which a pod's DNS points at the
	// cluster's.
	Lookup Lookup
	// Interval is the shortest time between two lookups. A channel looks
	// its host up again only when it asks to (grpc-go's ResolveNow: a
	// connection lost, a connect failed), and not before Interval has
	// passed since the last lookup, as grpc-go's DNS resolver does. Zero
	// means DefaultResolveInterval.
	Interval time.Duration
}

// lookupScheme is the scheme of the targets of channels that resolve
// their host themselves.
const lookupScheme = "closingtime-lookup"

// lookupBuilder builds the resolvers of a Resolve.
type lookupBuilder struct{ Resolve }

func (b lookupBuilder) Scheme() string { return lookupScheme }

func (b lookupBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	host, port, err := net.SplitHostPort(target.Endpoint())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &lookupResolver{Resolve: b.Resolve, host: host, port: port, cc: cc, cancel: cancel, now: make(chan struct{}, 1)}
	r.wg.Go(func() { r.run(ctx) })
	return r, nil
}

// lookupResolver looks its host up at once, then each time its channel
// asks, at most once an Interval.
type lookupResolver struct {
	Resolve
	host, port string
	cc         resolver.ClientConn
	cancel     context.CancelFunc
	now        chan struct{}
	wg         sync.WaitGroup
}

func (r *lookupResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

func (r *lookupResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

func (r *lookupResolver) run(ctx context.Context) {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultResolveInterval
	}
	lookup := r.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	// retry is the wait after a failed lookup, or an answer the channel
	// refused (no address): grpc-go's DNS resolver polls then, with a
	// backoff of its own, rather than wait for the channel to ask.
	retry := retryFirst
	for {
		looked := time.Now()
		addrs, err := lookup(ctx, r.host)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.cc.ReportError(err)
		} else {
			state := resolver.State{Addresses: make([]resolver.Address, len(addrs))}
			for i, a := range addrs {
				state.Addresses[i] = resolver.Address{Addr: net.JoinHostPort(a.Unmap().String(), r.port)}
			}
			err = r.cc.UpdateState(state)
		}
		next := looked.Add(interval)
		if err != nil {
			next = time.Now().Add(min(retry, interval))
			retry = time.Duration(float64(retry) * retryGrowth)
		} else {
			retry = retryFirst
			select {
			case <-ctx.Done():
				return
			case <-r.now:
			}
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// retryFirst and retryGrowth space a resolver's lookups after a failure,
// as grpc-go's default exponential backoff does (1 s, 1.6 times longer
// each time), never longer apart than the Resolve's Interval.
const (
	retryFirst  = time.Second
	retryGrowth = 1.6
)
