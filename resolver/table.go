package resolver

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// table is one roster compiled for lookups. It is immutable once built and
// published through Server.table; a swap replaces the whole table.
//
// A table is either compiled whole from a roster (buildTable), or a view:
// a compiled table's arenas, shared, with an overlay of the names changed
// since (apply), so that a change of k names costs k, not the roster. A
// view is a shallow copy of its base; the base's arrays are never written
// again. Views are folded into a new compiled table in the background once
// their overlay grows (Server.merge).
//
// It holds no pointer per name, so 100,000 names cost about 5 MB and nothing
// for the garbage collector to scan. A name is stored as the lowercase wire
// form of its labels above its zone (the zone itself is stored once), all
// names back to back in one arena; addresses sit in another arena, and an
// open-addressing hash index points at 16-byte entries.
type table struct {
	gen    uint64
	ttl    uint32 // of answers
	negTTL uint32 // of NXDOMAIN and NODATA answers, and the SOA minimum

	zones []zone   // longest first, so the first match is the closest zone
	names []byte   // per entry: wire-form labels above the zone, no root label
	ents  []entry  // one per name, empty non-terminal and zone apex
	slots []uint32 // hash index: entry index + 1, 0 when free
	mask  uint64
	seed  maphash.Seed
	addrs []byte // per entry: its IPv4 addresses (4 bytes each), then its IPv6 ones (16 each)

	rev4 []uint64 // PTR index: address<<32 | entry index, sorted
	rev6 []rev6

	// desc counts, for entries that have any, the roster names below them
	// in their zone: an empty non-terminal exists while it is above 0.
	desc map[uint32]uint32
	// count is the number of roster names.
	count int
	// base is the compiled table whose arenas this one uses: itself, for a
	// compiled table.
	base *table
	// over holds the names changed since base was compiled; nil for none.
	over *overlay
}

// hit is a name a lookup found: its addresses, none for an empty
// non-terminal or a zone apex without any.
type hit struct {
	a4, a6 []byte // IPv4 addresses, 4 bytes each; IPv6, 16 each
	apex   bool   // the name is its zone's apex
}

// entry is one name of the table. Entries without addresses are empty
// non-terminals and zone apexes: they exist (NODATA), they do not resolve.
type entry struct {
	name    uint32 // offset in table.names
	addr    uint32 // offset in table.addrs
	n4, n6  uint16
	zone    uint16 // index+1 in table.zones of the zone holding the name, 0 outside
	nameLen uint8  // bytes in table.names
	routed  bool   // a roster name (not an empty non-terminal or apex)
}

type rev6 struct {
	addr [16]byte
	ent  uint32
}

// zone is one of the roster's zones.
type zone struct {
	name string // canonical
	dot  string // "." + name, for suffix tests
	wire []byte // lowercase wire format, root label included
	soa  []byte // the zone's SOA record in wire format, owner uncompressed
}

// maxAddrs bounds the addresses of one name: more would not fit a DNS
// message anyway. spec.Roster.Validate refuses more, where the roster is
// declared.
const maxAddrs = spec.MaxAddrsPerName

