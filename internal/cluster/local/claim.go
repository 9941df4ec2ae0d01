package local

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// claimPort is the port of the socket by which a cluster claims its pod
// range (see claimRange).
const claimPort = 47077

// clusterRanges are the /16s of 127.0.0.0/8 that New picks a cluster's pod
// range from when Config.PodCIDR is unset: 127.100.0.0/16 to
// 127.254.0.0/16, apart from the standalone kubelet's DefaultPodCIDR.
func clusterRanges() []netip.Prefix {
	var ranges []netip.Prefix
	for b := 100; b <= 254; b++ {
		ranges = append(ranges, netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(b), 0, 0}), 16))
	}
	return ranges
}

// errRangeClaimed is returned by claimRange for a range that another
// cluster holds.
var errRangeClaimed = errors.New("in use by another embedded cluster on this machine")

// claimRange reserves the pod range p for one cluster among every process
// of the machine, so that clusters of different processes (a lab, tests
// run in parallel) never hand out the same pod address. The claim is a
// listening socket on the range's first address and claimPort, which no
// pod uses (node n's pods are in the range's n-th /24, from 1), which
// binds only once, and which the kernel releases when the process ends
// however it ends. Closing the returned listener releases the claim.
func claimRange(p netip.Prefix) (net.Listener, error) {
	addr := net.JoinHostPort(p.Masked().Addr().Next().String(), strconv.Itoa(claimPort))
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("pod range %s: %w", p, errRangeClaimed)
	}
	if err != nil {
		return nil, fmt.Errorf("pod range %s: claim %s: %w", p, addr, err)
	}
	return ln, nil
}

// ClaimFreeRange claims the first /16 from 127.100.0.0/16 to
// 127.254.0.0/16 that no embedded cluster or set of node agents of any
// process on the machine holds, for the pod addresses of a cluster's nodes
// (see podnet.NodePodCIDR). The claim lasts until the returned Closer is closed or
// the process ends.
func ClaimFreeRange() (netip.Prefix, io.Closer, error) {
	for _, p := range clusterRanges() {
		ln, err := claimRange(p)
		if errors.Is(err, errRangeClaimed) {
			continue
		}
		return p, ln, err
	}
	return netip.Prefix{}, nil, fmt.Errorf("no free pod range: every /16 from 127.100.0.0 to 127.254.0.0 is %v", errRangeClaimed)
}

// MaxNodes is the most nodes a cluster has: each takes a /24 of its /16
// pod range (podnet.NodePodCIDR), whose third byte numbers the nodes from 1.
const MaxNodes = podnet.MaxNodes
