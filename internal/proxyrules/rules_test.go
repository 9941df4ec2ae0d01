package proxyrules

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"

	"github.com/closingtime-dev/closingtime/internal/podnet"
)

const podCIDR = "10.244.0.0/16"

func endpoints(addrs ...string) []netip.AddrPort {
	eps := make([]netip.AddrPort, len(addrs))
	for i, a := range addrs {
		eps[i] = netip.MustParseAddrPort(a)
	}
	return eps
}

// view is a node's view of three Services: web, with affinity, a node
// port and endpoints on two nodes; idle, without endpoints; headless.
func view() []Service {
	return []Service{
		{Namespace: "default", Name: "web", ClusterIP: netip.MustParseAddr("10.96.0.10"), Affinity: affinityTimeout,
			Ports: []Port{{Name: "http", Port: 80, NodePort: 30080,
				Endpoints:         endpoints("10.244.1.2:8080", "10.244.1.3:8080"),
				NodePortEndpoints: endpoints("10.244.1.2:8080", "10.244.2.2:8080")}}},
		{Namespace: "default", Name: "idle", ClusterIP: netip.MustParseAddr("10.96.0.11"),
			Ports: []Port{{Port: 80, NodePort: 30081}, {Name: "local", Port: 81, NoEndpoints: Drop}}},
		{Namespace: "default", Name: "headless", Ports: []Port{{Port: 80, Endpoints: endpoints("10.244.1.4:80")}}},
	}
}

// baseTable is the table with no Service, as kube-proxy's base rules.
func baseTable() table {
	return table{
		chains: map[string][]string{
			"filter-input":             {"ct state new jump nodeport-endpoints-check", "ct state new jump service-endpoints-check"},
			"filter-forward":           {"ct state new jump service-endpoints-check", "ct state new jump cluster-ips-check"},
			"filter-output":            {"ct state new jump service-endpoints-check"},
			"filter-output-post-dnat":  {"ct state new jump cluster-ips-check"},
			"nat-prerouting":           {"jump services"},
			"nat-output":               {"jump services"},
			"nat-postrouting":          {"jump masquerading"},
			"services":                 {"ip daddr . meta l4proto . th dport vmap @service-ips", "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"},
			"masquerading":             {"meta mark & 0x00004000 == 0x00000000 return", "meta mark set meta mark ^ 0x00004000", "masquerade fully-random"},
			"mark-for-masquerade":      {"meta mark set meta mark | 0x00004000"},
			"service-endpoints-check":  {"ip daddr . meta l4proto . th dport vmap @no-endpoint-services"},
			"nodeport-endpoints-check": {"ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports"},
			"cluster-ips-check":        {"ip daddr @cluster-ips reject"},
			"reject-chain":             {"reject"},
		},
		sets: map[string][]string{
			"service-ips": nil, "service-nodeports": nil, "no-endpoint-services": nil, "no-endpoint-nodeports": nil, "cluster-ips": nil,
		},
	}
}

// The names of web's chains, kube-proxy's.
var (
	webService  = "service-SUSTUHLJ-default/web/tcp/http"
	webExternal = "external-SUSTUHLJ-default/web/tcp/http"
)

func webEndpoint(ip string) (chain, set string) {
	base := "default/web/tcp/http__" + ip + "/8080"
	return objectName(endpointPrefix, base), objectName(affinityPrefix, base)
}

