package resolver

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// overlay holds what a view changed since its base was compiled: every
// name a delta added, moved or removed, and every name above one of them in
// its zone (an empty non-terminal exists while roster names are below it).
// A name the overlay holds is answered from it; any other from the base.
// An overlay is immutable once published: apply copies it.
type overlay struct {
	names map[string]*ovName // by lowercase wire name, root label included
}

// ovName is one name of an overlay, as the view serves it.
type ovName struct {
	addrs  []byte // IPv4 addresses (4 bytes each), then IPv6 (16 each)
	n4     int    // IPv4 addresses in addrs
	routed bool   // a roster name
	apex   bool   // its zone's apex
	exists bool   // routed, the apex, or roster names below it: not NXDOMAIN
	// adj is how many roster names below it (in its zone) the view has
	// gained (+) or lost (-) since the base: base.desc + adj are left.
	adj int32
}

func (o *ovName) addrs4() []byte { return o.addrs[:4*o.n4] }
func (o *ovName) addrs6() []byte { return o.addrs[4*o.n4:] }

// mergeAt is the overlay size from which a view is folded into a newly
// compiled table, in the background (Server.merge). Each delta copies the
// overlay's map, so this bounds a delta's cost; a merge compiles the whole
// roster, so this also spreads that cost over at least this many changed
// names.
const mergeAt = 1024

// apply returns the view of t changed by the normalized delta d, whose
// From is t's generation and which leaves t's zones as they are. It costs
// what d changes plus a copy of t's overlay, never the roster.
func (t *table) apply(d *spec.RosterDelta) (*table, error) {
	nt := *t
	nt.gen = d.To
	nt.zones = make([]zone, len(t.zones))
	for i, z := range t.zones {
		z.soa = soaRecord(z.wire, d.To, t.negTTL) // the serial is the generation
		nt.zones[i] = z
	}
	nt.over = &overlay{names: make(map[string]*ovName, t.overlaySize()+4*d.Len())}
	if t.over != nil {
		maps.Copy(nt.over.names, t.over.names)
	}
	for _, name := range slices.Sorted(maps.Keys(d.Set)) { // sorted: the same delta gives the same view
		addrs := d.Set[name]
		if len(addrs) > maxAddrs {
			return nil, fmt.Errorf("name %q has %d addresses; at most %d fit a DNS answer", name, len(addrs), maxAddrs)
		}
		packed, n4 := packAddrs(nil, addrs)
		if err := nt.setName(name, packed, n4, true); err != nil {
			return nil, err
		}
	}
	for _, name := range d.Remove {
		if err := nt.setName(name, nil, 0, false); err != nil {
			return nil, err
		}
	}
	if err := spec.CheckDeltaNames(t.count, nt.count); err != nil {
		return nil, err // the limit of a whole roster holds for one made by deltas
	}
	if len(nt.over.names) == 0 {
		nt.over = nil
	}
	return &nt, nil
}

func (t *table) overlaySize() int {
	if t.over == nil {
		return 0
	}
	return len(t.over.names)
}

// packAddrs appends addrs as the table stores them, IPv4 first, each
// family sorted, and returns how many are IPv4.
func packAddrs(b []byte, addrs []netip.Addr) ([]byte, int) {
	if !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
		addrs = slices.Clone(addrs)
		slices.SortFunc(addrs, netip.Addr.Compare)
	}
	n4 := 0
	for _, a := range addrs {
		if a.Is4() {
			b4 := a.As4()
			b = append(b, b4[:]...)
			n4++
		}
	}
	for _, a := range addrs {
		if !a.Is4() {
			b16 := a.As16()
			b = append(b, b16[:]...)
		}
	}
	return b, n4
}

// setName makes the canonical name a roster name with the packed
// addresses (routed), or takes it out of the roster (!routed), in nt's
// overlay, which nt owns; and adjusts the names above it.
func (nt *table) setName(name string, addrs []byte, n4 int, routed bool) error {
	w, err := wireName(name)
	if err != nil {
		return fmt.Errorf("name %q: %w", name, err)
	}
	zi := nt.zoneOfWire(w)
	cur := nt.state(w, zi)
	if !routed && !cur.routed {
		return nil // not in the roster: removing it changes nothing
	}
	change := 0
	switch {
	case routed && !cur.routed:
		change = 1
	case !routed && cur.routed:
		change = -1
	}
	nt.count += change
	o := cur
	o.routed, o.addrs, o.n4 = routed, addrs, n4
	nt.put(w, zi, o)
	rel := nt.relOf(w, zi)
	if change == 0 || zi == 0 || len(rel) == 0 {
		return nil // nothing above it exists because of it: outside the zones, or the apex
	}
	// Every name between this one and its zone's apex.
	for off := int(rel[0]) + 1; off < len(rel); off += int(rel[off]) + 1 {
		a := nt.state(w[off:], zi)
		a.adj += int32(change)
		nt.put(w[off:], zi, a)
	}
	return nil
}

// state returns how the view serves the wire name w of zone zi now.
func (t *table) state(w []byte, zi uint16) ovName {
	if t.over != nil {
		if o := t.over.names[string(w)]; o != nil {
			return *o
		}
	}
	return t.baseState(w, zi)
}

// baseState returns how the compiled table alone serves w.
func (t *table) baseState(w []byte, zi uint16) ovName {
	rel := t.relOf(w, zi)
	o := ovName{apex: zi != 0 && len(rel) == 0}
	if i := t.findIndex(rel, zi); i >= 0 {
		e := &t.ents[i]
		o.exists = true
		if e.routed {
			o.routed = true
			o.n4 = int(e.n4)
			o.addrs = t.addrs[e.addr : e.addr+4*uint32(e.n4)+16*uint32(e.n6)]
		}
	}
	return o
}

// baseDesc returns how many roster names the compiled table has below w.
func (t *table) baseDesc(w []byte, zi uint16) int64 {
	if i := t.findIndex(t.relOf(w, zi), zi); i >= 0 {
		return int64(t.desc[uint32(i)])
	}
	return 0
}

// put stores o as w's state in the view's overlay, which the caller owns,
// or drops w from it when o is how the compiled table serves w anyway.
func (t *table) put(w []byte, zi uint16, o ovName) {
	o.exists = o.routed || o.apex || t.baseDesc(w, zi)+int64(o.adj) > 0
	b := t.baseState(w, zi)
	if o.adj == 0 && o.routed == b.routed && o.n4 == b.n4 && bytes.Equal(o.addrs, b.addrs) {
		delete(t.over.names, string(w))
		return
	}
	t.over.names[string(w)] = &o
}

// reverse returns the overlay's roster names that have address a.
func (ov *overlay) reverse(a netip.Addr) []string {
	var key []byte
	if a.Is4() {
		b := a.As4()
		key = b[:]
	} else {
		b := a.As16()
		key = b[:]
	}
	var out []string
	for w, o := range ov.names {
		if !o.routed {
			continue
		}
		list, size := o.addrs4(), 4
		if len(key) == 16 {
			list, size = o.addrs6(), 16
		}
		for i := 0; i < len(list); i += size {
			if bytes.Equal(list[i:i+size], key) {
				out = append(out, presentName([]byte(w)))
				break
			}
		}
	}
	return out
}

// rebase returns the view c (gen and overlay) over nb, a table compiled
// from v, an earlier view of c's base: a background merge compiled nb
// while deltas kept arriving. Only the names c's or v's overlay hold can
// differ between c and nb, so this costs the overlays, not the roster.
func (c *table) rebase(v, nb *table) *table {
	nt := *nb
	nt.gen, nt.zones, nt.count = c.gen, c.zones, c.count
	nt.over = &overlay{names: map[string]*ovName{}}
	keep := func(w string, o ovName) {
		wb := []byte(w)
		zi := nt.zoneOfWire(wb)
		live := c.baseDesc(wb, zi) + int64(o.adj) // names below w in c
		o.adj = int32(live - nb.baseDesc(wb, zi))
		nt.put(wb, zi, o)
	}
	if c.over != nil {
		for w, o := range c.over.names {
			keep(w, *o)
		}
	}
	if v.over != nil {
		for w := range v.over.names {
			if c.over != nil && c.over.names[w] != nil {
				continue
			}
			wb := []byte(w)
			keep(w, c.baseState(wb, c.zoneOfWire(wb))) // c serves it as its base does
		}
	}
	if len(nt.over.names) == 0 {
		nt.over = nil
	}
	return &nt
}

// diff returns the normalized delta from t to the validated roster r,
// whose zones are t's, in time proportional to the roster but without
// compiling it; ok is false when r is not canonical or the delta would
// change more than a quarter of the names (compiling is then cheaper
// than a large overlay). It yields while busy says queries wait.
func (t *table) diff(r *spec.Roster, busy func() bool) (d *spec.RosterDelta, ok bool) {
	y := yield.Yielder{Pending: busy}
	limit := max(len(r.Names), t.count)/4 + 1
	d = &spec.RosterDelta{From: t.gen, To: r.Generation, Set: map[string][]netip.Addr{}}
	var w, packed []byte
	kept := 0
	for name, addrs := range r.Names {
		y.Maybe()
		if spec.CanonicalName(name) != name {
			return nil, false
		}
		w = appendWire(w[:0], name)
		h, found, _ := t.lookup(w)
		if found && (len(h.a4) > 0 || len(h.a6) > 0) {
			kept++
			var n4 int
			packed, n4 = packAddrs(packed[:0], addrs)
			if bytes.Equal(packed[:4*n4], h.a4) && bytes.Equal(packed[4*n4:], h.a6) && len(addrs) == len(h.a4)/4+len(h.a6)/16 {
				continue
			}
		}
		d.Set[name] = addrs
		if len(d.Set) > limit {
			return nil, false
		}
	}
	if kept < t.count { // names gone: find them
		t.eachName(&y, func(name string, a4, a6 []byte) {
			if _, ok := r.Names[name]; !ok {
				d.Remove = append(d.Remove, name)
			}
		})
		if d.Len() > limit {
			return nil, false
		}
	}
	return d.Normalize(), true
}

// appendWire appends the wire form of a valid canonical name, root label
// included.
func appendWire(b []byte, name string) []byte {
	for len(name) > 0 {
		i := 0
		for i < len(name) && name[i] != '.' {
			i++
		}
		b = append(b, byte(i))
		b = append(b, name[:i]...)
		if i == len(name) {
			break
		}
		name = name[i+1:]
	}
	return append(b, 0)
}