// buildTable compiles a validated roster (spec.Roster.Validate); it need
// not be normalized. It steps aside while busy says queries wait (nil:
// never). A name may be a zone itself (a public domain routed as a name
// while also a zone): the zone's apex then has its addresses.
func buildTable(r *spec.Roster, ttl, negTTL uint32, busy func() bool) (*table, error) {
	y := yield.Yielder{Pending: busy}
	t := &table{gen: r.Generation, ttl: ttl, negTTL: negTTL, seed: maphash.MakeSeed(), count: len(r.Names), desc: map[uint32]uint32{}}
	t.base = t
	zoneNames := make([]string, 0, len(r.Zones))
	for _, z := range r.Zones {
		zoneNames = append(zoneNames, spec.CanonicalName(z))
	}
	slices.SortFunc(zoneNames, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	zoneNames = slices.Compact(zoneNames)
	if len(zoneNames) >= 1<<16-1 {
		return nil, fmt.Errorf("roster has %d zones; at most %d are supported", len(zoneNames), 1<<16-2)
	}
	for _, z := range zoneNames {
		w, err := wireName(z)
		if err != nil {
			return nil, fmt.Errorf("zone %q: %w", z, err)
		}
		t.zones = append(t.zones, zone{name: z, dot: "." + z, wire: w, soa: soaRecord(w, r.Generation, negTTL)})
	}

	// Size every arena up front, empty non-terminals included, so nothing
	// grows (a copy) or is trimmed (another) afterwards: fresh pages cost
	// over 10 µs each to fault in on a virtual machine, and a copy faults
	// them all at once, without yielding.
	type entKey struct {
		zone uint16
		rel  string
	}
	ents := map[entKey]bool{} // empty non-terminals (or names that are also parents)
	var nameBytes, n4, n6 int
	for n, addrs := range r.Names {
		y.Maybe()
		zi, rel := t.split(spec.CanonicalName(n))
		nameBytes += len(rel) + 1
		for _, a := range addrs {
			if a.Is4() {
				n4++
			} else {
				n6++
			}
		}
		for i := strings.IndexByte(rel, '.'); zi != 0 && i >= 0; i = strings.IndexByte(rel, '.') {
			rel = rel[i+1:]
			if k := (entKey{zi, rel}); !ents[k] {
				ents[k] = true
				nameBytes += len(rel) + 1
			}
		}
	}
	t.allocate(len(r.Names)+len(t.zones)+len(ents), nameBytes, n4, n6)

	var packed []byte
	for n, addrs := range r.Names {
		y.Maybe()
		if len(addrs) > maxAddrs {
			return nil, fmt.Errorf("name %q has %d addresses; at most %d fit a DNS answer", n, len(addrs), maxAddrs)
		}
		var n4 int
		packed, n4 = packAddrs(packed[:0], addrs)
		if err := t.add(spec.CanonicalName(n), packed[:4*n4], packed[4*n4:]); err != nil {
			return nil, err
		}
	}
	if err := t.finish(&y); err != nil {
		return nil, err
	}
	return t, nil
}

// allocate sizes every arena of a table being compiled up front, for
// nents entries, nameBytes of names, n4 IPv4 and n6 IPv6 addresses, so
// that nothing grows (a copy) or is trimmed (another) afterwards: fresh
// pages cost over 10 µs each to fault in on a virtual machine, and a copy
// faults them all at once, without yielding.
func (t *table) allocate(nents, nameBytes, n4, n6 int) {
	size := uint64(4)
	for size < uint64(nents)*2 {
		size <<= 1
	}
	t.slots = make([]uint32, size)
	t.mask = size - 1
	t.ents = make([]entry, 0, nents)
	t.names = make([]byte, 0, nameBytes)
	t.addrs = make([]byte, 0, 4*n4+16*n6)
	t.rev4 = make([]uint64, 0, n4)
	t.rev6 = make([]rev6, 0, n6)
}

// finish adds what a table being compiled has besides its roster names:
// zone apexes and empty non-terminals, with the counts of names below
// them, and sorts the PTR index.
func (t *table) finish(y *yield.Yielder) error {
	// Zone apexes and the empty non-terminals between a zone and its names
	// exist, so that asking for them is NODATA rather than an NXDOMAIN that
	// would deny every name below (RFC 8020).
	for zi := range t.zones {
		if err := t.addIfMissing(t.zones[zi].name); err != nil {
			return err
		}
	}
	for ei := 0; ei < len(t.ents); ei++ {
		y.Maybe()
		e := t.ents[ei]
		if !e.routed || e.zone == 0 || e.nameLen == 0 {
			continue // outside the zones, or a name that is its zone's apex
		}
		// Walk up the labels above the zone, stopping below the apex.
		labels := t.names[e.name : e.name+uint32(e.nameLen)]
		for off := int(labels[0]) + 1; off < len(labels); off += int(labels[off]) + 1 {
			idx, err := t.addWireIfMissing(labels[off:], e.zone)
			if err != nil {
				return err
			}
			t.desc[idx]++
		}
	}
	sortYielding(t.rev4, y)
	y.Now()
	slices.SortFunc(t.rev6, func(a, b rev6) int {
		y.Maybe() // a comparison sort of 100,000 keys is milliseconds in one piece
		return cmp.Or(strings.Compare(string(a.addr[:]), string(b.addr[:])), cmp.Compare(a.ent, b.ent))
	})
	return nil
}

// split returns the zone index+1 holding a canonical name (0 for none) and
// the part of the name above it.
func (t *table) split(name string) (uint16, string) {
	for i := range t.zones {
		z := &t.zones[i]
		if name == z.name {
			return uint16(i + 1), ""
		}
		if strings.HasSuffix(name, z.dot) {
			return uint16(i + 1), name[:len(name)-len(z.dot)]
		}
	}
	return 0, name
}

// add inserts a canonical roster name with its packed addresses (a4, a6:
// sorted); the caller knows it is not there yet.
func (t *table) add(name string, a4, a6 []byte) error {
	zi, rel := t.split(name)
	off := len(t.names)
	if rel != "" {
		for label := range strings.SplitSeq(rel, ".") {
			if len(label) == 0 || len(label) > 63 {
				return fmt.Errorf("name %q: label %q must be 1 to 63 characters", name, label)
			}
			t.names = append(t.names, byte(len(label)))
			t.names = append(t.names, label...)
		}
	}
	rl := len(t.names) - off
	if zi != 0 {
		rl += len(t.zones[zi-1].wire) - 1
	}
	if rl+1 > 255 {
		t.names = t.names[:off]
		return fmt.Errorf("name %q is longer than 255 bytes in wire format", name)
	}
	return t.insert(off, len(t.names)-off, zi, a4, a6, true)
}

// addIfMissing inserts a canonical name without addresses unless present.
func (t *table) addIfMissing(name string) error {
	w, err := wireName(name)
	if err != nil {
		return err
	}
	zi := t.zoneOfWire(w)
	rel := t.relOf(w, zi)
	if t.findIndex(rel, zi) >= 0 {
		return nil
	}
	off := len(t.names)
	t.names = append(t.names, rel...)
	return t.insert(off, len(rel), zi, nil, nil, false)
}

// addWireIfMissing inserts the labels rel (wire form, no root label) above
// zone zi without addresses unless present, and returns its entry index.
func (t *table) addWireIfMissing(rel []byte, zi uint16) (uint32, error) {
	if i := t.findIndex(rel, zi); i >= 0 {
		return uint32(i), nil
	}
	off := len(t.names)
	t.names = append(t.names, rel...)
	idx := uint32(len(t.ents))
	return idx, t.insert(off, len(rel), zi, nil, nil, false)
}

// insert adds an entry for the name at t.names[off:off+n] in zone zi, with
// its packed addresses.
func (t *table) insert(off, n int, zi uint16, a4, a6 []byte, routed bool) error {
	idx := uint32(len(t.ents))
	e := entry{name: uint32(off), nameLen: uint8(n), addr: uint32(len(t.addrs)), zone: zi, routed: routed,
		n4: uint16(len(a4) / 4), n6: uint16(len(a6) / 16)}
	t.addrs = append(t.addrs, a4...)
	t.addrs = append(t.addrs, a6...)
	for i := 0; i < len(a4); i += 4 {
		t.rev4 = append(t.rev4, uint64(binary.BigEndian.Uint32(a4[i:]))<<32|uint64(idx))
	}
	for i := 0; i < len(a6); i += 16 {
		t.rev6 = append(t.rev6, rev6{[16]byte(a6[i : i+16]), idx})
	}
	t.ents = append(t.ents, e)
	if uint64(len(t.ents))*2 > t.mask+1 {
		t.grow()
		return nil
	}
	rel := t.names[off : off+n]
	for i := t.hash(rel, zi) & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i] == 0 {
			t.slots[i] = idx + 1
			return nil
		}
	}
}