// viewTable is the table of view().
func viewTable() table {
	tb := baseTable()
	ep2, aff2 := webEndpoint("10.244.1.2")
	ep3, aff3 := webEndpoint("10.244.1.3")
	ep22, aff22 := webEndpoint("10.244.2.2")
	tb.chains[webService] = []string{
		"ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
		"ip saddr @" + aff2 + " goto " + ep2,
		"ip saddr @" + aff3 + " goto " + ep3,
		"numgen random mod 2 vmap { 0 : goto " + ep2 + ", 1 : goto " + ep3 + " }",
		"goto " + ep2,
	}
	tb.chains[webExternal] = []string{
		"jump mark-for-masquerade",
		"ip saddr @" + aff2 + " goto " + ep2,
		"ip saddr @" + aff22 + " goto " + ep22,
		"numgen random mod 2 vmap { 0 : goto " + ep2 + ", 1 : goto " + ep22 + " }",
		"goto " + ep2,
	}
	for _, ep := range []struct{ ip, chain, set string }{{"10.244.1.2", ep2, aff2}, {"10.244.1.3", ep3, aff3}, {"10.244.2.2", ep22, aff22}} {
		tb.chains[ep.chain] = []string{
			"ip saddr " + ep.ip + " jump mark-for-masquerade",
			"update @" + ep.set + " { ip saddr }",
			"meta l4proto tcp dnat to " + ep.ip + ":8080",
		}
		tb.sets[ep.set+" timeout 3h0m0s"] = nil
	}
	tb.sets["service-ips"] = []string{"10.96.0.10 . tcp . 80 : goto " + webService}
	tb.sets["service-nodeports"] = []string{"tcp . 30080 : goto " + webExternal}
	tb.sets["no-endpoint-services"] = []string{"10.96.0.11 . tcp . 80 : goto reject-chain", "10.96.0.11 . tcp . 81 : drop"}
	tb.sets["no-endpoint-nodeports"] = []string{"tcp . 30081 : goto reject-chain"}
	tb.sets["cluster-ips"] = []string{"10.96.0.10", "10.96.0.11"}
	return tb
}

// diffTables compares two tables' chains and sets, not their handles.
func diffTables(got, want table) string {
	return cmp.Diff(want.chains, got.chains) + cmp.Diff(want.sets, got.sets)
}

func mustSync(t *testing.T, r *Rules, ns *podnet.Netns, services []Service) {
	t.Helper()
	if err := r.Sync(services); err != nil {
		t.Fatalf("sync: %v%s", err, ruleset(ns))
	}
	if len(r.stale) == 0 {
		return
	}
	// Once more, a staleChainDelay later by r's clock, so that the chains
	// the first unlinked are gone: the table is services' alone.
	now := r.now
	defer func() { r.now = now }()
	r.now = func() time.Time { return now().Add(staleChainDelay) }
	if err := r.Sync(services); err != nil {
		t.Fatalf("sync a second later: %v%s", err, ruleset(ns))
	}
}

// TestAnUnlinkedChainStaysASecond: a chain that a Sync unlinks stays,
// empty, and goes with the first Sync a second later, as kube-proxy keeps
// one, so that no packet the kernel was taking through it as the
// transaction committed finds it gone; one that comes back before is
// written again in place.
func TestAnUnlinkedChainStaysASecond(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	start := time.Now()
	at := start
	r.now = func() time.Time { return at }
	three := view()
	three[0].Ports[0].Endpoints = endpoints("10.244.1.2:8080", "10.244.1.3:8080", "10.244.1.5:8080")
	ep5, _ := webEndpoint("10.244.1.5")
	for _, step := range []struct {
		at   time.Duration // after start
		view []Service
		want string // ep5's chain: "gone", "empty", or "routes"
	}{
		{0, three, "routes"},
		{0, view(), "empty"},
		{500 * time.Millisecond, view(), "empty"},
		{500 * time.Millisecond, three, "routes"},
		{600 * time.Millisecond, view(), "empty"},
		{1500 * time.Millisecond, view(), "empty"},
		{1600 * time.Millisecond, view(), "gone"},
	} {
		at = start.Add(step.at)
		if err := r.Sync(step.view); err != nil {
			t.Fatalf("sync at +%v: %v", step.at, err)
		}
		rules, ok := readTable(t, ns).chains[ep5]
		got := "gone"
		switch {
		case ok && len(rules) == 0:
			got = "empty"
		case ok && slices.Contains(rules, "meta l4proto tcp dnat to 10.244.1.5:8080"):
			got = "routes"
		case ok:
			got = fmt.Sprintf("%q", rules)
		}
		if got != step.want {
			t.Errorf("+%v, %d endpoints: chain %s %s, want %s", step.at, len(step.view[0].Ports[0].Endpoints), ep5, got, step.want)
		}
	}
}

