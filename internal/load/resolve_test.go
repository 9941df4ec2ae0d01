package load

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/closingtime-dev/closingtime/internal/labpb"
)

// namedLab answers Work at once in the name of its pod.
type namedLab struct {
	labpb.UnimplementedLabServer
	pod string
}

func (l namedLab) Work(ctx context.Context, _ *labpb.WorkRequest) (*labpb.WorkReply, error) {
	grpc.SetHeader(ctx, metadata.Pairs(grpcPodKey, l.pod))
	return &labpb.WorkReply{}, nil
}

// serveNamed serves a namedLab for pod on ip:port until the test ends,
// and returns its server.
func serveNamed(t *testing.T, ip string, port int, pod string) *grpc.Server {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	labpb.RegisterLabServer(gs, namedLab{pod: pod})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return gs
}

// TestResolveInterval: a keep-alive client that resolves its host itself
// balances over the addresses the lookup gives, and, when they all go
// away, learns the new one only at its next lookup, no sooner than the
// interval after the last: until then its calls fail, after they reach
// the new address.
func TestResolveInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a load of seconds")
	}
	// The pods' addresses share a port, as a Service's endpoints do.
	first, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := first.Addr().(*net.TCPAddr).Port
	first.Close()
	a := serveNamed(t, "127.0.0.2", port, "pod-a")
	b := serveNamed(t, "127.0.0.3", port, "pod-b")

	var mu sync.Mutex
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}
	var lookups []time.Time
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups = append(lookups, time.Now())
		return addrs, nil
	}
	const interval = 2 * time.Second
	type call struct {
		at    time.Time
		class Class
		pod   string
	}
	var calls []call
	g, err := New(Config{
		URL:      "grpc://app.shop.svc:" + strconv.Itoa(port),
		Clients:  []Client{{Kind: KeepAlive, Rate: 100, Connections: 1}},
		Duration: 4 * time.Second, ConnectTimeout: time.Second, ResponseTimeout: time.Second,
		Resolve: &Resolve{Lookup: lookup, Interval: interval},
		OnResult: func(r Result) {
			// When it was sent: a loaded machine may send it late.
			calls = append(calls, call{r.Time.Add(r.Lag), r.Class, r.Pod})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	replaced := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		serveNamed(t, "127.0.0.4", port, "pod-c")
		mu.Lock()
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		mu.Unlock()
		at := time.Now()
		a.Stop()
		b.Stop()
		replaced <- at
	}()
	if _, err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := <-replaced
	mu.Lock()
	defer mu.Unlock()
	// The first lookup is the channel's, as the run began; a failed call
	// on it is re-probed on a channel of its own, which looks up at once.
	start := lookups[0]
	pods := map[string]int{}
	var firstC, lastFailed time.Time
	failed := 0
	for _, c := range calls {
		pods[c.pod]++
		if c.class != OK {
			failed++
			if c.at.Before(stopped.Add(-100 * time.Millisecond)) {
				t.Errorf("a call failed at %v, before the addresses went away", c.at.Sub(start))
			}
			lastFailed = c.at
		}
		if c.pod == "pod-c" && firstC.IsZero() {
			firstC = c.at
		}
	}
	if pods["pod-a"] == 0 || pods["pod-b"] == 0 {
		t.Errorf("calls by pod %v: want both first addresses used, round robin", pods)
	}
	// The channel learns the new address at its second lookup, no
	// sooner than the interval after the first: its calls fail until
	// then, and reach the new address after.
	if firstC.IsZero() || firstC.Before(start.Add(interval-100*time.Millisecond)) {
		t.Fatalf("first call answered by the new address %v after the first lookup, want at least the interval, %v (calls by pod %v)",
			firstC.Sub(start), interval, pods)
	}
	if failed == 0 || lastFailed.After(firstC.Add(500*time.Millisecond)) {
		t.Errorf("%d calls failed, the last %v after the new address answered: want failures until it did", failed, lastFailed.Sub(firstC))
	}
}

// TestResolveRetriesEmptyAnswer: a lookup that finds no address (every pod
// unready, say) is tried again by itself, as grpc-go's DNS resolver polls
// after an answer its channel refused, not left until the channel asks,
// which, without a connection, it never does.
func TestResolveRetriesEmptyAnswer(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := first.Addr().(*net.TCPAddr).Port
	first.Close()
	serveNamed(t, "127.0.0.2", port, "pod-a")
	var mu sync.Mutex
	lookups := 0
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups == 1 {
			return nil, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}
	s := newGRPCSender((&net.Dialer{}).DialContext, "app.shop:"+strconv.Itoa(port), labpb.Lab_Work_FullMethodName, &Resolve{Lookup: lookup, Interval: time.Minute},
		5*time.Second, 5*time.Second, 1, Limits{})
	defer s.close()
	ch, _, err := s.channels.get(false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := labpb.NewLabClient(ch.cc).Work(ctx, &labpb.WorkRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call: %v, want it answered once the lookup found the address", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if lookups < 2 {
		t.Errorf("%d lookups, want a second after the empty answer", lookups)
	}
}
