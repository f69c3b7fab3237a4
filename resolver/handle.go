package resolver

import (
	"encoding/binary"
	"net/netip"
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
	resp, job := s.slow(t, req, client, udp)
	if job != nil {
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