// grow doubles the hash index (empty non-terminals can outnumber names).
func (t *table) grow() {
	size := (t.mask + 1) * 2
	t.slots = make([]uint32, size)
	t.mask = size - 1
	for idx := range t.ents {
		e := &t.ents[idx]
		for i := t.hash(t.names[e.name:e.name+uint32(e.nameLen)], e.zone) & t.mask; ; i = (i + 1) & t.mask {
			if t.slots[i] == 0 {
				t.slots[i] = uint32(idx) + 1
				break
			}
		}
	}
}

func (t *table) hash(rel []byte, zi uint16) uint64 {
	return maphash.Bytes(t.seed, rel) ^ uint64(zi)*0x9E3779B97F4A7C15
}

// find returns the entry of the compiled table for the labels rel above
// zone zi, nil if none. It does not look at the overlay.
func (t *table) find(rel []byte, zi uint16) *entry {
	if i := t.findIndex(rel, zi); i >= 0 {
		return &t.ents[i]
	}
	return nil
}

// findIndex is find returning the entry's index, -1 if none.
func (t *table) findIndex(rel []byte, zi uint16) int {
	for i := t.hash(rel, zi) & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return -1
		}
		e := &t.ents[s-1]
		if e.zone == zi && int(e.nameLen) == len(rel) && string(t.names[e.name:e.name+uint32(e.nameLen)]) == string(rel) {
			return int(s - 1)
		}
	}
}

// relOf returns the part of a lowercase wire name above zone zi, without
// the root label.
func (t *table) relOf(wire []byte, zi uint16) []byte {
	if zi != 0 {
		return wire[:len(wire)-len(t.zones[zi-1].wire)]
	}
	return wire[:len(wire)-1]
}

