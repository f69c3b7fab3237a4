package resolver

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

// The cache keeps upstream answers to outside names, never the mesh's:
// names the roster holds are answered from the table before the cache is
// asked, and an answer is stored only when no name it depends on is the
// roster's at that moment. An entry depends on more names than its question's: the
// owners of its records, and the targets of its CNAME records (unmesh.go
// keeps no record of a mesh name, and does not let a reply whose chain
// leads into the mesh be cached). None of them is a mesh name when it is
// stored, and the entries are indexed by each of them (byName), so that a
// roster swap removes what it makes wrong and nothing else: a delta, the
// entries that depend on the names it sets or removes (a cost of what
// changed, whatever the cache holds); a whole roster (new zones, or too
// many changes to list), every entry that depends on a name the new roster
// has, found by looking at each entry.
//
// An entry is the upstream's reply as it came, with the ID cleared, the OPT
// record removed (the reply to each client gets the server's own OPT, so no
// client sees another's EDNS options, such as its cookie) and every TTL
// capped. Its TTLs are lowered by the entry's age when it is served, and it
// expires with its smallest TTL. Negative answers (NXDOMAIN, NODATA) are
// kept for the TTL of RFC 2308, the smaller of the SOA's TTL and its
// MINIMUM, capped by maxNeg, and not at all without an SOA; SERVFAIL for
// servFailTTL; nothing else that is not NOERROR. Truncated and oversized
// replies are not kept.

const (
	// servFailTTL is how long a SERVFAIL (from the upstreams, or because
	// none answered) is served from the cache: long enough to spare a
	// failing upstream a storm of retries, short enough not to matter.
	servFailTTL = 1
	// maxCachedReply bounds one entry, so the cache's memory is bounded by
	// its size in entries.
	maxCachedReply = ednsSize
	// cacheKeyLen bounds a key: a wire name, the type and the flags.
	cacheKeyLen = 255 + 3
)

// Defaults of the cache; see Config.
const (
	DefaultCacheSize           = 10000
	DefaultCacheMaxTTL         = time.Hour
	DefaultCacheMaxNegativeTTL = 5 * time.Minute
)

// cache is a bounded LRU of upstream replies, keyed by question.
type cache struct {
	seed           maphash.Seed
	maxTTL, maxNeg uint32   // seconds
	metrics        *metrics // set once, before the cache is used

	// mu guards the fields below.
	mu  sync.Mutex
	lru *simplelru.LRU[uint64, *cached]
	// byName holds the entries of lru by the hash of each name they
	// depend on (their names); kept by put and lru's eviction callback.
	byName map[uint64]entrySet
}

// entrySet is the entries of one name: most names have one, kept inline.
type entrySet struct {
	one  *cached
	more []*cached
}

// without returns s less e.
func (s entrySet) without(e *cached) entrySet {
	if s.one == e {
		if n := len(s.more); n > 0 {
			s.one, s.more[n-1], s.more = s.more[n-1], nil, s.more[:n-1]
		} else {
			s.one = nil
		}
	} else if i := slices.Index(s.more, e); i >= 0 {
		n := len(s.more)
		s.more[i], s.more[n-1], s.more = s.more[n-1], nil, s.more[:n-1]
	}
	return s
}

// all returns the entries of s, in a slice of their own.
func (s entrySet) all() []*cached {
	if s.one == nil {
		return nil
	}
	return append([]*cached{s.one}, s.more...)
}

// cached is one reply; immutable once stored.
type cached struct {
	key     []byte   // the question's key, to rule out a hash collision
	msg     []byte   // the reply: ID 0, no OPT, TTLs capped
	qend    int      // end of the question section in msg
	ttls    []uint16 // offsets of the TTL fields in msg
	others  []byte   // the names but the question's it depends on: lowercase wire names back to back
	stored  time.Time
	expires time.Time
}

func newCache(size int, maxTTL, maxNeg time.Duration) *cache {
	c := &cache{seed: maphash.MakeSeed(), maxTTL: seconds(maxTTL), maxNeg: seconds(min(maxNeg, maxTTL)), byName: map[uint64]entrySet{}}
	l, err := simplelru.NewLRU(size, func(_ uint64, e *cached) { c.unindexLocked(e) })
	if err != nil { // only for a size <= 0, which New never passes
		panic(err)
	}
	c.lru = l
	return c
}

