package resolver

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// The cache keeps upstream answers to outside names, never the mesh's:
// names the roster holds are answered from the table before the cache is
// asked, and an answer is stored only when its name is not the roster's at
// that moment. A roster swap leaves the cache alone (a name the new roster
// takes over is shadowed by the table, never answered from the cache).
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

	// mu guards lru.
	mu  sync.Mutex
	lru *simplelru.LRU[uint64, *cached]
}

// cached is one reply; immutable once stored.
type cached struct {
	key     []byte   // the question's key, to rule out a hash collision
	msg     []byte   // the reply: ID 0, no OPT, TTLs capped
	qend    int      // end of the question section in msg
	ttls    []uint16 // offsets of the TTL fields in msg
	stored  time.Time
	expires time.Time
}

func newCache(size int, maxTTL, maxNeg time.Duration) *cache {
	l, err := simplelru.NewLRU[uint64, *cached](size, nil)
	if err != nil { // only for a size <= 0, which New never passes
		panic(err)
	}
	return &cache{seed: maphash.MakeSeed(), maxTTL: seconds(maxTTL), maxNeg: seconds(min(maxNeg, maxTTL)), lru: l}
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
// roster's) says the name is not the mesh's. resp must answer the question
// of key (the caller matched it).
func (c *cache) store(key, resp []byte, now time.Time, mesh func(name []byte) bool) {
	if e, keep := c.entry(resp, now); keep {
		c.put(key, e, mesh)
	}
}

// put keeps e, an entry to be kept (entry said so), as the answer to the
// query with key, unless mesh says its name is the mesh's. mesh is asked
// under the cache's lock, so a put cannot slip in between a roster swap
// and dropMesh.
func (c *cache) put(key []byte, e *cached, mesh func(name []byte) bool) {
	e.key = bytes.Clone(key)
	h := maphash.Bytes(c.seed, key)
	c.mu.Lock()
	if mesh(e.name()) {
		c.mu.Unlock()
		return
	}
	evicted := c.lru.Add(h, e)
	c.mu.Unlock()
	if evicted {
		c.metrics.cacheEvictions.Inc()
	}
}

// name is the entry's lowercase wire name.
func (e *cached) name() []byte { return e.key[:len(e.key)-3] }

// dropMesh removes the entries of names that mesh says are the roster's:
// after a swap, the names the new roster took over. Every other entry is
// left as it was.
func (c *cache) dropMesh(mesh func(name []byte) bool) {
	c.mu.Lock()
	entries := c.lru.Values()
	c.mu.Unlock()
	var drop []*cached
	for _, e := range entries { // outside the lock: queries go on
		if mesh(e.name()) {
			drop = append(drop, e)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range drop {
		h := maphash.Bytes(c.seed, e.key)
		if cur, ok := c.lru.Peek(h); ok && cur == e {
			c.lru.Remove(h)
		}
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
		t := min(binary.BigEndian.Uint32(resp[rr.ttl:]), maxTTL)
		if negative && rr.section == 1 && rr.typ == typeSOA && rr.end-rr.rdata >= 20 {
			// RFC 2308 §5: the SOA's TTL, at most its MINIMUM.
			t = min(t, binary.BigEndian.Uint32(resp[rr.end-4:]), maxNeg)
			soa = true
		}
		ttl = min(ttl, t)
		e.ttls = append(e.ttls, uint16(rr.ttl))
	}
	keep := !(negative && !soa) && ttl != 0 && end <= maxCachedReply
	e.msg = bytes.Clone(resp[:end])
	e.msg[0], e.msg[1] = 0, 0
	binary.BigEndian.PutUint16(e.msg[10:], arcount)
	for _, rr := range rrs {
		if rr.typ == typeOPT {
			continue
		}
		t := min(binary.BigEndian.Uint32(resp[rr.ttl:]), maxTTL)
		if negative && rr.typ == typeSOA && rr.section == 1 {
			t = min(t, ttl)
		}
		binary.BigEndian.PutUint32(e.msg[rr.ttl:], t)
	}
	e.expires = now.Add(time.Duration(ttl) * time.Second)
	return e, keep
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
