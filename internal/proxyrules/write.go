package proxyrules

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// masqueradeMark is the packet mark that asks nat-postrouting to
// masquerade, kube-proxy's default (--masquerade-bit 14).
const masqueradeMark = 1 << 14

// Priorities of the base chains, kube-proxy's: the filter chains see a
// packet before DNAT (dstnat-10), filter-output-post-dnat after it.
const (
	dstNAT = -100
	srcNAT = 100
)

// baseChain is a chain that a netfilter hook runs.
type baseChain struct {
	name     string
	kind     nftables.ChainType
	hook     *nftables.ChainHook
	priority nftables.ChainPriority
	jumps    []string // the chains it jumps to, in order
	newOnly  bool     // jump for the first packet of a connection only (ct state new)
}

var baseChains = []baseChain{
	{"filter-input", nftables.ChainTypeFilter, nftables.ChainHookInput, dstNAT - 10, []string{nodePortEndpointsCheck, serviceEndpointsCheck}, true},
	{"filter-forward", nftables.ChainTypeFilter, nftables.ChainHookForward, dstNAT - 10, []string{serviceEndpointsCheck, clusterIPsCheck}, true},
	{"filter-output", nftables.ChainTypeFilter, nftables.ChainHookOutput, dstNAT - 10, []string{serviceEndpointsCheck}, true},
	{"filter-output-post-dnat", nftables.ChainTypeFilter, nftables.ChainHookOutput, dstNAT + 10, []string{clusterIPsCheck}, true},
	{"nat-prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, dstNAT, []string{servicesChain}, false},
	{"nat-output", nftables.ChainTypeNAT, nftables.ChainHookOutput, dstNAT, []string{servicesChain}, false},
	{"nat-postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, srcNAT, []string{masqueradingChain}, false},
}

// Key types of the base maps and sets.
var (
	ipProtoPort = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	protoPort   = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
)

// writeBase adds to the transaction a new table in place of any of its
// name, with the base chains, maps and sets, and their rules.
func (r *Rules) writeBase() {
	c := r.conn
	// Adding the table first makes the delete find one to delete.
	c.AddTable(r.table)
	c.DelTable(r.table)
	c.AddTable(r.table)

	vmap := func(name string, key nftables.SetDatatype) {
		r.addSet(&nftables.Set{Name: name, IsMap: true, Concatenation: true, KeyType: key, DataType: nftables.TypeVerdict}, nil)
	}
	vmap(serviceIPsMap, ipProtoPort)
	vmap(serviceNodePortsMap, protoPort)
	vmap(noEndpointServicesMap, ipProtoPort)
	vmap(noEndpointNodePortsMap, protoPort)
	r.addSet(&nftables.Set{Name: clusterIPsSet, KeyType: nftables.TypeIPAddr}, nil)

	for _, b := range baseChains {
		c.AddChain(&nftables.Chain{Name: b.name, Table: r.table, Type: b.kind, Hooknum: b.hook, Priority: nftables.ChainPriorityRef(b.priority)})
	}
	for _, name := range []string{servicesChain, masqueradingChain, markMasqChain, serviceEndpointsCheck, nodePortEndpointsCheck, clusterIPsCheck, rejectChain} {
		c.AddChain(&nftables.Chain{Name: name, Table: r.table})
	}
	for _, b := range baseChains {
		for _, to := range b.jumps {
			var exprs []expr.Any
			if b.newOnly {
				exprs = ctStateNew()
			}
			r.addRule(b.name, append(exprs, jump(to)))
		}
	}

	// mark set mark or 0x4000
	r.addRule(markMasqChain, setMark(^uint32(masqueradeMark), masqueradeMark))
	// mark and 0x4000 == 0 return; mark set mark xor 0x4000; masquerade fully-random
	r.addRule(masqueradingChain, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native(masqueradeMark), Xor: native(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: native(0)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	})
	r.addRule(masqueradingChain, setMark(^uint32(0), masqueradeMark))
	r.addRule(masqueradingChain, []expr.Any{&expr.Masq{FullyRandom: true}})

	// ip daddr . meta l4proto . th dport vmap @service-ips
	r.addRule(servicesChain, append(daddrProtoPort(), lookupVerdict(serviceIPsMap)))
	// fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
	r.addRule(servicesChain, slices.Concat(
		[]expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: native(unix.RTN_LOCAL)},
		},
		notLocalhost(), protoPortKey(), []expr.Any{lookupVerdict(serviceNodePortsMap)}))

	// ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	r.addRule(serviceEndpointsCheck, append(daddrProtoPort(), lookupVerdict(noEndpointServicesMap)))
	// ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports
	r.addRule(nodePortEndpointsCheck, slices.Concat(notLocalhost(), protoPortKey(), []expr.Any{lookupVerdict(noEndpointNodePortsMap)}))
	// ip daddr @cluster-ips reject: a ClusterIP on a port that no
	// Service has, as no DNAT took the packet elsewhere.
	r.addRule(clusterIPsCheck, []expr.Any{daddr(), &expr.Lookup{SourceRegister: 1, SetName: clusterIPsSet}, reject()})
	r.addRule(rejectChain, []expr.Any{reject()})
}