// cacheKey writes the key of a parsed query into sc.key: its lowercase
// wire name, type, and the DO and CD bits (which change the records an
// upstream returns).
func cacheKey(req []byte, sc *scratch) []byte {
	q := &sc.q
	k := append(sc.key[:0], q.qname...)
	k = binary.BigEndian.AppendUint16(k, q.qtype)
	var flags byte
	if q.do {
		flags |= 1
	}
	if req[3]&0x10 != 0 { // CD
		flags |= 2
	}
	return append(k, flags)
}

// answer writes the cached reply to a query into buf (or a new slice when
// it does not fit), fitted to limit. It reports false on a miss. The caller
// counts hits and misses.
func (c *cache) answer(key, req []byte, q *query, buf []byte, limit int, now time.Time) ([]byte, bool) {
	h := maphash.Bytes(c.seed, key)
	c.mu.Lock()
	e, ok := c.lru.Get(h)
	if ok && (!bytes.Equal(e.key, key) || !now.Before(e.expires)) {
		if bytes.Equal(e.key, key) {
			c.lru.Remove(h) // expired
		}
		ok = false
	}
	c.mu.Unlock()
	if !ok || e.qend != q.qend {
		return nil, false
	}
	return e.serve(req, q, buf, limit, now), true
}

// serve writes e as the reply to a query for its question (the same qend)
// into buf (or a new slice when it does not fit), fitted to limit: the
// query's ID, RD bit and question in its case, e's TTLs lowered by its
// age, and the server's own OPT record when the query has EDNS.
func (e *cached) serve(req []byte, q *query, buf []byte, limit int, now time.Time) []byte {
	size := len(e.msg)
	if q.edns {
		size += 11
	}
	var b []byte
	if size <= len(buf) {
		b = buf[:size]
	} else {
		b = make([]byte, size)
	}
	copy(b, e.msg)
	copy(b[:2], req)                           // the client's ID
	copy(b[headerLen:q.qend], req[headerLen:]) // its question, in its case
	b[2] = e.msg[2]&^0x01 | req[2]&0x01
	b[3] = e.msg[3]
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, off := range e.ttls {
		binary.BigEndian.PutUint32(b[off:], binary.BigEndian.Uint32(b[off:])-age)
	}
	if q.edns {
		binary.BigEndian.PutUint16(b[10:], binary.BigEndian.Uint16(b[10:])+1)
		putOPT(b[len(e.msg):], q.do)
	}
	return fit(b, limit)
}

// store keeps resp, the final reply to the query with key, when it may be
// kept and mesh (which reports whether a lowercase wire name is the
// roster's) says no name it depends on is the mesh's. resp must answer the
// question of key (the caller matched it).
func (c *cache) store(key, resp []byte, now time.Time, mesh func(name []byte) bool) {
	if e, keep := c.entry(resp, now); keep {
		c.put(key, e, mesh)
	}
}

// put keeps e, an entry to be kept (entry said so), as the answer to the
// query with key, unless mesh says a name it depends on is the mesh's.
// mesh is asked under the cache's lock, so a put cannot slip in between a
// roster swap and the drop that follows it.
func (c *cache) put(key []byte, e *cached, mesh func(name []byte) bool) {
	e.key = bytes.Clone(key)
	h := maphash.Bytes(c.seed, key)
	c.mu.Lock()
	for n := range e.names() {
		if mesh(n) {
			c.mu.Unlock()
			return
		}
	}
	if old, ok := c.lru.Peek(h); ok {
		c.unindexLocked(old) // Add replaces it without the eviction callback
	}
	evicted := c.lru.Add(h, e)
	for n := range e.names() {
		nh := maphash.Bytes(c.seed, n)
		set := c.byName[nh]
		if set.one == nil {
			set.one = e
		} else {
			set.more = append(set.more, e)
		}
		c.byName[nh] = set
	}
	c.mu.Unlock()
	if evicted {
		c.metrics.cacheEvictions.Inc()
	}
}

// unindexLocked takes e out of byName.
func (c *cache) unindexLocked(e *cached) {
	syncs.AssertLocked(&c.mu)
	for n := range e.names() {
		nh := maphash.Bytes(c.seed, n)
		if set := c.byName[nh].without(e); set.one == nil {
			delete(c.byName, nh)
		} else {
			c.byName[nh] = set
		}
	}
}

// name is the entry's lowercase wire name.
func (e *cached) name() []byte { return e.key[:len(e.key)-3] }