// lookup finds a lowercase wire-format name, overlay first, and also
// returns the zone index+1 holding it (0 for none), found or not.
func (t *table) lookup(wire []byte) (hit, bool, uint16) {
	zi := t.zoneOfWire(wire)
	if t.over != nil {
		if o := t.over.names[string(wire)]; o != nil {
			if !o.exists {
				return hit{}, false, zi
			}
			return hit{a4: o.addrs4(), a6: o.addrs6(), apex: o.apex}, true, zi
		}
	}
	e := t.find(t.relOf(wire, zi), zi)
	if e == nil {
		return hit{}, false, zi
	}
	return hit{a4: t.addrs4(e), a6: t.addrs6(e), apex: e.zone != 0 && e.nameLen == 0}, true, zi
}

// lookupName finds a name in presentation form, any case, trailing dot or not.
func (t *table) lookupName(name string) (hit, bool, uint16) {
	w, err := wireName(spec.CanonicalName(name))
	if err != nil {
		return hit{}, false, 0
	}
	return t.lookup(w)
}

// zoneOfWire returns the index+1 of the closest zone holding a lowercase
// wire-format name, 0 if none does.
func (t *table) zoneOfWire(wire []byte) uint16 {
	for i := range t.zones {
		if inZoneWire(wire, t.zones[i].wire) {
			return uint16(i + 1)
		}
	}
	return 0
}

// inZoneWire reports whether the wire name is zone or below it.
func inZoneWire(name, zone []byte) bool {
	start := len(name) - len(zone)
	if start < 0 || string(name[start:]) != string(zone) {
		return false
	}
	// The suffix must start on a label boundary.
	off := 0
	for off < start {
		off += int(name[off]) + 1
	}
	return off == start
}

func (t *table) addrs4(e *entry) []byte { return t.addrs[e.addr : e.addr+4*uint32(e.n4)] }

func (t *table) addrs6(e *entry) []byte {
	s := e.addr + 4*uint32(e.n4)
	return t.addrs[s : s+16*uint32(e.n6)]
}

// nameOf returns an entry's name in canonical presentation form.
func (t *table) nameOf(e *entry) string {
	rel := presentName(t.names[e.name : e.name+uint32(e.nameLen)])
	if e.zone == 0 {
		return rel
	}
	if rel == "" {
		return t.zones[e.zone-1].name
	}
	return rel + t.zones[e.zone-1].dot
}

// reverse returns the names that have address a, in order.
func (t *table) reverse(a netip.Addr) []string {
	var out []string
	var buf []byte
	keep := func(e *entry) {
		if t.over != nil {
			buf = t.wireOf(buf[:0], e)
			if t.over.names[string(buf)] != nil {
				return // changed since: the overlay says where it is now
			}
		}
		out = append(out, t.nameOf(e))
	}
	if a.Is4() {
		b := a.As4()
		k := binary.BigEndian.Uint32(b[:])
		i, _ := slices.BinarySearch(t.rev4, uint64(k)<<32)
		for ; i < len(t.rev4) && uint32(t.rev4[i]>>32) == k; i++ {
			keep(&t.ents[uint32(t.rev4[i])])
		}
	} else {
		k := a.As16()
		i, _ := slices.BinarySearchFunc(t.rev6, k, func(r rev6, k [16]byte) int { return strings.Compare(string(r.addr[:]), string(k[:])) })
		for ; i < len(t.rev6) && t.rev6[i].addr == k; i++ {
			keep(&t.ents[t.rev6[i].ent])
		}
	}
	if t.over != nil {
		out = append(out, t.over.reverse(a)...)
	}
	slices.Sort(out)
	return out
}

// wireOf appends an entry's name in lowercase wire form, root label
// included.
func (t *table) wireOf(b []byte, e *entry) []byte {
	b = append(b, t.names[e.name:e.name+uint32(e.nameLen)]...)
	if e.zone == 0 {
		return append(b, 0)
	}
	return append(b, t.zones[e.zone-1].wire...)
}

// roster rebuilds the (normalized) roster the table serves. It yields
// while busy says queries wait (nil: never).
func (t *table) roster(busy func() bool) *spec.Roster {
	y := yield.Yielder{Pending: busy}
	r := &spec.Roster{Generation: t.gen, Names: make(map[string][]netip.Addr, t.count)}
	for _, z := range t.zones {
		r.Zones = append(r.Zones, z.name)
	}
	slices.Sort(r.Zones)
	t.eachName(&y, func(name string, a4, a6 []byte) {
		r.Names[name] = addrList(a4, a6)
	})
	return r
}

