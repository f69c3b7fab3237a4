package spec

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/yield"
)

// decodeRosterFast reads a roster document that has nothing wrong with it
// and nothing unusual in it, straight into a validated, normalized Roster:
// no JSON tree, one string holding every name, one array holding every
// address. A 100,000-name roster is read in a tenth of the time and a
// tenth of the garbage of the strict reader, and the garbage collector has
// a few large objects to scan instead of a million small ones, which is
// what kept a roster swap from moving query latency on a single CPU.
//
// It reports false for anything else (a fault, an escape in a string, a
// duplicate, a name written twice in two cases, an unsorted or repeated
// address...), and ParseRoster then reads the document with the strict
// reader, which names every fault. So the fast path decides nothing on its
// own: it accepts only documents the strict reader accepts, and returns
// the same roster for them (FuzzParseRoster checks both).
func decodeRosterFast(data []byte) (*Roster, bool) {
	d := fastDecoder{s: string(data)}
	// Every name and address is a string: their count bounds both.
	nstrings := bytes.Count(data, []byte{'"'}) / 2
	d.addrs = make([]netip.Addr, 0, nstrings)
	r := &Roster{Names: make(map[string][]netip.Addr, nstrings/2)}
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
		case key == "generation" && !seenGen:
			seenGen = true
			if r.Generation, ok = d.uint(); !ok || r.Generation == 0 {
				return nil, false
			}
		case key == "zones" && !seenZones:
			seenZones = true
			if r.Zones, ok = d.zones(); !ok {
				return nil, false
			}
		case key == "names" && !seenNames:
			seenNames = true
			if !d.names(r.Names) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	d.space()
	if !seenGen || !seenNames || d.pos != len(d.s) {
		return nil, false
	}
	return r, true
}

type fastDecoder struct {
	s     string
	pos   int
	addrs []netip.Addr // every address, the names' lists slice it
	y     yield.Yielder
}

func (d *fastDecoder) space() {
	for d.pos < len(d.s) {
		switch d.s[d.pos] {
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
	if d.pos < len(d.s) && d.s[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes, sliced out of the
// document.
func (d *fastDecoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.pos
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		switch {
		case c == '"':
			d.pos++
			return d.s[start : d.pos-1], true
		case c < 0x20 || c > 0x7E || c == '\\':
			return "", false
		}
		d.pos++
	}
	return "", false
}

// uint reads digits without a leading zero, up to the strict reader's
// bound for a generation (MaxInt64).
func (d *fastDecoder) uint() (uint64, bool) {
	d.space()
	start := d.pos
	var n uint64
	for d.pos < len(d.s) && d.s[d.pos] >= '0' && d.s[d.pos] <= '9' {
		if d.pos-start == 18 { // 19 digits or more may pass MaxInt64
			return 0, false
		}
		n = n*10 + uint64(d.s[d.pos]-'0')
		d.pos++
	}
	if d.pos == start || d.s[start] == '0' && d.pos-start > 1 {
		return 0, false
	}
	// A fraction or an exponent is the strict reader's to judge.
	if d.pos < len(d.s) && (d.s[d.pos] == '.' || d.s[d.pos] == 'e' || d.s[d.pos] == 'E') {
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
	zones := []string{}
	for first := true; ; first = false {
		if d.byte(']') {
			break
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		z, ok := d.str()
		if !ok {
			return nil, false
		}
		z = CanonicalName(z)
		if CheckName(z) != nil || slices.Contains(zones, z) {
			return nil, false
		}
		zones = append(zones, z)
	}
	if len(zones) == 0 {
		return nil, true // as Normalize leaves an empty list
	}
	slices.Sort(zones)
	return zones, true
}

// names reads the names object into m: each name valid and distinct once
// canonical, each with addresses that are valid, distinct and, once sorted,
// what Normalize would leave.
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
		name, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		name = CanonicalName(name) // allocates only for a name not yet canonical
		if _, dup := m[name]; dup || CheckName(name) != nil {
			return false
		}
		addrs, ok := d.addrList()
		if !ok {
			return false
		}
		m[name] = addrs
	}
}

// addrList reads one name's addresses into the shared array and returns
// them sorted, capacity capped so an append by the caller cannot reach the
// next name's.
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
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return nil, false
		}
		d.addrs = append(d.addrs, a)
	}
	list := d.addrs[start:len(d.addrs):len(d.addrs)]
	if len(list) == 0 {
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
	d := fastDecoder{s: string(data)} // one copy, of the whole document
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
		if k == key {
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
	if d.pos >= len(d.s) {
		return false
	}
	switch d.s[d.pos] {
	case '"':
		for d.pos++; d.pos < len(d.s); d.pos++ {
			switch d.s[d.pos] {
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
		if d.s[d.pos] == '[' {
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
		for d.pos < len(d.s) && !strings.ContainsRune(",}] \t\n\r", rune(d.s[d.pos])) {
			d.pos++
		}
		return d.pos > start
	}
}
