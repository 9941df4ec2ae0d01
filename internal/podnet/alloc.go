package podnet

import (
	"fmt"
	"net/netip"
	"sync"
)

// allocator hands out the addresses of a range, one at a time, going round
// the range so that a freed address is reused as late as possible (a
// client that still holds a connection to a gone pod's address then meets
// no new pod there).
type allocator struct {
	prefix   netip.Prefix
	reserved map[netip.Addr]bool

	mu   sync.Mutex
	used map[netip.Addr]bool
	next netip.Addr
}

// newAllocator returns an allocator of prefix's addresses but its first
// (the network) and last (broadcast) and reserved.
func newAllocator(prefix netip.Prefix, reserved ...netip.Addr) *allocator {
	prefix = prefix.Masked()
	a := &allocator{prefix: prefix, reserved: map[netip.Addr]bool{prefix.Addr(): true}, used: map[netip.Addr]bool{}, next: prefix.Addr()}
	for _, r := range reserved {
		a.reserved[r] = true
	}
	return a
}

// take returns a free address.
func (a *allocator) take() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	size := 1 << (a.prefix.Addr().BitLen() - a.prefix.Bits())
	// At most one round of the range.
	for range size {
		ip := a.next.Next()
		if !a.prefix.Contains(ip) {
			ip = a.prefix.Addr()
		}
		a.next = ip
		if !a.prefix.Contains(ip.Next()) {
			continue // the broadcast address
		}
		if !a.used[ip] && !a.reserved[ip] {
			a.used[ip] = true
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", a.prefix)
}

// free gives ip back.
func (a *allocator) free(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}
