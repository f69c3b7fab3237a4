package resolver

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"
)

// handle answers one query from client. It returns the reply to send (in buf
// when it can), or nil when there is nothing to send now: a dropped packet,
// or a forwarded question whose answer goes to `to` later.
func (s *Server) handle(req []byte, client netip.Addr, udp bool, sc *scratch, buf []byte, to replyTo) []byte {
	if !s.allowed(client) {
		resp := errorReplyInto(req, buf, rcodeRefused)
		if resp != nil {
			s.metrics.count(reqType(req), rcodeRefused)
			s.refused(client.Unmap())
		}
		return resp
	}
	t := s.table.Load()
	if resp, ok := t.fast(req, sc, buf, udp); ok {
		s.metrics.count(sc.q.qtype, resp[3]&0x0F)
		return resp
	}
	if resp, ok := s.forwardFast(t, req, client, udp, sc, buf, to); ok {
		return resp
	}
	resp, job := s.slow(t, req, client, udp)
	if job != nil {
		if sc.q.ok && !job.local {
			// A question the fast path read but left to the slow one
			// (PTR): cached, and joined, like the others.
			job.key = bytes.Clone(cacheKey(req, sc))
			job.query = sc.q
			job.query.qname = nil
			if resp, ok := s.cached(req, sc, buf, job.limit); ok {
				return resp
			}
		}
		s.startForward(job, to)
		return nil
	}
	if resp != nil {
		s.metrics.count(reqType(req), resp[3]&0x0F)
	}
	return resp
}

// reqType is the question type of a query, 0 when it has none readable.
func reqType(req []byte) uint16 {
	end, ok := questionEnd(req)
	if !ok {
		return 0
	}
	return binary.BigEndian.Uint16(req[end-4:])
}

// forwardFast forwards a plain query for a name outside the mesh (or
// answers it from the cache) without unpacking it: the common case of
// forwarding. It reports false for anything it leaves to the slow path:
// queries the fast path could not read, names of the roster or its zones,
// ANY, zone transfers and PTR (which may be the roster's).
func (s *Server) forwardFast(t *table, req []byte, client netip.Addr, udp bool, sc *scratch, buf []byte, to replyTo) ([]byte, bool) {
	if t == nil && !parseQuery(req, sc) || !sc.q.ok {
		return nil, false
	}
	q := &sc.q
	if s.cameBack(q.qname, client) { // a loop check of ours (loop.go)
		s.metrics.count(q.qtype, rcodeRefused)
		return errorReplyInto(req, buf, rcodeRefused), true
	}
	switch q.qtype {
	case typeANY, typeAXFR, typeIXFR, typePTR:
		return nil, false
	}
	if t != nil {
		if _, found, zi := t.lookup(q.qname); found || zi != 0 {
			return nil, false
		}
	}
	limit := 65535
	if udp {
		limit = q.limit()
	}
	var targets []netip.AddrPort
	local := false
	if len(*s.local.Load()) > 0 {
		name, ok := hostName(q.qname)
		if !ok {
			return nil, false
		}
		targets = s.localForward(client, name)
		local = targets != nil
	}
	if !local {
		if resp, ok := s.cached(req, sc, buf, limit); ok {
			return resp, true
		}
		targets = s.upstreams()
	}
	if len(targets) == 0 {
		return nil, false // the slow path answers SERVFAIL
	}
	job := &forwardJob{req: bytes.Clone(req), targets: targets, limit: limit, qtype: q.qtype, opt: -1}
	if q.edns {
		job.opt = q.qend
	}
	if !local { // the key joins identical questions, and caches the answer
		job.key = bytes.Clone(cacheKey(req, sc))
		job.query = *q
		job.query.qname = nil
	}
	s.startForward(job, to)
	return nil, true
}

// cached answers a parsed query from the cache into buf, counting it.
func (s *Server) cached(req []byte, sc *scratch, buf []byte, limit int) ([]byte, bool) {
	if s.cache == nil {
		return nil, false
	}
	resp, ok := s.cache.answer(cacheKey(req, sc), req, &sc.q, buf, limit, time.Now())
	if !ok {
		s.metrics.cacheMisses.Inc()
		return nil, false
	}
	s.metrics.cacheHits.Inc()
	s.metrics.count(sc.q.qtype, resp[3]&0x0F)
	return resp, true
}

// hostName is the canonical name of a lowercase wire name, when it is a
// plain host name (letters, digits, hyphens, underscores).
func hostName(w []byte) (string, bool) {
	b := make([]byte, 0, len(w))
	for off := 0; off < len(w) && w[off] != 0; {
		l := int(w[off])
		if len(b) > 0 {
			b = append(b, '.')
		}
		for _, c := range w[off+1 : off+1+l] {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
			b = append(b, c)
		}
		off += 1 + l
	}
	return string(b), true
}
