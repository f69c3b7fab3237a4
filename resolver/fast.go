package resolver

import "encoding/binary"

// Wire constants the fast path needs.
const (
	headerLen = 12

	typeA    = 1
	typeNS   = 2
	typeSOA  = 6
	typePTR  = 12
	typeAAAA = 28
	typeOPT  = 41
	typeIXFR = 251
	typeAXFR = 252
	typeANY  = 255
	classIN  = 1

	rcodeSuccess  = 0
	rcodeFormErr  = 1
	rcodeServFail = 2
	rcodeNXDomain = 3
	rcodeNotImp   = 4
	rcodeRefused  = 5

	// probeLabel is the label below a zone under which canary names live.
	probeLabel = "meshhost-probe"
)

// query is what the fast path read of a plain query.
type query struct {
	qname   []byte // lowercase wire-format name, in scratch.lower
	qend    int    // offset of the end of the question section
	qtype   uint16
	edns    bool
	udpSize uint16
	do      bool
	ok      bool // parseQuery read the query; the fields above are valid
}

// scratch is one worker's reusable memory: the fast path allocates nothing.
type scratch struct {
	lower [255]byte
	key   [cacheKeyLen]byte
	q     query
}

// parseQuery reads a plain query: one question of class IN, no answer or
// authority records and at most an OPT record of version 0. It reports false
// for anything else, which the slow path then handles (or rejects).
func parseQuery(req []byte, sc *scratch) bool {
	sc.q.ok = false
	if len(req) < headerLen+5 {
		return false
	}
	// QR=0, opcode QUERY; QDCOUNT 1, ANCOUNT 0, NSCOUNT 0, ARCOUNT 0 or 1.
	if req[2]&0xF8 != 0 || req[4] != 0 || req[5] != 1 || req[6]|req[7]|req[8]|req[9]|req[10] != 0 || req[11] > 1 {
		return false
	}
	q := &sc.q
	*q = query{}
	off := headerLen
	n := 0
	for {
		if off >= len(req) {
			return false
		}
		l := int(req[off])
		if l == 0 {
			sc.lower[n] = 0
			n++
			off++
			break
		}
		// A compression pointer (or a reserved label type) in a question is
		// legal but rare: leave it to the slow path.
		if l > 63 || off+1+l > len(req) || n+1+l+1 > len(sc.lower) {
			return false
		}
		sc.lower[n] = byte(l)
		for i, c := range req[off+1 : off+1+l] {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			sc.lower[n+1+i] = c
		}
		n += 1 + l
		off += 1 + l
	}
	if off+4 > len(req) {
		return false
	}
	q.qname = sc.lower[:n]
	q.qtype = binary.BigEndian.Uint16(req[off:])
	if binary.BigEndian.Uint16(req[off+2:]) != classIN {
		return false
	}
	off += 4
	q.qend = off
	if req[11] == 1 {
		// OPT: root name, type 41, class = UDP size, TTL = ext-rcode,
		// version, flags; then options, which the server ignores.
		if off+11 > len(req) || req[off] != 0 || binary.BigEndian.Uint16(req[off+1:]) != typeOPT {
			return false
		}
		if req[off+5] != 0 || req[off+6] != 0 { // extended rcode, version
			return false
		}
		q.edns = true
		q.udpSize = binary.BigEndian.Uint16(req[off+3:])
		q.do = req[off+7]&0x80 != 0
		rdlen := int(binary.BigEndian.Uint16(req[off+9:]))
		off += 11 + rdlen
	}
	q.ok = off == len(req)
	return q.ok
}

// limit is the largest UDP reply the client takes.
func (q *query) limit() int {
	if q.edns && q.udpSize > 512 {
		return int(q.udpSize)
	}
	return 512
}

// fast answers a plain A or AAAA query for the table's names into buf. It
// reports false when the query needs the slow path: other types, names
// outside the zones, canary names, replies that would not fit.
func (t *table) fast(req []byte, sc *scratch, buf []byte, udp bool) ([]byte, bool) {
	if t == nil || !parseQuery(req, sc) {
		return nil, false
	}
	q := &sc.q
	if q.qtype != typeA && q.qtype != typeAAAA {
		return nil, false
	}
	limit := len(buf)
	if udp {
		limit = min(limit, q.limit())
	}
	h, found, zi := t.lookup(q.qname)
	var rcode byte
	var soa []byte
	var addrs []byte
	size := 4
	switch {
	case found:
		if q.qtype == typeA {
			addrs = h.a4
		} else {
			addrs, size = h.a6, 16
		}
		if len(addrs) == 0 && zi != 0 {
			soa = t.zones[zi-1].soa
		}
	case zi == 0 || isProbe(q.qname, t.zones[zi-1].wire):
		return nil, false
	default:
		rcode = rcodeNXDomain
		soa = t.zones[zi-1].soa
	}
	n := len(addrs) / size
	total := q.qend + n*(12+size) + len(soa)
	if q.edns {
		total += 11
	}
	if total > limit {
		return nil, false
	}
	b := buf[:total]
	copy(b, req[:q.qend])
	b[2] = 0x84 | req[2]&0x01         // QR, AA, RD as asked
	b[3] = 0x80 | req[3]&0x10 | rcode // RA, CD as asked
	binary.BigEndian.PutUint16(b[6:], uint16(n))
	if soa != nil {
		b[9] = 1
	}
	if q.edns {
		b[11] = 1
	}
	off := q.qend
	for i := 0; i < len(addrs); i += size {
		b[off], b[off+1] = 0xC0, headerLen // pointer to the question name
		binary.BigEndian.PutUint16(b[off+2:], q.qtype)
		binary.BigEndian.PutUint16(b[off+4:], classIN)
		binary.BigEndian.PutUint32(b[off+6:], t.ttl)
		binary.BigEndian.PutUint16(b[off+10:], uint16(size))
		copy(b[off+12:], addrs[i:i+size])
		off += 12 + size
	}
	off += copy(b[off:], soa)
	if q.edns {
		putOPT(b[off:], q.do)
	}
	return b, true
}

// putOPT writes the server's OPT record (11 bytes).
func putOPT(b []byte, do bool) {
	b[0] = 0
	binary.BigEndian.PutUint16(b[1:], typeOPT)
	binary.BigEndian.PutUint16(b[3:], ednsSize)
	b[5], b[6], b[7], b[8] = 0, 0, 0, 0
	if do {
		b[7] = 0x80
	}
	b[9], b[10] = 0, 0
}

// isProbe reports whether a wire name is <nonce>.meshhost-probe.<zone>.
func isProbe(name, zone []byte) bool {
	rest := len(name) - len(zone)
	// The label just above the zone must be probeLabel, and exactly one
	// label above that.
	if rest < 2+len(probeLabel)+1 {
		return false
	}
	first := int(name[0]) + 1
	if first+1+len(probeLabel) != rest {
		return false
	}
	return int(name[first]) == len(probeLabel) && string(name[first+1:rest]) == probeLabel
}