func TestObjectNamesAreKubeProxys(t *testing.T) {
	// Names from kube-proxy's tests (pkg/proxy/nftables/proxier_test.go).
	for _, c := range []struct{ prefix, base, want string }{
		{servicePrefix, "ns1/svc1/tcp/p80", "service-ULMVA6XW-ns1/svc1/tcp/p80"},
		{endpointPrefix, "ns1/svc1/tcp/p80__10.180.0.1/80", "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"},
		{affinityPrefix, "ns5/svc5/tcp/p80__10.180.0.3/80", "affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"},
	} {
		if got := objectName(c.prefix, c.base); got != c.want {
			t.Errorf("objectName(%q, %q) = %q, want %q", c.prefix, c.base, got, c.want)
		}
	}
	long := strings.Repeat("n", 63)
	a := objectName(endpointPrefix, long+"/"+long+"/tcp/"+long+"__10.244.1.2/8080"+strings.Repeat("x", 100))
	b := objectName(endpointPrefix, long+"/"+long+"/tcp/"+long+"__10.244.1.2/8080"+strings.Repeat("y", 100))
	if len(a) != maxNameLen || !strings.HasSuffix(a, "...") || a == b {
		t.Errorf("names past the kernel's limit: %q and %q, want %d bytes each, ending in ..., and distinct", a, b, maxNameLen)
	}
}

func TestNewWritesTheBaseTable(t *testing.T) {
	ns := newNetns(t)
	newRules(t, ns, podCIDR)
	if d := diffTables(readTable(t, ns), baseTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	hooks := map[string]string{}
	for _, ch := range chains {
		if ch.Hooknum != nil {
			hooks[ch.Name] = string(ch.Type) + " " + hookNames[*ch.Hooknum] + " " + strconv.Itoa(int(*ch.Priority))
		}
	}
	want := map[string]string{
		"filter-input": "filter input -110", "filter-forward": "filter forward -110", "filter-output": "filter output -110",
		"filter-output-post-dnat": "filter output -90",
		"nat-prerouting":          "nat prerouting -100", "nat-output": "nat output -100", "nat-postrouting": "nat postrouting 100",
	}
	if d := cmp.Diff(want, hooks); d != "" {
		t.Errorf("base chains (-want +got):\n%s", d)
	}
}

var hookNames = map[nftables.ChainHook]string{
	*nftables.ChainHookPrerouting: "prerouting", *nftables.ChainHookInput: "input", *nftables.ChainHookForward: "forward",
	*nftables.ChainHookOutput: "output", *nftables.ChainHookPostrouting: "postrouting",
}

func TestSyncWritesKubeProxysRules(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	if d := diffTables(readTable(t, ns), viewTable()); d != "" {
		t.Errorf("table (-want +got):\n%s%s", d, ruleset(ns))
	}
}

func TestNodePortOfTheClusterIPsEndpointsGoesThroughTheServiceChain(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	v := view()
	v[0].Ports[0].NodePortEndpoints = endpoints("10.244.1.3:8080", "10.244.1.2:8080")
	mustSync(t, r, ns, v)
	want := viewTable()
	want.chains[webExternal] = []string{"jump mark-for-masquerade", "goto " + webService}
	ep22, aff22 := webEndpoint("10.244.2.2")
	delete(want.chains, ep22)
	delete(want.sets, aff22+" timeout 3h0m0s")
	if d := diffTables(readTable(t, ns), want); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestSyncWithoutPodCIDRMasqueradesOnlyHairpinAndNodePorts(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, "")
	mustSync(t, r, ns, view())
	want := viewTable()
	want.chains[webService] = want.chains[webService][1:]
	if d := diffTables(readTable(t, ns), want); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestSyncOfTheSameViewWritesNothing(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	_, aff2 := webEndpoint("10.244.1.2")
	addClient(t, ns, aff2, "10.0.0.1")
	before := readTable(t, ns)
	mustSync(t, r, ns, view())
	after := readTable(t, ns)
	if d := diffTables(after, before); d != "" {
		t.Errorf("table (-before +after):\n%s", d)
	}
	// The kernel gives every rule it adds a new handle.
	if d := cmp.Diff(before.handles, after.handles); d != "" {
		t.Errorf("rules rewritten (-before +after):\n%s", d)
	}
}

// addClient adds client to the affinity set, as the kernel does for a
// client's connection through its endpoint chain.
func addClient(t *testing.T, ns *podnet.Netns, set, client string) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr(client).As4()
	s := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}, Name: set, HasTimeout: true}
	if err := c.SetAddElements(s, []nftables.SetElement{{Key: a[:]}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("add %s to %s: %v", client, set, err)
	}
}