// eachName calls f with every roster name the table serves and its
// addresses, compiled names first, then the overlay's. The order is not
// sorted.
func (t *table) eachName(y *yield.Yielder, f func(name string, a4, a6 []byte)) {
	var buf []byte
	for i := range t.ents {
		y.Maybe()
		e := &t.ents[i]
		if !e.routed {
			continue
		}
		if t.over != nil {
			buf = t.wireOf(buf[:0], e)
			if t.over.names[string(buf)] != nil {
				continue // changed since; the overlay has it if it is still there
			}
		}
		f(t.nameOf(e), t.addrs4(e), t.addrs6(e))
	}
	if t.over != nil {
		for w, o := range t.over.names {
			if o.routed {
				f(presentName([]byte(w)), o.addrs4(), o.addrs6())
			}
		}
	}
}

// addrList returns the addresses of packed IPv4 and IPv6 lists, sorted.
func addrList(a4, a6 []byte) []netip.Addr {
	addrs := make([]netip.Addr, 0, len(a4)/4+len(a6)/16)
	for j := 0; j < len(a4); j += 4 {
		addrs = append(addrs, netip.AddrFrom4([4]byte(a4[j:j+4])))
	}
	for j := 0; j < len(a6); j += 16 {
		addrs = append(addrs, netip.AddrFrom16([16]byte(a6[j:j+16])))
	}
	return addrs
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

// presentName decodes uncompressed wire labels (root label optional) to
// presentation form without the trailing dot.
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
// class, TTL, rdata. The serial is the roster generation (low 32 bits), the
// minimum (and the TTL) the negative TTL.
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

// sortYielding sorts keys with a least-significant-digit radix sort, a byte
// a pass, yielding as it goes: a comparison sort of 100,000 keys holds the
// CPU for several milliseconds in one piece.
func sortYielding(keys []uint64, y *yield.Yielder) {
	if len(keys) < 2 {
		return
	}
	buf := make([]uint64, len(keys))
	src, dst := keys, buf
	var count [256]int
	for shift := uint(0); shift < 64; shift += 8 {
		clear(count[:])
		for _, k := range src {
			count[k>>shift&0xFF]++
			y.Maybe()
		}
		if count[src[0]>>shift&0xFF] == len(src) {
			continue // every key has the same digit here: nothing moves
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, k := range src {
			d := k >> shift & 0xFF
			dst[count[d]] = k
			count[d]++
			y.Maybe()
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// compact compiles the roster the view t serves into a new table, from
// its arenas and overlay directly (no names to split, no roster to build):
// what a background merge runs. It yields while busy says queries wait.
func (t *table) compact(busy func() bool) (*table, error) {
	y := yield.Yielder{Pending: busy}
	nt := &table{gen: t.gen, ttl: t.ttl, negTTL: t.negTTL, seed: maphash.MakeSeed(), count: t.count, desc: map[uint32]uint32{}, zones: t.zones}
	nt.base = nt
	nameBytes, addrBytes, nents := len(t.names), len(t.addrs), len(t.ents)
	if t.over != nil {
		for w, o := range t.over.names {
			nameBytes += len(w)
			addrBytes += len(o.addrs)
			nents++
		}
	}
	nt.allocate(nents, nameBytes, addrBytes/4, addrBytes/16)
	var buf []byte
	for i := range t.ents {
		y.Maybe()
		e := &t.ents[i]
		if !e.routed {
			continue // apexes and empty non-terminals: finish adds those that are left
		}
		if t.over != nil {
			buf = t.wireOf(buf[:0], e)
			if t.over.names[string(buf)] != nil {
				continue
			}
		}
		off := len(nt.names)
		nt.names = append(nt.names, t.names[e.name:e.name+uint32(e.nameLen)]...)
		if err := nt.insert(off, int(e.nameLen), e.zone, t.addrs4(e), t.addrs6(e), true); err != nil {
			return nil, err
		}
	}
	if t.over != nil {
		for w, o := range t.over.names {
			if !o.routed {
				continue
			}
			wb := []byte(w)
			zi := nt.zoneOfWire(wb)
			rel := nt.relOf(wb, zi)
			off := len(nt.names)
			nt.names = append(nt.names, rel...)
			if err := nt.insert(off, len(rel), zi, o.addrs4(), o.addrs6(), true); err != nil {
				return nil, err
			}
		}
	}
	if err := nt.finish(&y); err != nil {
		return nil, err
	}
	return nt, nil
}
