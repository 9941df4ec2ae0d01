// Package podnettest helps tests prove that the networks of package podnet
// leave the machine's own network namespace as they found it.
package podnettest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetworkState returns what the network namespace of the calling
// goroutine's thread holds, one line per item, sorted: links, addresses,
// routes of every table, routing rules, nftables tables and chains with
// their number of rules, and the forwarding sysctls. Counters, states and
// lifetimes are left out, so two calls differ only where something was
// added, removed or changed. A goroutine that has not locked its thread
// runs on none that a podnet.Netns holds, so it sees the namespace the
// process started in. It fails the test if the kernel refuses a list.
func NetworkState(t testing.TB) []string {
	t.Helper()
	var state []string
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		state = append(state, fmt.Sprintf("link %d %s %s", l.Attrs().Index, l.Attrs().Name, l.Type()))
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		state = append(state, fmt.Sprintf("addr %d %s", a.LinkIndex, a.IPNet))
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		state = append(state, fmt.Sprintf("route table %d type %d dst %s gw %s src %s dev %d proto %d priority %d",
			r.Table, r.Type, r.Dst, r.Gw, r.Src, r.LinkIndex, r.Protocol, r.Priority))
	}
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		state = append(state, "rule "+r.String())
	}
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := nft.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		state = append(state, fmt.Sprintf("nftables table %d %s", tb.Family, tb.Name))
	}
	chains, err := nft.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		rules, err := nft.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		state = append(state, fmt.Sprintf("nftables chain %d %s %s, %d rules", ch.Table.Family, ch.Table.Name, ch.Name, len(rules)))
	}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding", "net/bridge/bridge-nf-call-iptables"} {
		// /proc/sys/net is the namespace of the thread that opens it.
		if v, err := os.ReadFile("/proc/sys/" + key); err == nil {
			state = append(state, "sysctl "+key+" "+strings.TrimSpace(string(v)))
		}
	}
	slices.Sort(state)
	return state
}