func TestSyncSeesAViewChangedInPlace(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	v := view()
	v[0].Ports[0].Endpoints = endpoints("10.244.1.2:8080", "10.244.1.5:8080")
	mustSync(t, r, ns, v)
	// The caller reuses its slices for the next view.
	v[0].Ports[0].Endpoints[1] = netip.MustParseAddrPort("10.244.1.3:8080")
	mustSync(t, r, ns, v)
	if d := diffTables(readTable(t, ns), viewTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestAServiceThatChangesLeavesTheOthersAlone(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	v := append(view(), web(endpoints("10.244.3.2:80")...))
	v[3].Name, v[3].ClusterIP = "other", netip.MustParseAddr("10.96.0.12")
	mustSync(t, r, ns, v)
	before := readTable(t, ns)
	v[3].Ports[0].Endpoints = endpoints("10.244.3.3:80")
	mustSync(t, r, ns, v)
	after := readTable(t, ns)
	for name, handles := range before.handles {
		if strings.Contains(name, "default/web/") && !slices.Equal(handles, after.handles[name]) {
			t.Errorf("chain %s of default/web rewritten: handles %v, then %v", name, handles, after.handles[name])
		}
	}
}

func TestRemovingAnEndpointDeletesItsChainAndKeepsTheOthers(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	v := view()
	v[0].Ports[0].Endpoints = endpoints("10.244.1.2:8080", "10.244.1.3:8080", "10.244.1.5:8080")
	mustSync(t, r, ns, v)
	ep2, aff2 := webEndpoint("10.244.1.2")
	ep5, aff5 := webEndpoint("10.244.1.5")
	addClient(t, ns, aff2, "10.0.0.1")
	addClient(t, ns, aff5, "10.0.0.2")
	before := readTable(t, ns)

	mustSync(t, r, ns, view())
	after := readTable(t, ns)
	want := viewTable()
	want.sets[aff2+" timeout 3h0m0s"] = []string{"10.0.0.1"}
	if d := diffTables(after, want); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	if _, ok := after.chains[ep5]; ok {
		t.Errorf("chain %s of the removed endpoint is still there", ep5)
	}
	// What the change does not touch keeps its rules: the other
	// endpoints' chains and the node port's chain.
	for _, name := range []string{ep2, webExternal, "services"} {
		if !slices.Equal(before.handles[name], after.handles[name]) {
			t.Errorf("chain %s rewritten: handles %v, then %v", name, before.handles[name], after.handles[name])
		}
	}
	if slices.Equal(before.handles[webService], after.handles[webService]) {
		t.Errorf("chain %s kept its rules, which pick among three endpoints", webService)
	}
}

func TestAffinityRulesAreEditedInPlace(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	// want is web's service chain for endpoints of these addresses.
	want := func(ips ...string) []string {
		lines := []string{"ip saddr != 10.244.0.0/16 jump mark-for-masquerade"}
		var picks []string
		first, _ := webEndpoint(ips[0])
		for i, ip := range ips {
			chain, set := webEndpoint(ip)
			lines = append(lines, "ip saddr @"+set+" goto "+chain)
			picks = append(picks, strconv.Itoa(i)+" : goto "+chain)
		}
		if len(ips) > 1 {
			lines = append(lines, "numgen random mod "+strconv.Itoa(len(ips))+" vmap { "+strings.Join(picks, ", ")+" }")
		}
		return append(lines, "goto "+first)
	}
	sync := func(ips ...string) table {
		t.Helper()
		v := view()
		v[0].Ports[0].Endpoints = nil
		for _, ip := range ips {
			v[0].Ports[0].Endpoints = append(v[0].Ports[0].Endpoints, netip.AddrPortFrom(netip.MustParseAddr(ip), 8080))
		}
		mustSync(t, r, ns, v)
		tb := readTable(t, ns)
		if d := cmp.Diff(want(ips...), tb.chains[webService]); d != "" {
			t.Errorf("endpoints %v: chain %s (-want +got):\n%s", ips, webService, d)
		}
		return tb
	}
	first := sync("10.244.1.2", "10.244.1.3", "10.244.1.4")
	// One endpoint goes, one comes first: the rules of the two kept stay.
	second := sync("10.244.1.5", "10.244.1.2", "10.244.1.4")
	h1, h2 := first.handles[webService], second.handles[webService]
	if h1[0] != h2[0] || h1[1] != h2[2] || h1[3] != h2[3] {
		t.Errorf("handles %v, then %v: want the rules of the kept endpoints, and the first, kept", h1, h2)
	}
	// The kept endpoints change their order: the chain is rewritten.
	sync("10.244.1.4", "10.244.1.2")
}

func TestRemovedServicesLeaveNothing(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	empty := readTable(t, ns)
	mustSync(t, r, ns, view())
	mustSync(t, r, ns, nil)
	after := readTable(t, ns)
	if d := diffTables(after, baseTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	if d := cmp.Diff(empty.handles, after.handles); d != "" {
		t.Errorf("base rules rewritten (-before +after):\n%s", d)
	}
}

func TestSyncMovesAPortBetweenItsMaps(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	svc := func(eps []netip.AddrPort, noEndpoints Verdict, nodeEps []netip.AddrPort) []Service {
		return []Service{{Namespace: "default", Name: "api", ClusterIP: netip.MustParseAddr("10.96.0.20"),
			Ports: []Port{{Port: 443, NodePort: 30443, Endpoints: eps, NoEndpoints: noEndpoints, NodePortEndpoints: nodeEps}}}}
	}
	service := objectName(servicePrefix, "default/api/tcp/")
	external := objectName(externalPrefix, "default/api/tcp/")
	one, other := endpoints("10.244.1.2:443"), endpoints("10.244.2.2:443")
	for _, step := range []struct {
		name     string
		services []Service
		elements map[string][]string
	}{
		{"endpoints", svc(one, Reject, one), map[string][]string{
			"service-ips": {"10.96.0.20 . tcp . 443 : goto " + service}, "service-nodeports": {"tcp . 30443 : goto " + external}}},
		{"none, rejected", svc(nil, Reject, nil), map[string][]string{
			"no-endpoint-services": {"10.96.0.20 . tcp . 443 : goto reject-chain"}, "no-endpoint-nodeports": {"tcp . 30443 : goto reject-chain"}}},
		{"none here, dropped", svc(nil, Drop, other), map[string][]string{
			"no-endpoint-services": {"10.96.0.20 . tcp . 443 : drop"}, "service-nodeports": {"tcp . 30443 : goto " + external}}},
		{"endpoints again", svc(one, Drop, one), map[string][]string{
			"service-ips": {"10.96.0.20 . tcp . 443 : goto " + service}, "service-nodeports": {"tcp . 30443 : goto " + external}}},
	} {
		mustSync(t, r, ns, step.services)
		tb := readTable(t, ns)
		want := map[string][]string{"cluster-ips": {"10.96.0.20"}}
		maps.Copy(want, step.elements)
		got := map[string][]string{}
		for name, elems := range tb.sets {
			if len(elems) > 0 {
				got[name] = elems
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: elements (-want +got):\n%s", step.name, d)
		}
		_, hasService := tb.chains[service]
		_, hasExternal := tb.chains[external]
		if hasService != (len(step.services[0].Ports[0].Endpoints) > 0) || hasExternal != (len(step.services[0].Ports[0].NodePortEndpoints) > 0) {
			t.Errorf("%s: chains %s %v, %s %v", step.name, service, hasService, external, hasExternal)
		}
	}
}

func TestChangedAffinityTimeoutRemakesTheSets(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	v := view()
	v[0].Affinity = 10 * time.Second
	mustSync(t, r, ns, v)
	want := viewTable()
	for name := range want.sets {
		if strings.HasPrefix(name, affinityPrefix) {
			delete(want.sets, name)
			want.sets[strings.Replace(name, "3h0m0s", "10s", 1)] = nil
		}
	}
	if d := diffTables(readTable(t, ns), want); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	v[0].Affinity = 0
	mustSync(t, r, ns, v)
	for name := range readTable(t, ns).sets {
		if strings.HasPrefix(name, affinityPrefix) {
			t.Errorf("set %s left without affinity", name)
		}
	}
}

func TestSyncRefusesWhatTheTableCantHold(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	before := readTable(t, ns)
	ip := netip.MustParseAddr("10.96.0.30")
	for _, c := range []struct {
		name   string
		change func([]Service) []Service
		want   string
	}{
		{"no name", func(v []Service) []Service { v[0].Name = ""; return v }, `Service "default/": want a namespace and a name`},
		{"a Service twice", func(v []Service) []Service { return append(v, v[1]) }, "Service default/idle listed twice"},
		{"IPv6 ClusterIP", func(v []Service) []Service { v[1].ClusterIP = netip.MustParseAddr("fd00::10"); return v }, "ClusterIP fd00::10 is not IPv4"},
		{"a ClusterIP of two Services", func(v []Service) []Service {
			return append(v, Service{Namespace: "other", Name: "web", ClusterIP: v[0].ClusterIP, Ports: []Port{{Port: 8080}}})
		}, "Service other/web: ClusterIP 10.96.0.10 is Service default/web's too"},
		{"a node port of two Services", func(v []Service) []Service {
			return append(v, Service{Namespace: "other", Name: "np", ClusterIP: ip, Ports: []Port{{Port: 80, NodePort: 30080}}})
		}, "node port 30080 is Service default/web port 80's too"},
		{"a port number twice", func(v []Service) []Service {
			v[1].Ports = append(v[1].Ports, Port{Name: "again", Port: 80, Endpoints: endpoints("10.244.1.9:80")})
			return v
		}, "ClusterIP 10.96.0.11 port 80 is Service default/idle port 80's too"},
		{"a port name twice", func(v []Service) []Service { v[1].Ports[1].Name = ""; return v }, `Service default/idle: port name "" used twice`},
		{"port 0", func(v []Service) []Service { v[1].Ports[0].Port = 0; return v }, "Service default/idle port 0: want a port number"},
		{"an endpoint without a port", func(v []Service) []Service {
			v[0].Ports[0].Endpoints = endpoints("10.244.1.2:0")
			return v
		}, "endpoint 10.244.1.2:0: want an IPv4 address and a port"},
		{"an IPv6 endpoint", func(v []Service) []Service {
			v[0].Ports[0].NodePortEndpoints = endpoints("[fd00::1]:80")
			return v
		}, "endpoint [fd00::1]:80: want an IPv4 address and a port"},
		{"an unknown verdict", func(v []Service) []Service { v[1].Ports[0].NoEndpoints = 7; return v }, "no-endpoints verdict Verdict(7)"},
		{"a negative affinity", func(v []Service) []Service { v[0].Affinity = -time.Second; return v }, "affinity timeout -1s"},
		{"an affinity under 1ms", func(v []Service) []Service { v[0].Affinity = time.Microsecond; return v }, "affinity timeout 1µs"},
	} {
		err := r.Sync(c.change(view()))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	after := readTable(t, ns)
	if d := cmp.Diff(before.handles, after.handles) + diffTables(after, before); d != "" {
		t.Errorf("the table changed:\n%s", d)
	}
}

func TestDuplicateEndpointsCountOnce(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	v := view()
	v[0].Ports[0].Endpoints = endpoints("10.244.1.2:8080", "10.244.1.3:8080", "10.244.1.2:8080")
	mustSync(t, r, ns, v)
	if d := diffTables(readTable(t, ns), viewTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestNewReplacesATableOfItsName(t *testing.T) {
	ns := newNetns(t)
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	old := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	c.AddChain(&nftables.Chain{Name: "left-over", Table: old})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	newRules(t, ns, podCIDR)
	if d := diffTables(readTable(t, ns), baseTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestCloseDeletesTheTable(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, ns) {
		t.Errorf("table ip %s is still there after Close%s", TableName, ruleset(ns))
	}
	if err := r.Sync(view()); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

func TestSyncAfterARefusedTransactionWritesTheTableWhole(t *testing.T) {
	ns := newNetns(t)
	r := newRules(t, ns, podCIDR)
	mustSync(t, r, ns, view())
	// Someone else deletes the table: the next transaction, which
	// deletes what it no longer wants, fails whole.
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	v := view()
	v[0].Ports[0].Endpoints = v[0].Ports[0].Endpoints[:1]
	if err := r.Sync(v); err == nil {
		t.Fatalf("sync into a deleted table succeeded%s", ruleset(ns))
	}
	if hasTable(t, ns) {
		t.Fatalf("the refused transaction left a table%s", ruleset(ns))
	}
	mustSync(t, r, ns, view())
	if d := diffTables(readTable(t, ns), viewTable()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "network namespace fd 0"},
		{Config{NetNS: 3, PodCIDR: netip.MustParsePrefix("fd00::/64")}, "pod range fd00::/64: want an IPv4 prefix"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error with %q", c.cfg, err, c.want)
		}
	}
}