// names yields the lowercase wire names e depends on: its own, then the
// others, each once.
func (e *cached) names() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		if !yield(e.name()) {
			return
		}
		for n := range eachName(e.others) {
			if !yield(n) {
				return
			}
		}
	}
}

// eachName yields the uncompressed wire names back to back in b.
func eachName(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for off := 0; off < len(b); {
			end := off
			for b[end] != 0 {
				end += int(b[end]) + 1
			}
			if !yield(b[off : end+1]) {
				return
			}
			off = end + 1
		}
	}
}

// dropNames removes the entries that depend on any of the lowercase wire
// names: after a roster delta, the names it sets or removes. It costs the
// entries of those names, not the cache's size.
func (c *cache) dropNames(names [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		for _, e := range c.byName[maphash.Bytes(c.seed, n)].all() {
			c.removeLocked(e)
		}
	}
}

// dropMesh removes the entries that depend on a name mesh says is the
// roster's: after a whole roster is swapped in, the names it took over.
// Every other entry is left as it was.
func (c *cache) dropMesh(mesh func(name []byte) bool) {
	c.mu.Lock()
	entries := c.lru.Values()
	c.mu.Unlock()
	var drop []*cached
	for _, e := range entries { // outside the lock: queries go on
		for n := range e.names() {
			if mesh(n) {
				drop = append(drop, e)
				break
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range drop {
		c.removeLocked(e)
	}
}

// removeLocked removes e, when it is still the entry of its key.
func (c *cache) removeLocked(e *cached) {
	syncs.AssertLocked(&c.mu)
	h := maphash.Bytes(c.seed, e.key)
	if cur, ok := c.lru.Peek(h); ok && cur == e {
		c.lru.Remove(h)
	}
}

// flush empties the cache.
func (c *cache) flush() {
	c.mu.Lock()
	c.lru.Purge()
	c.mu.Unlock()
	c.metrics.cacheFlushes.Inc()
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// entry makes the cache entry of resp, with the cache's caps on TTLs; see
// makeEntry.
func (c *cache) entry(resp []byte, now time.Time) (*cached, bool) {
	return makeEntry(resp, now, c.maxTTL, c.maxNeg)
}

// makeEntry makes the entry of resp, every TTL capped by maxTTL (negative
// answers' by maxNeg), and reports whether it is to be cached. An entry
// not to be cached still answers the identical questions that waited for
// resp (forward.go's joiners): a TTL of 0, a negative answer without an
// SOA and a reply over maxCachedReply are kept whole; a truncated reply
// and one with another rcode than NOERROR, NXDOMAIN and SERVFAIL become
// their header and question (SERVFAIL too, which is cached). It returns
// nil for a reply it cannot take apart (one it cannot walk, an OPT record
// that is not the last or has an extended RCODE).
func makeEntry(resp []byte, now time.Time, maxTTL, maxNeg uint32) (*cached, bool) {
	if len(resp) < headerLen {
		return nil, false
	}
	rcode := resp[3] & 0x0F
	if truncated := resp[2]&0x02 != 0; truncated || rcode != rcodeSuccess && rcode != rcodeNXDomain {
		qend, ok := questionEnd(resp)
		if !ok {
			return nil, false
		}
		msg := bytes.Clone(resp[:qend])
		msg[0], msg[1] = 0, 0
		binary.BigEndian.PutUint16(msg[4:], 1)
		clear(msg[6:headerLen])
		return &cached{msg: msg, qend: qend, stored: now, expires: now.Add(servFailTTL * time.Second)}, rcode == rcodeServFail && !truncated
	}
	rrs, qend, ok := walkReply(resp)
	if !ok {
		return nil, false
	}
	an := int(binary.BigEndian.Uint16(resp[6:]))
	negative := rcode == rcodeNXDomain || an == 0
	end := len(resp)
	arcount := binary.BigEndian.Uint16(resp[10:])
	ttl := maxTTL
	soa := false
	e := &cached{qend: qend, stored: now}
	for i, rr := range rrs {
		if rr.typ == typeOPT {
			// Only a last OPT can be cut off without moving what
			// compression pointers point at; its extended RCODE must be 0.
			if i != len(rrs)-1 || resp[rr.ttl] != 0 {
				return nil, false
			}
			end, arcount = rr.start, arcount-1
			continue
		}
		t := min(upstreamTTL(resp[rr.ttl:]), maxTTL)
		if negative && rr.section == 1 && rr.typ == typeSOA && rr.end-rr.rdata >= 20 {
			// RFC 2308 §5: the SOA's TTL, at most its MINIMUM.
			t = min(t, upstreamTTL(resp[rr.end-4:]), maxNeg)
			soa = true
		}
		ttl = min(ttl, t)
		e.ttls = append(e.ttls, uint16(rr.ttl))
	}
	keep := !(negative && !soa) && ttl != 0 && end <= maxCachedReply
	if keep {
		if e.others, ok = otherNames(resp, rrs); !ok {
			return nil, false
		}
	}
	e.msg = bytes.Clone(resp[:end])
	e.msg[0], e.msg[1] = 0, 0
	binary.BigEndian.PutUint16(e.msg[10:], arcount)
	for _, rr := range rrs {
		if rr.typ == typeOPT {
			continue
		}
		t := min(upstreamTTL(resp[rr.ttl:]), maxTTL)
		if negative && rr.typ == typeSOA && rr.section == 1 {
			t = min(t, ttl)
		}
		binary.BigEndian.PutUint32(e.msg[rr.ttl:], t)
	}
	e.expires = now.Add(time.Duration(ttl) * time.Second)
	return e, keep
}

// otherNames returns the names but the question's that the records rrs of
// the reply m depend on (the owner of every record but OPT, and the target
// of every CNAME in the answer), lowercase wire names back to back, each
// once; nil for none. It reports false for a name it cannot read.
func otherNames(m []byte, rrs []rrPos) ([]byte, bool) {
	var qbuf, nbuf [256]byte
	qname, _, ok := readName(m, headerLen, qbuf[:0])
	if !ok {
		return nil, false
	}
	var others []byte
	add := func(off int) bool {
		n, _, ok := readName(m, off, nbuf[:0])
		if ok && string(n) != string(qname) && !containsName(others, n) {
			others = append(others, n...)
		}
		return ok
	}
	for _, rr := range rrs {
		if rr.typ == typeOPT {
			continue
		}
		if !add(rr.start) || rr.section == 0 && rr.typ == typeCNAME && !add(rr.rdata) {
			return nil, false
		}
	}
	return others, true
}

// containsName reports whether the wire names back to back in names hold n.
func containsName(names, n []byte) bool {
	for x := range eachName(names) {
		if string(x) == string(n) {
			return true
		}
	}
	return false
}

// rrPos is where one resource record of a message lies.
type rrPos struct {
	start, ttl, rdata, end int
	typ                    uint16
	section                int // 0 answer, 1 authority, 2 additional
}

// walkReply finds every record of a message with one question. It reports
// false for a message it cannot walk to its exact end.
func walkReply(m []byte) ([]rrPos, int, bool) {
	qend, ok := questionEnd(m)
	if !ok || binary.BigEndian.Uint16(m[4:]) != 1 {
		return nil, 0, false
	}
	counts := [3]int{int(binary.BigEndian.Uint16(m[6:])), int(binary.BigEndian.Uint16(m[8:])), int(binary.BigEndian.Uint16(m[10:]))}
	rrs := make([]rrPos, 0, counts[0]+counts[1]+counts[2])
	off := qend
	for sec, n := range counts {
		for range n {
			start := off
			off, ok = skipName(m, off)
			if !ok || off+10 > len(m) {
				return nil, 0, false
			}
			rr := rrPos{start: start, typ: binary.BigEndian.Uint16(m[off:]), ttl: off + 4, rdata: off + 10, section: sec}
			rr.end = rr.rdata + int(binary.BigEndian.Uint16(m[off+8:]))
			if rr.end > len(m) {
				return nil, 0, false
			}
			rrs = append(rrs, rr)
			off = rr.end
		}
	}
	return rrs, qend, off == len(m)
}

// skipName returns the offset after the (possibly compressed) name at off.
func skipName(m []byte, off int) (int, bool) {
	for {
		if off >= len(m) {
			return 0, false
		}
		l := int(m[off])
		switch {
		case l == 0:
			return off + 1, true
		case l&0xC0 == 0xC0:
			if off+2 > len(m) {
				return 0, false
			}
			return off + 2, true
		case l > 63:
			return 0, false
		}
		off += 1 + l
	}
}

// upstreamTTL reads the 32-bit TTL (or SOA MINIMUM) at the start of b, a
// value from an upstream: one with the most significant bit set is read as
// 0 (RFC 2181 section 8).
func upstreamTTL(b []byte) uint32 {
	t := binary.BigEndian.Uint32(b)
	if t&0x80000000 != 0 {
		return 0
	}
	return t
}