// writeDiff adds to the transaction what turns the table's per-Service
// part from old into want, in an order the kernel accepts: a chain or a
// set goes only once nothing refers to it, and comes before anything that
// does. It fails when it can't read a chain it edits.
func (r *Rules) writeDiff(old, want *state) error {
	c := r.conn
	// Elements that go or change their verdict.
	var gone []element
	for e, v := range old.elements {
		if w, ok := want.elements[e]; !ok || w != v {
			gone = append(gone, e)
		}
	}
	r.setElements(gone, nil, c.SetDeleteElements)

	// An affinity set whose timeout changes is made anew, and the chains
	// that refer to it are rewritten.
	retimed := map[string]bool{}
	for name, d := range old.sets {
		if w, ok := want.sets[name]; ok && w != d {
			retimed[name] = true
		}
	}
	// Chains that go or change lose their rules, and so their references
	// to other chains and to sets: all of them, or those a chain edited in
	// place no longer has.
	rewrite := map[string]bool{}
	var edits []chainEdit
	for name, rules := range old.chains {
		w, ok := want.chains[name]
		if ok && !refersTo(w, retimed) {
			if slices.EqualFunc(rules, w, rule.equal) {
				continue
			}
			e, edited, err := r.edit(name, rules, w)
			if err != nil {
				return fmt.Errorf("read chain %s: %w", name, err)
			}
			if edited {
				r.writeDeletes(e)
				edits = append(edits, e)
				continue
			}
		}
		c.FlushChain(&nftables.Chain{Name: name, Table: r.table})
		if ok {
			rewrite[name] = true
		}
	}
	for name := range old.sets {
		if _, ok := want.sets[name]; !ok || retimed[name] {
			c.DelSet(&nftables.Set{Name: name, Table: r.table})
		}
	}
	// A chain that goes stays, empty, for staleChainDelay; those that
	// have stayed that long go now.
	now := r.now()
	for name, since := range r.stale {
		if _, back := want.chains[name]; !back && now.Sub(since) >= staleChainDelay {
			c.DelChain(&nftables.Chain{Name: name, Table: r.table})
			delete(r.stale, name)
		}
	}
	for name := range old.chains {
		if _, ok := want.chains[name]; !ok {
			r.stale[name] = now
		}
	}

	// New chains and sets, then the rules, then the elements that lead
	// to them. A stale chain that comes back is there already, empty.
	for name := range want.chains {
		if _, ok := old.chains[name]; !ok {
			if _, stale := r.stale[name]; !stale {
				c.AddChain(&nftables.Chain{Name: name, Table: r.table})
			}
			delete(r.stale, name)
			rewrite[name] = true
		}
	}
	for name, d := range want.sets {
		if _, ok := old.sets[name]; !ok || retimed[name] {
			r.addSet(&nftables.Set{Name: name, KeyType: nftables.TypeIPAddr, HasTimeout: true, Timeout: d, Dynamic: true}, nil)
		}
	}
	for name := range rewrite {
		for _, rl := range want.chains[name] {
			r.addRule(name, r.exprs(rl))
		}
	}
	for _, e := range edits {
		r.writeInserts(e)
	}
	var added []element
	for e, v := range want.elements {
		if w, ok := old.elements[e]; !ok || w != v {
			added = append(added, e)
		}
	}
	r.setElements(added, want.elements, c.SetAddElements)
	return nil
}

// refersTo reports whether a rule of rules refers to one of sets.
func refersTo(rules []rule, sets map[string]bool) bool {
	return slices.ContainsFunc(rules, func(rl rule) bool { return sets[rl.set] })
}

// setElements adds to the transaction one call of op for each set that
// els are of; values gives the verdicts of added elements (nil to
// delete).
func (r *Rules) setElements(els []element, values map[element]verdict, op func(*nftables.Set, []nftables.SetElement) error) {
	bySet := map[string][]nftables.SetElement{}
	for _, e := range els {
		se := nftables.SetElement{Key: e.key()}
		if v, ok := values[e]; ok && v != (verdict{}) {
			se.VerdictData = v.expr()
		}
		bySet[e.set] = append(bySet[e.set], se)
	}
	for name, elems := range bySet {
		// Marshalling errors stay in the Conn and fail its Flush.
		_ = op(&nftables.Set{Name: name, Table: r.table, IsMap: name != clusterIPsSet}, elems)
	}
}

// key returns the element's key as the kernel holds it: each part of a
// concatenation takes a whole 32-bit register.
func (e element) key() []byte {
	var k []byte
	if e.ip.IsValid() {
		a := e.ip.As4()
		k = append(k, a[:]...)
	}
	if e.port != 0 {
		k = append(k, unix.IPPROTO_TCP, 0, 0, 0, byte(e.port>>8), byte(e.port), 0, 0)
	}
	return k
}

