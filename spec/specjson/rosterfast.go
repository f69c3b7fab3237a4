package specjson

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"unsafe"

	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// decodeRosterFast reads a roster document that has nothing wrong with it
// and nothing unusual in it, straight into a validated, normalized Roster:
// no JSON tree; names copied into shared 16 KB blocks and addresses into
// shared arrays, both taken as the reading goes. A 100,000-name roster is
// read in a third of the time and with a tenth of the garbage of the strict
// reader. Nothing is allocated in one large piece: in a virtual machine the
// first touch of a fresh page costs over 10 µs, and a 5 MB copy or a
// pre-sized map faulted in at once held the only CPU for 50 ms during a
// swap; block by block, the reader yields between faults (y).
//
// It reports false for anything else (a fault, an escape in a string, a
// duplicate, a name written twice in two cases, a repeated address...), and
// ParseRoster then reads the document with the strict reader, which names
// every fault. So the fast path decides nothing on its own: it accepts only
// documents the strict reader accepts, and returns the same roster for them
// (FuzzParseRoster checks both).
func decodeRosterFast(data []byte, y *yield.Yielder) (*spec.Roster, bool) {
	r, ok, _ := decodeRosterCounting(data, y)
	return r, ok
}

// decodeRosterCounting is decodeRosterFast, also reporting (overNames)
// that it declined the document for holding more than spec.MaxNames names:
// its reader refuses it then, without reading it again strictly.
func decodeRosterCounting(data []byte, y *yield.Yielder) (_ *spec.Roster, ok, overNames bool) {
	d := fastDecoder{b: data, y: y}
	r, ok := d.roster()
	return r, ok, d.overNames
}

