package proxyrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// This file reads the table back from the kernel through the nftables
// library and renders it as `nft list ruleset` would, for the rules this
// package writes, so that tests compare what the kernel holds with the
// rules kube-proxy writes, line for line.

// newNetns returns a network namespace of the test's own, closed when the
// test ends, or skips the test where none can be made.
func newNetns(t testing.TB) *podnet.Netns {
	t.Helper()
	ns, err := podnet.NewNetns()
	if errors.Is(err, podnet.ErrUnsupported) {
		t.Skipf("no network namespace can be made here (run as root, or with CAP_NET_ADMIN in a user namespace): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// newRules returns Rules in ns, closed when the test ends.
func newRules(t testing.TB, ns *podnet.Netns, podCIDR string) *Rules {
	t.Helper()
	cfg := Config{NetNS: ns.FD()}
	if podCIDR != "" {
		cfg.PodCIDR = netip.MustParsePrefix(podCIDR)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

// table is the table ip closingtime as the kernel holds it.
type table struct {
	// chains holds each chain's rules, rendered.
	chains map[string][]string
	// handles holds each chain's rule handles, which the kernel gives
	// anew to every rule it adds.
	handles map[string][]uint64
	// sets holds each named set's or map's elements, rendered and
	// sorted; an affinity set's name is followed by its timeout.
	sets map[string][]string
}

// readTable reads the table of ns, failing the test if it has none.
func readTable(t testing.TB, ns *podnet.Netns) table {
	t.Helper()
	tb, err := tryReadTable(ns)
	if err != nil {
		t.Fatalf("read table ip %s: %v%s", TableName, err, ruleset(ns))
	}
	return tb
}

func tryReadTable(ns *podnet.Netns) (table, error) {
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		return table{}, err
	}
	tb := table{chains: map[string][]string{}, handles: map[string][]uint64{}, sets: map[string][]string{}}
	nt := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	if _, err := c.ListTableOfFamily(TableName, nftables.TableFamilyIPv4); err != nil {
		return table{}, err
	}
	sets, err := c.GetSets(nt)
	if err != nil {
		return table{}, err
	}
	for _, s := range sets {
		if s.Anonymous {
			continue
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return table{}, fmt.Errorf("set %s: %w", s.Name, err)
		}
		name := s.Name
		if s.HasTimeout {
			name += " timeout " + s.Timeout.String()
		}
		tb.sets[name] = renderElements(elems)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return table{}, err
	}
	for _, ch := range chains {
		if ch.Table.Name != TableName {
			continue
		}
		rules, err := c.GetRules(nt, ch)
		if err != nil {
			return table{}, fmt.Errorf("chain %s: %w", ch.Name, err)
		}
		tb.chains[ch.Name] = []string{}
		for _, r := range rules {
			text, err := renderRule(c, nt, r.Exprs)
			if err != nil {
				return table{}, fmt.Errorf("chain %s: %w", ch.Name, err)
			}
			tb.chains[ch.Name] = append(tb.chains[ch.Name], text)
			tb.handles[ch.Name] = append(tb.handles[ch.Name], r.Handle)
		}
	}
	return tb, nil
}

// hasTable reports whether ns has the table ip closingtime.
func hasTable(t testing.TB, ns *podnet.Netns) bool {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == TableName })
}

// ruleset returns `nft list ruleset` of ns for a failure message, if nft
// is installed.
func ruleset(ns *podnet.Netns) string {
	path, err := exec.LookPath("nft")
	if err != nil {
		return ""
	}
	cmd := exec.Command(path, "list", "ruleset")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := ns.Start(cmd); err != nil {
		return "\nnft list ruleset: " + err.Error()
	}
	cmd.Wait()
	return "\nnft list ruleset:\n" + out.String()
}

// operand is what a rule has loaded into a register.
type operand struct {
	text string
	kind string // "ip", "proto", "port", "mark", "ct state", "fib type", "number"
	bits int    // ip: the prefix length of a mask applied to it
	op   string // mark: the bitwise operation applied to it, e.g. "& 0x00004000"
}

// renderRule renders exprs as nft lists them.
func renderRule(c *nftables.Conn, t *nftables.Table, exprs []expr.Any) (string, error) {
	regs := map[uint32]operand{}
	var words []string
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Payload:
			switch {
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 12 && e.Len == 4:
				regs[e.DestRegister] = operand{text: "ip saddr", kind: "ip", bits: 32}
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 16 && e.Len == 4:
				regs[e.DestRegister] = operand{text: "ip daddr", kind: "ip", bits: 32}
			case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
				regs[e.DestRegister] = operand{text: "th dport", kind: "port"}
			default:
				return "", fmt.Errorf("payload %+v: not rendered", e)
			}
		case *expr.Meta:
			switch {
			case e.Key == expr.MetaKeyL4PROTO && !e.SourceRegister:
				regs[e.Register] = operand{text: "meta l4proto", kind: "proto"}
			case e.Key == expr.MetaKeyMARK && !e.SourceRegister:
				regs[e.Register] = operand{text: "meta mark", kind: "mark"}
			case e.Key == expr.MetaKeyMARK:
				words = append(words, "meta mark set "+regs[e.Register].text+" "+regs[e.Register].op)
			default:
				return "", fmt.Errorf("meta %+v: not rendered", e)
			}
		case *expr.Ct:
			regs[e.Register] = operand{text: "ct state", kind: "ct state"}
		case *expr.Fib:
			regs[e.Register] = operand{text: "fib daddr type", kind: "fib type"}
		case *expr.Numgen:
			regs[e.Register] = operand{text: fmt.Sprintf("numgen random mod %d", e.Modulus), kind: "number"}
		case *expr.Bitwise:
			o := regs[e.SourceRegister]
			mask, xor := binary.NativeEndian.Uint32(e.Mask), binary.NativeEndian.Uint32(e.Xor)
			switch o.kind {
			case "ip":
				o.bits = prefixBits(e.Mask)
			case "ct state":
			case "mark":
				switch {
				case xor == 0:
					o.op = fmt.Sprintf("& 0x%08x", mask)
				case mask == ^uint32(0):
					o.op = fmt.Sprintf("^ 0x%08x", xor)
				case mask == ^xor:
					o.op = fmt.Sprintf("| 0x%08x", xor)
				}
			default:
				return "", fmt.Errorf("bitwise on %s: not rendered", o.text)
			}
			regs[e.DestRegister] = o
		case *expr.Cmp:
			o := regs[e.Register]
			if o.kind == "ct state" {
				// ct state & new != 0
				words = append(words, "ct state new")
				continue
			}
			text := o.text
			if o.op != "" {
				text += " " + o.op
			}
			switch {
			case e.Op == expr.CmpOpNeq:
				text += " !="
			case o.op != "":
				text += " =="
			}
			words = append(words, text+" "+renderValue(o, e.Data))
		case *expr.Lookup:
			key := regs[e.SourceRegister].text
			// A concatenation's further parts are in the next 32-bit
			// registers.
			for _, r := range []uint32{unix.NFT_REG32_01, unix.NFT_REG32_02} {
				if o, ok := regs[r]; ok {
					key += " . " + o.text
				}
			}
			set := "@" + e.SetName
			if strings.HasPrefix(e.SetName, "__") {
				elems, err := c.GetSetElements(&nftables.Set{Table: t, Name: e.SetName})
				if err != nil {
					return "", err
				}
				set = "{ " + strings.Join(renderNumbered(elems), ", ") + " }"
			}
			if e.IsDestRegSet {
				words = append(words, key+" vmap "+set)
			} else {
				words = append(words, key+" "+set)
			}
		case *expr.Dynset:
			words = append(words, "update @"+e.SetName+" { "+regs[e.SrcRegKey].text+" }")
		case *expr.Immediate:
			regs[e.Register] = operand{text: fmt.Sprint(e.Data)}
			switch len(e.Data) {
			case 4:
				regs[e.Register] = operand{text: netip.AddrFrom4([4]byte(e.Data)).String()}
			case 2:
				regs[e.Register] = operand{text: fmt.Sprint(binary.BigEndian.Uint16(e.Data))}
			}
		case *expr.NAT:
			if e.Type != expr.NATTypeDestNAT || !e.Specified {
				return "", fmt.Errorf("nat %+v: not rendered", e)
			}
			words = append(words, "dnat to "+regs[e.RegAddrMin].text+":"+regs[e.RegProtoMin].text)
		case *expr.Masq:
			if e.FullyRandom {
				words = append(words, "masquerade fully-random")
			} else {
				words = append(words, "masquerade")
			}
		case *expr.Reject:
			if e.Type != unix.NFT_REJECT_ICMP_UNREACH || e.Code != icmpPortUnreachable {
				return "", fmt.Errorf("reject %+v: not rendered", e)
			}
			words = append(words, "reject")
		case *expr.Verdict:
			words = append(words, renderVerdict(e.Kind, e.Chain))
		default:
			return "", fmt.Errorf("expression %T: not rendered", e)
		}
	}
	return strings.Join(words, " "), nil
}

// renderValue renders data compared with o.
func renderValue(o operand, data []byte) string {
	switch o.kind {
	case "ip":
		a := netip.AddrFrom4([4]byte(data))
		if o.bits < 32 {
			return netip.PrefixFrom(a, o.bits).String()
		}
		return a.String()
	case "proto":
		if len(data) == 1 && data[0] == unix.IPPROTO_TCP {
			return "tcp"
		}
	case "fib type":
		if binary.NativeEndian.Uint32(data) == unix.RTN_LOCAL {
			return "local"
		}
	case "mark":
		return fmt.Sprintf("0x%08x", binary.NativeEndian.Uint32(data))
	}
	return fmt.Sprint(data)
}

// prefixBits returns the prefix length of an IPv4 network mask.
func prefixBits(mask []byte) int {
	bits := 0
	for _, b := range mask {
		for ; b&0x80 != 0; b <<= 1 {
			bits++
		}
	}
	return bits
}

func renderVerdict(kind expr.VerdictKind, chain string) string {
	switch kind {
	case expr.VerdictJump:
		return "jump " + chain
	case expr.VerdictGoto:
		return "goto " + chain
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictReturn:
		return "return"
	}
	return fmt.Sprintf("verdict %d", kind)
}

// renderElements renders the elements of a named set or map, sorted: a
// key of 12 bytes is ip . proto . port, of 8 proto . port, of 4 an ip.
func renderElements(elems []nftables.SetElement) []string {
	var out []string
	for _, e := range elems {
		var parts []string
		k := e.Key
		if len(k) == 4 || len(k) == 12 {
			parts = append(parts, netip.AddrFrom4([4]byte(k[:4])).String())
			k = k[4:]
		}
		if len(k) == 8 {
			proto := fmt.Sprint(k[0])
			if k[0] == unix.IPPROTO_TCP {
				proto = "tcp"
			}
			parts = append(parts, proto, fmt.Sprint(binary.BigEndian.Uint16(k[4:6])))
		}
		text := strings.Join(parts, " . ")
		if len(e.Val) > 0 {
			text += " : " + decodeVerdict(e.Val)
		}
		out = append(out, text)
	}
	slices.Sort(out)
	return out
}

// renderNumbered renders the elements of an anonymous map of numgen's
// numbers, which the kernel holds in the host's byte order, in order.
func renderNumbered(elems []nftables.SetElement) []string {
	slices.SortFunc(elems, func(a, b nftables.SetElement) int {
		return int(binary.NativeEndian.Uint32(a.Key)) - int(binary.NativeEndian.Uint32(b.Key))
	})
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = fmt.Sprintf("%d : %s", binary.NativeEndian.Uint32(e.Key), decodeVerdict(e.Val))
	}
	return out
}

// decodeVerdict decodes a verdict element's data: the attributes
// NFTA_VERDICT_CODE and NFTA_VERDICT_CHAIN.
func decodeVerdict(b []byte) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err.Error()
	}
	ad.ByteOrder = binary.BigEndian
	var code int32
	var chain string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			code = int32(ad.Uint32())
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	return renderVerdict(expr.VerdictKind(code), chain)
}

// affinityTimeout is a timeout of sessionAffinity ClientIP for the tests,
// Kubernetes' default.
const affinityTimeout = 3 * time.Hour