func (v verdict) expr() *expr.Verdict {
	if v.drop {
		return &expr.Verdict{Kind: expr.VerdictDrop}
	}
	return &expr.Verdict{Kind: expr.VerdictGoto, Chain: v.chain}
}

// exprs returns rl's expressions, and adds to the transaction the
// anonymous map of a spread rule, which the kernel deletes with the rule.
func (r *Rules) exprs(rl rule) []expr.Any {
	switch rl.kind {
	case markOutside:
		mask := prefixMask(rl.prefix.Bits())
		addr := rl.prefix.Addr().As4()
		return []expr.Any{
			saddr(),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask[:], Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: addr[:]},
			jump(markMasqChain),
		}
	case markAll:
		return []expr.Any{jump(markMasqChain)}
	case markFrom:
		addr := rl.prefix.Addr().As4()
		return []expr.Any{saddr(), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]}, jump(markMasqChain)}
	case stick:
		return []expr.Any{saddr(), &expr.Lookup{SourceRegister: 1, SetName: rl.set}, &expr.Verdict{Kind: expr.VerdictGoto, Chain: rl.chains[0]}}
	case goTo:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: rl.chains[0]}}
	case spread:
		m := &nftables.Set{Anonymous: true, Constant: true, IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
		elems := make([]nftables.SetElement, len(rl.chains))
		for i, ch := range rl.chains {
			elems[i] = nftables.SetElement{Key: native(uint32(i)), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: ch}}
		}
		r.addSet(m, elems)
		return []expr.Any{
			&expr.Numgen{Register: 1, Modulus: uint32(len(rl.chains)), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: m.Name, SetID: m.ID},
		}
	case remember:
		return []expr.Any{saddr(), &expr.Dynset{SrcRegKey: 1, SetName: rl.set, Operation: unix.NFT_DYNSET_OP_UPDATE}}
	case dnat:
		addr := rl.to.Addr().As4()
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Immediate{Register: 1, Data: addr[:]},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(rl.to.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		}
	}
	panic("proxyrules: unknown rule kind")
}

// addSet adds s to the transaction, in r's table. It gives s an ID of the
// transaction's own (and an anonymous set its name pattern), so that the
// library's process-wide counter, which Conns in other goroutines share
// unguarded, stays untouched.
func (r *Rules) addSet(s *nftables.Set, elems []nftables.SetElement) {
	s.Table = r.table
	r.setID++
	s.ID = r.setID
	if s.Anonymous {
		s.Name = "__map%d" // the kernel numbers it
	}
	// Marshalling errors stay in the Conn and fail its Flush.
	_ = r.conn.AddSet(s, elems)
}

func (r *Rules) addRule(chain string, exprs []expr.Any) {
	r.conn.AddRule(&nftables.Rule{Table: r.table, Chain: &nftables.Chain{Name: chain, Table: r.table}, Exprs: exprs})
}

// ctStateNew matches the first packet of a connection: ct state new.
func ctStateNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native(expr.CtStateBitNEW), Xor: native(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: native(0)},
	}
}

// setMark sets the packet mark to (mark & mask) ^ xor.
func setMark(mask, xor uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native(mask), Xor: native(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// notLocalhost matches a destination outside 127.0.0.0/8.
func notLocalhost() []expr.Any {
	m := prefixMask(8)
	return []expr.Any{
		daddr(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m[:], Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
}

// daddrProtoPort loads ip daddr . meta l4proto . th dport into the
// registers from 1 on, a 32-bit register for each part.
func daddrProtoPort() []expr.Any {
	return []expr.Any{
		daddr(),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: unix.NFT_REG32_01},
		&expr.Payload{DestRegister: unix.NFT_REG32_02, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// protoPortKey loads meta l4proto . th dport into the registers from 1 on.
func protoPortKey() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Payload{DestRegister: unix.NFT_REG32_01, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// lookupVerdict looks the key in register 1 up in the verdict map name
// and applies the verdict it finds.
func lookupVerdict(name string) *expr.Lookup {
	return &expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: name}
}

func saddr() *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func daddr() *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
}

func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

// icmpPortUnreachable is the code of ICMP destination unreachable that
// says port unreachable (RFC 792).
const icmpPortUnreachable = 3

// reject refuses the packet with ICMP port unreachable, nft's reject in
// the ip family.
func reject() *expr.Reject {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreachable}
}

// prefixMask returns the network mask of an IPv4 prefix of bits bits.
func prefixMask(bits int) [4]byte {
	m := ^uint32(0) << (32 - bits) // 0 for bits 0: Go shifts every bit out
	return [4]byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
}

// native returns v in the host's byte order, as the kernel holds marks,
// conntrack states, address types and numgen's numbers.
func native(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }
