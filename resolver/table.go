package resolver

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// table is one roster compiled for lookups. It is immutable once built and
// published through Server.table; a swap replaces the whole table.
//
// It holds no pointers per name, so 100,000 names cost a few megabytes and
// nothing for the garbage collector to scan: names are lowercase wire-format
// bytes in one arena, addresses in two more, and an open-addressing hash
// index points into entries.
type table struct {
	gen    uint64
	ttl    uint32 // of answers
	negTTL uint32 // of NXDOMAIN and NODATA answers, and the SOA minimum

	zones []zone
	names []byte   // wire-format lowercase names, back to back
	ents  []entry  // one per name, empty non-terminal and zone apex
	slots []uint32 // hash index: entry index + 1, 0 when free
	mask  uint64
	seed  maphash.Seed
	v4    []byte // 4 bytes per IPv4 address, grouped per entry
	v6    []byte // 16 bytes per IPv6 address, grouped per entry

	rev4 []rev4 // PTR index, sorted by address
	rev6 []rev6
}

// entry is one name of the table. Entries without addresses are empty
// non-terminals and zone apexes: they exist (NODATA), they do not resolve.
type entry struct {
	name    uint32 // offset in table.names
	v4      uint32 // index of the first IPv4 address in table.v4
	v6      uint32 // index of the first IPv6 address in table.v6
	n4, n6  uint16
	zone    uint16 // index+1 in table.zones of the zone holding the name, 0 outside
	nameLen uint8
	routed  bool // a roster name (not an empty non-terminal or apex)
}

type rev4 struct {
	addr [4]byte
	ent  uint32
}

type rev6 struct {
	addr [16]byte
	ent  uint32
}

// zone is one of the roster's zones.
type zone struct {
	name string // canonical
	wire []byte // lowercase wire format
	soa  []byte // the zone's SOA record in wire format, owner uncompressed
}

// maxAddrs bounds the addresses of one name: more would not fit a DNS
// message anyway.
const maxAddrs = 4000

// buildTable compiles a validated, normalized roster.
func buildTable(r *spec.Roster, ttl, negTTL uint32) (*table, error) {
	if len(r.Zones) >= 1<<16-1 {
		return nil, fmt.Errorf("roster has %d zones; at most %d are supported", len(r.Zones), 1<<16-2)
	}
	t := &table{gen: r.Generation, ttl: ttl, negTTL: negTTL, seed: maphash.MakeSeed()}
	for _, z := range r.Zones {
		w, err := wireName(z)
		if err != nil {
			return nil, fmt.Errorf("zone %q: %w", z, err)
		}
		t.zones = append(t.zones, zone{name: z, wire: w, soa: soaRecord(w, r.Generation, negTTL)})
	}

	names := r.SortedNames()
	// Apexes and empty non-terminals below them exist too, so that a
	// question for them is NODATA rather than an NXDOMAIN that would deny
	// the names below (RFC 8020).
	exists := map[string]bool{}
	for _, z := range r.Zones {
		if _, ok := r.Names[z]; !ok {
			exists[z] = true
		}
	}
	for _, n := range names {
		zi := t.zoneOf(n)
		if zi == 0 {
			continue
		}
		apex := t.zones[zi-1].name
		for p := parent(n); p != "" && len(p) > len(apex); p = parent(p) {
			if _, ok := r.Names[p]; !ok {
				exists[p] = true
			}
		}
	}
	var extra []string
	for n := range exists {
		extra = append(extra, n)
	}
	slices.Sort(extra)

	total := len(names) + len(extra)
	t.ents = make([]entry, 0, total)
	size := uint64(4)
	for size < uint64(total)*2 {
		size <<= 1
	}
	t.slots = make([]uint32, size)
	t.mask = size - 1
	var n4, n6, nameBytes int
	for _, n := range names {
		nameBytes += len(n) + 2
		for _, a := range r.Names[n] {
			if a.Is4() {
				n4++
			} else {
				n6++
			}
		}
	}
	for _, n := range extra {
		nameBytes += len(n) + 2
	}
	t.names = make([]byte, 0, nameBytes)
	t.v4 = make([]byte, 0, 4*n4)
	t.v6 = make([]byte, 0, 16*n6)
	t.rev4 = make([]rev4, 0, n4)
	t.rev6 = make([]rev6, 0, n6)

	add := func(n string, addrs []netip.Addr, routed bool) error {
		w, err := wireName(n)
		if err != nil {
			return fmt.Errorf("name %q: %w", n, err)
		}
		if len(addrs) > maxAddrs {
			return fmt.Errorf("name %q has %d addresses; at most %d fit a DNS answer", n, len(addrs), maxAddrs)
		}
		e := entry{
			name:    uint32(len(t.names)),
			nameLen: uint8(len(w)),
			v4:      uint32(len(t.v4) / 4),
			v6:      uint32(len(t.v6) / 16),
			zone:    t.zoneOf(n),
			routed:  routed,
		}
		idx := uint32(len(t.ents))
		t.names = append(t.names, w...)
		for _, a := range addrs {
			if a.Is4() {
				b := a.As4()
				t.v4 = append(t.v4, b[:]...)
				t.rev4 = append(t.rev4, rev4{b, idx})
				e.n4++
			} else {
				b := a.As16()
				t.v6 = append(t.v6, b[:]...)
				t.rev6 = append(t.rev6, rev6{b, idx})
				e.n6++
			}
		}
		t.ents = append(t.ents, e)
		for i := t.hash(w) & t.mask; ; i = (i + 1) & t.mask {
			if t.slots[i] == 0 {
				t.slots[i] = idx + 1
				break
			}
		}
		return nil
	}
	for _, n := range names {
		if err := add(n, r.Names[n], true); err != nil {
			return nil, err
		}
	}
	for _, n := range extra {
		if err := add(n, nil, false); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(t.rev4, func(a, b rev4) int {
		return cmp.Or(bytes.Compare(a.addr[:], b.addr[:]), cmp.Compare(a.ent, b.ent))
	})
	slices.SortFunc(t.rev6, func(a, b rev6) int {
		return cmp.Or(bytes.Compare(a.addr[:], b.addr[:]), cmp.Compare(a.ent, b.ent))
	})
	return t, nil
}

func (t *table) hash(wire []byte) uint64 { return maphash.Bytes(t.seed, wire) }

// lookup finds a lowercase wire-format name.
func (t *table) lookup(wire []byte) (*entry, bool) {
	if t == nil {
		return nil, false
	}
	for i := t.hash(wire) & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return nil, false
		}
		e := &t.ents[s-1]
		if int(e.nameLen) == len(wire) && string(t.names[e.name:e.name+uint32(e.nameLen)]) == string(wire) {
			return e, true
		}
	}
}

// lookupName finds a name in presentation form, any case, trailing dot or not.
func (t *table) lookupName(name string) (*entry, bool) {
	w, err := wireName(spec.CanonicalName(name))
	if err != nil {
		return nil, false
	}
	return t.lookup(w)
}

// zoneOf returns the index+1 of the longest zone holding the canonical
// name, 0 if none does.
func (t *table) zoneOf(name string) uint16 {
	best, bestLen := 0, -1
	for i, z := range t.zones {
		if spec.InZone(name, z.name) && len(z.name) > bestLen {
			best, bestLen = i+1, len(z.name)
		}
	}
	return uint16(best)
}

// zoneOfWire is zoneOf for a lowercase wire-format name.
func (t *table) zoneOfWire(wire []byte) uint16 {
	best, bestLen := 0, -1
	for i := range t.zones {
		z := t.zones[i].wire
		if len(z) > bestLen && inZoneWire(wire, z) {
			best, bestLen = i+1, len(z)
		}
	}
	return uint16(best)
}

// inZoneWire reports whether the wire name is zone or below it.
func inZoneWire(name, zone []byte) bool {
	if len(name) < len(zone) || !bytes.Equal(name[len(name)-len(zone):], zone) {
		return false
	}
	// The suffix must start on a label boundary.
	for off := 0; off < len(name); off += int(name[off]) + 1 {
		if off == len(name)-len(zone) {
			return true
		}
		if name[off] == 0 {
			break
		}
	}
	return false
}

func (t *table) addrs4(e *entry) []byte { return t.v4[4*e.v4 : 4*(e.v4+uint32(e.n4))] }
func (t *table) addrs6(e *entry) []byte { return t.v6[16*e.v6 : 16*(e.v6+uint32(e.n6))] }

// nameOf returns an entry's name in canonical presentation form.
func (t *table) nameOf(e *entry) string {
	return presentName(t.names[e.name : e.name+uint32(e.nameLen)])
}

// reverse returns the names that have address a.
func (t *table) reverse(a netip.Addr) []string {
	var out []string
	if a.Is4() {
		k := a.As4()
		i, _ := slices.BinarySearchFunc(t.rev4, k, func(r rev4, k [4]byte) int { return bytes.Compare(r.addr[:], k[:]) })
		for ; i < len(t.rev4) && t.rev4[i].addr == k; i++ {
			out = append(out, t.nameOf(&t.ents[t.rev4[i].ent]))
		}
		return out
	}
	k := a.As16()
	i, _ := slices.BinarySearchFunc(t.rev6, k, func(r rev6, k [16]byte) int { return bytes.Compare(r.addr[:], k[:]) })
	for ; i < len(t.rev6) && t.rev6[i].addr == k; i++ {
		out = append(out, t.nameOf(&t.ents[t.rev6[i].ent]))
	}
	return out
}

// roster rebuilds the roster the table was compiled from.
func (t *table) roster() *spec.Roster {
	r := &spec.Roster{Generation: t.gen, Names: make(map[string][]netip.Addr, len(t.ents))}
	for _, z := range t.zones {
		r.Zones = append(r.Zones, z.name)
	}
	for i := range t.ents {
		e := &t.ents[i]
		if !e.routed {
			continue
		}
		addrs := make([]netip.Addr, 0, int(e.n4)+int(e.n6))
		a4 := t.addrs4(e)
		for j := 0; j < len(a4); j += 4 {
			addrs = append(addrs, netip.AddrFrom4([4]byte(a4[j:j+4])))
		}
		a6 := t.addrs6(e)
		for j := 0; j < len(a6); j += 16 {
			addrs = append(addrs, netip.AddrFrom16([16]byte(a6[j:j+16])))
		}
		r.Names[t.nameOf(e)] = addrs
	}
	return r
}

// parent returns the name one label up, "" for a single label.
func parent(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return ""
}

// wireName encodes a canonical name (no trailing dot) in wire format.
func wireName(name string) ([]byte, error) {
	if name == "" {
		return []byte{0}, nil
	}
	out := make([]byte, 0, len(name)+2)
	for label := range strings.SplitSeq(name, ".") {
		if len(label) == 0 || len(label) > 63 {
			return nil, fmt.Errorf("label %q must be 1 to 63 characters", label)
		}
		out = append(out, byte(len(label)))
		out = append(out, label...)
	}
	out = append(out, 0)
	if len(out) > 255 {
		return nil, fmt.Errorf("name is %d bytes in wire format, more than 255", len(out))
	}
	return out, nil
}

// presentName decodes an uncompressed wire name to presentation form without
// the trailing dot.
func presentName(w []byte) string {
	var b strings.Builder
	for off := 0; off < len(w) && w[off] != 0; off += int(w[off]) + 1 {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(w[off+1 : off+1+int(w[off])])
	}
	return b.String()
}

// soaRecord is the zone's SOA in wire format: owner (uncompressed), type,
// class, TTL, rdata. The serial is the roster generation, the minimum (and
// the TTL) the negative TTL.
func soaRecord(zoneWire []byte, gen uint64, negTTL uint32) []byte {
	mname := append([]byte{3, 'n', 's', '1'}, zoneWire...)
	rname := append([]byte{10, 'h', 'o', 's', 't', 'm', 'a', 's', 't', 'e', 'r'}, zoneWire...)
	rdlen := len(mname) + len(rname) + 20
	b := make([]byte, 0, len(zoneWire)+10+rdlen)
	b = append(b, zoneWire...)
	b = binary.BigEndian.AppendUint16(b, typeSOA)
	b = binary.BigEndian.AppendUint16(b, classIN)
	b = binary.BigEndian.AppendUint32(b, negTTL)
	b = binary.BigEndian.AppendUint16(b, uint16(rdlen))
	b = append(b, mname...)
	b = append(b, rname...)
	b = binary.BigEndian.AppendUint32(b, uint32(gen))
	b = binary.BigEndian.AppendUint32(b, 3600)   // refresh
	b = binary.BigEndian.AppendUint32(b, 600)    // retry
	b = binary.BigEndian.AppendUint32(b, 86400)  // expire
	b = binary.BigEndian.AppendUint32(b, negTTL) // minimum
	return b
}