func (d *fastDecoder) roster() (*spec.Roster, bool) {
	r := &spec.Roster{Names: map[string][]netip.Addr{}}
	var seenGen, seenZones, seenNames bool
	if !d.byte('{') {
		return nil, false
	}
	for first := true; ; first = false {
		if d.byte('}') {
			break
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return nil, false
		}
		switch {
		case string(key) == "generation" && !seenGen:
			seenGen = true
			if r.Generation, ok = d.uint(); !ok || r.Generation == 0 {
				return nil, false
			}
		case string(key) == "zones" && !seenZones:
			seenZones = true
			if r.Zones, ok = d.zones(); !ok {
				return nil, false
			}
		case string(key) == "names" && !seenNames:
			seenNames = true
			if !d.names(r.Names) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	d.space()
	if !seenGen || !seenNames || d.pos != len(d.b) {
		return nil, false
	}
	return r, true
}

// Block sizes: small enough that taking one faults in a few pages, large
// enough that 100,000 names take a few hundred.
const (
	nameBlock = 16 << 10
	addrBlock = 1024
)

type fastDecoder struct {
	overNames bool // names declined a roster of more than spec.MaxNames names
	b         []byte
	pos       int
	nameBlk   []byte       // the current block names are copied into
	addrs     []netip.Addr // the current block address lists are taken from
	y         *yield.Yielder
}

func (d *fastDecoder) space() {
	for d.pos < len(d.b) {
		switch d.b[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// byte consumes c after optional space, reporting whether it was there.
func (d *fastDecoder) byte(c byte) bool {
	d.space()
	if d.pos < len(d.b) && d.b[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes; the result is a
// slice of the document.
func (d *fastDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.pos
	for d.pos < len(d.b) {
		c := d.b[d.pos]
		switch {
		case c == '"':
			d.pos++
			return d.b[start : d.pos-1], true
		case c < 0x20 || c > 0x7E || c == '\\':
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

// uint reads digits without a leading zero, up to the strict reader's
// bound for a generation (MaxInt64).
func (d *fastDecoder) uint() (uint64, bool) {
	d.space()
	start := d.pos
	var n uint64
	for d.pos < len(d.b) && d.b[d.pos] >= '0' && d.b[d.pos] <= '9' {
		if d.pos-start == 18 { // 19 digits or more may pass MaxInt64
			return 0, false
		}
		n = n*10 + uint64(d.b[d.pos]-'0')
		d.pos++
	}
	if d.pos == start || d.b[start] == '0' && d.pos-start > 1 {
		return 0, false
	}
	// A fraction or an exponent is the strict reader's to judge.
	if d.pos < len(d.b) && (d.b[d.pos] == '.' || d.b[d.pos] == 'e' || d.b[d.pos] == 'E') {
		return 0, false
	}
	return n, true
}

// zones reads the zones array: valid names, none twice; returned canonical
// and sorted, as Normalize leaves them.
func (d *fastDecoder) zones() ([]string, bool) {
	if !d.byte('[') {
		return nil, false
	}
	var zones []string
	for first := true; ; first = false {
		if d.byte(']') {
			break
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		zb, ok := d.str()
		if !ok {
			return nil, false
		}
		z := spec.CanonicalName(string(zb))
		if spec.CheckName(z) != nil || len(zones) == spec.MaxZones {
			return nil, false
		}
		zones = append(zones, z)
	}
	slices.Sort(zones) // nil when empty, as Normalize leaves it
	if len(slices.Compact(slices.Clone(zones))) != len(zones) {
		return nil, false // listed twice
	}
	return zones, true
}

// names reads the names object into m: each name valid and distinct once
// canonical, each with addresses that are valid, distinct and sorted, as
// Normalize leaves them.
func (d *fastDecoder) names(m map[string][]netip.Addr) bool {
	if !d.byte('{') {
		return false
	}
	for first := true; ; first = false {
		d.y.Maybe()
		if d.byte('}') {
			return true
		}
		if !first && !d.byte(',') {
			return false
		}
		if len(m) == spec.MaxNames {
			d.overNames = true
			return false
		}
		nb, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		var name string
		if isCanonical(nb) {
			// Looked at in place (CheckName keeps nothing of a valid name),
			// copied into a block once known good.
			if _, dup := m[string(nb)]; dup || spec.CheckName(transient(nb)) != nil {
				return false
			}
			name = d.keep(nb)
		} else {
			name = spec.CanonicalName(string(nb))
			if _, dup := m[name]; dup || spec.CheckName(name) != nil {
				return false
			}
		}
		addrs, ok := d.addrList()
		if !ok {
			return false
		}
		m[name] = addrs
	}
}

// isCanonical reports whether CanonicalName would leave the name as it is.
func isCanonical(b []byte) bool {
	if len(b) > 0 && b[len(b)-1] == '.' {
		return false
	}
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

// keep copies b into the current name block and returns it as a string.
// The block's bytes are never written again once handed out.
func (d *fastDecoder) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(d.nameBlk)-len(d.nameBlk) < len(b) {
		d.nameBlk = make([]byte, 0, max(nameBlock, len(b)))
	}
	off := len(d.nameBlk)
	d.nameBlk = append(d.nameBlk, b...)
	return unsafe.String(&d.nameBlk[off], len(b))
}

// transient is b as a string for a call that keeps nothing of it.
func transient(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// addrList reads one name's addresses into the current address block and
// returns them sorted, capacity capped so an append by the caller cannot
// reach the next name's.
func (d *fastDecoder) addrList() ([]netip.Addr, bool) {
	if !d.byte('[') {
		return nil, false
	}
	start := len(d.addrs)
	for first := true; ; first = false {
		if d.byte(']') {
			break
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		sb, ok := d.str()
		// A zone is refused anyway; refusing it before parsing keeps
		// ParseAddr from keeping any of the transient string.
		if !ok || bytes.IndexByte(sb, '%') >= 0 {
			return nil, false
		}
		a, err := netip.ParseAddr(transient(sb))
		if err != nil || a.Is4In6() {
			return nil, false
		}
		if len(d.addrs) == cap(d.addrs) { // block full: move this list to a new one
			list := d.addrs[start:]
			d.addrs = append(make([]netip.Addr, 0, max(addrBlock, 2*len(list))), list...)
			start = 0
		}
		d.addrs = append(d.addrs, a)
	}
	list := d.addrs[start:len(d.addrs):len(d.addrs)]
	if len(list) == 0 || len(list) > spec.MaxAddrsPerName {
		return nil, false
	}
	if !slices.IsSortedFunc(list, netip.Addr.Compare) {
		slices.SortFunc(list, netip.Addr.Compare)
	}
	for i := 1; i < len(list); i++ {
		if list[i] == list[i-1] {
			return nil, false // listed twice: the strict reader says where
		}
	}
	return list, true
}

// topLevelMember finds the value of key in a document that is a JSON object
// and returns where it starts and ends. It reports false when the document
// is not an object, the key is missing or appears twice, or any key is
// written with escapes. It checks little else: the caller reads the value
// and the rest of the document with readers that do.
func topLevelMember(data []byte, key string) (start, end int, ok bool) {
	d := fastDecoder{b: data}
	if !d.byte('{') {
		return 0, 0, false
	}
	found := false
	for first := true; ; first = false {
		if d.byte('}') {
			return start, end, found
		}
		if !first && !d.byte(',') {
			return 0, 0, false
		}
		k, ok := d.str()
		if !ok || !d.byte(':') {
			return 0, 0, false
		}
		d.space()
		vs := d.pos
		if !d.skipValue(0) {
			return 0, 0, false
		}
		if string(k) == key {
			if found {
				return 0, 0, false
			}
			found, start, end = true, vs, d.pos
		}
	}
}

// skipValue moves past one JSON value: strings with their escapes, nested
// objects and arrays, and anything else up to the next delimiter.
func (d *fastDecoder) skipValue(depth int) bool {
	if depth > 64 {
		return false
	}
	d.space()
	if d.pos >= len(d.b) {
		return false
	}
	switch d.b[d.pos] {
	case '"':
		for d.pos++; d.pos < len(d.b); d.pos++ {
			switch d.b[d.pos] {
			case '\\':
				d.pos++
			case '"':
				d.pos++
				return true
			}
		}
		return false
	case '{', '[':
		closer := byte('}')
		if d.b[d.pos] == '[' {
			closer = ']'
		}
		d.pos++
		for first := true; ; first = false {
			d.y.Maybe()
			if d.byte(closer) {
				return true
			}
			if !first && !d.byte(',') {
				return false
			}
			if closer == '}' {
				if !d.skipValue(depth+1) || !d.byte(':') { // the key
					return false
				}
			}
			if !d.skipValue(depth + 1) {
				return false
			}
		}
	default:
		start := d.pos
		for d.pos < len(d.b) && strings.IndexByte(",}] \t\n\r", d.b[d.pos]) < 0 {
			d.pos++
		}
		return d.pos > start
	}
}
