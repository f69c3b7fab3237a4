package resolver

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/dnsutil"
	"codeberg.org/miekg/dns/rdata"

	"github.com/meshhost/meshhost/spec"
)

// slow answers any query the fast path did not: it unpacks the whole message
// with miekg/dns. It returns the reply, or a job to forward, or neither when
// the packet is to be dropped.
func (s *Server) slow(t *table, req []byte, client netip.Addr, udp bool) ([]byte, *forwardJob) {
	if len(req) < headerLen || req[2]&0x80 != 0 {
		return nil, nil // too short to answer, or a response: drop
	}
	m := &dns.Msg{Data: req}
	if err := m.Unpack(); err != nil {
		return errorReply(req, rcodeFormErr), nil
	}
	if m.Opcode != dns.OpcodeQuery {
		return errorReply(req, rcodeNotImp), nil
	}
	if len(m.Question) != 1 {
		return errorReply(req, rcodeFormErr), nil
	}
	edns := m.UDPSize > 0
	limit := 65535
	if udp {
		limit = max(512, int(m.UDPSize))
	}
	resp := new(dns.Msg)
	dnsutil.SetReply(resp, m)
	resp.Rcode = dns.RcodeSuccess
	resp.RecursionAvailable = true
	if edns {
		resp.UDPSize = ednsSize
		if m.Version != 0 {
			resp.Rcode = dns.RcodeBadVers
			return pack(resp, limit), nil
		}
	}

	q := m.Question[0]
	qtype := dns.RRToType(q)
	qname := q.Header().Name
	name := spec.CanonicalName(qname)
	switch {
	case q.Header().Class != dns.ClassINET:
		resp.Rcode = dns.RcodeRefused
		return pack(resp, limit), nil
	case qtype == dns.TypeAXFR || qtype == dns.TypeIXFR:
		resp.Rcode = dns.RcodeRefused
		return pack(resp, limit), nil
	}

	if t != nil {
		h, found, zi := t.lookupName(name)
		if found {
			s.answerName(t, resp, h, zi, qname, qtype)
			return pack(resp, limit), nil
		}
		// A reverse name of a roster address, inside a zone of the
		// roster's or not (a zone may be a reverse zone, 10.in-addr.arpa).
		if qtype == dns.TypePTR {
			if a := dnsutil.AddrReverse(name + "."); a.IsValid() {
				if names := t.reverse(a); len(names) > 0 {
					resp.Authoritative = true
					for _, n := range names {
						resp.Answer = append(resp.Answer, &dns.PTR{
							Hdr: dns.Header{Name: qname, Class: dns.ClassINET, TTL: t.ttl},
							PTR: rdata.PTR{Ptr: n + "."},
						})
					}
					return pack(resp, limit), nil
				}
			}
		}
		if zi != 0 {
			z := &t.zones[zi-1]
			resp.Authoritative = true
			if nonce, ok := strings.CutSuffix(name, "."+probeLabel+z.dot); ok && !strings.Contains(nonce, ".") {
				switch qtype {
				case dns.TypeA, dns.TypeANY:
					resp.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: qname, Class: dns.ClassINET}, A: rdata.A{Addr: CanaryAddress(nonce)}}}
				default:
					resp.Ns = []dns.RR{s.soaRR(t, z)}
				}
				return pack(resp, limit), nil
			}
			resp.Rcode = dns.RcodeNameError
			resp.Ns = []dns.RR{s.soaRR(t, z)}
			return pack(resp, limit), nil
		}
	}

	// Not the mesh's: forward, except ANY, which gets the minimal answer of
	// RFC 8482 rather than becoming an amplifier.
	if qtype == dns.TypeANY {
		resp.Answer = []dns.RR{&dns.HINFO{Hdr: dns.Header{Name: qname, Class: dns.ClassINET, TTL: 3600}, HINFO: rdata.HINFO{Cpu: "RFC8482"}}}
		return pack(resp, limit), nil
	}
	targets := s.localForward(client, name)
	local := targets != nil
	if !local {
		targets = s.upstreams()
	}
	if len(targets) == 0 {
		resp.Rcode = dns.RcodeServerFailure
		return pack(resp, limit), nil
	}
	return nil, &forwardJob{req: append([]byte(nil), req...), targets: targets, limit: limit, qtype: qtype, opt: optOffset(req), local: local}
}

// answerName fills resp for a name the table has, h, in zone zi (0 for
// none).
func (s *Server) answerName(t *table, resp *dns.Msg, h hit, zi uint16, qname string, qtype uint16) {
	resp.Authoritative = true
	hdr := dns.Header{Name: qname, Class: dns.ClassINET, TTL: t.ttl}
	a4, a6 := h.a4, h.a6
	addA := func(max int) {
		for i := 0; i < len(a4) && i/4 < max; i += 4 {
			resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: rdata.A{Addr: netip.AddrFrom4([4]byte(a4[i : i+4]))}})
		}
	}
	addAAAA := func(max int) {
		for i := 0; i < len(a6) && i/16 < max; i += 16 {
			resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: rdata.AAAA{Addr: netip.AddrFrom16([16]byte(a6[i : i+16]))}})
		}
	}
	switch qtype {
	case dns.TypeA:
		addA(len(a4))
	case dns.TypeAAAA:
		addAAAA(len(a6))
	case dns.TypeANY:
		// RFC 8482: one record of the name's is enough.
		addA(1)
		if len(resp.Answer) == 0 {
			addAAAA(1)
		}
	case dns.TypeSOA:
		if h.apex {
			if z := &t.zones[zi-1]; true {
				soa := s.soaRR(t, z)
				soa.Header().Name, soa.Header().TTL = qname, t.ttl
				resp.Answer = []dns.RR{soa}
			}
		}
	}
	if len(resp.Answer) == 0 && zi != 0 {
		resp.Ns = []dns.RR{s.soaRR(t, &t.zones[zi-1])}
	}
}

// soaRR is the zone's SOA as an RR, for the slow path.
func (s *Server) soaRR(t *table, z *zone) dns.RR {
	return &dns.SOA{
		Hdr: dns.Header{Name: z.name + ".", Class: dns.ClassINET, TTL: t.negTTL},
		SOA: rdata.SOA{
			Ns: "ns1." + z.name + ".", Mbox: "hostmaster." + z.name + ".",
			Serial: uint32(t.gen), Refresh: 3600, Retry: 600, Expire: 86400, Minttl: t.negTTL,
		},
	}
}

// pack packs resp, truncating it (TC, no records) when it exceeds limit.
func pack(resp *dns.Msg, limit int) []byte {
	if err := resp.Pack(); err != nil {
		resp.Answer, resp.Ns, resp.Extra = nil, nil, nil
		resp.Rcode = dns.RcodeServerFailure
		if err := resp.Pack(); err != nil {
			return nil
		}
	}
	if len(resp.Data) > limit {
		dnsutil.Truncate(resp)
		resp.Data = nil
		if err := resp.Pack(); err != nil {
			return nil
		}
	}
	return resp.Data
}

// errorReply answers req with rcode and no records, echoing the question
// when it is a plain one. It returns nil (drop) when req is not a query.
func errorReply(req []byte, rcode byte) []byte {
	if len(req) < headerLen || req[2]&0x80 != 0 {
		return nil
	}
	end := headerLen
	var sc scratch
	if parseQuery(req, &sc) {
		end = sc.q.qend
	} else if qend, ok := questionEnd(req); ok {
		end = qend
	}
	b := make([]byte, end)
	copy(b, req[:end])
	finishError(b, req, rcode, end > headerLen)
	return b
}

// errorReplyInto is errorReply without allocating, for the hot path.
func errorReplyInto(req, buf []byte, rcode byte) []byte {
	if len(req) < headerLen || req[2]&0x80 != 0 {
		return nil
	}
	end := headerLen
	if qend, ok := questionEnd(req); ok && qend <= len(buf) {
		end = qend
	}
	b := buf[:end]
	copy(b, req[:end])
	finishError(b, req, rcode, end > headerLen)
	return b
}

func finishError(b, req []byte, rcode byte, question bool) {
	b[2] = 0x80 | req[2]&0x79 // QR, opcode and RD as asked
	b[3] = 0x80 | rcode
	qd := uint16(0)
	if question {
		qd = 1
	}
	binary.BigEndian.PutUint16(b[4:], qd)
	b[6], b[7], b[8], b[9], b[10], b[11] = 0, 0, 0, 0, 0, 0
}

// questionEnd returns where a first, uncompressed question ends, if req has one.
func questionEnd(req []byte) (int, bool) {
	if len(req) < headerLen || binary.BigEndian.Uint16(req[4:]) == 0 {
		return 0, false
	}
	off := headerLen
	for {
		if off >= len(req) {
			return 0, false
		}
		l := int(req[off])
		if l == 0 {
			off++
			break
		}
		if l > 63 {
			return 0, false
		}
		off += 1 + l
	}
	if off+4 > len(req) || off-headerLen > 255 {
		return 0, false
	}
	return off + 4, true
}

// optOffset is where the OPT record of a query starts, -1 when it has none
// or it cannot be walked.
func optOffset(req []byte) int {
	rrs, _, ok := walkReply(req)
	if !ok {
		return -1
	}
	for _, rr := range rrs {
		if rr.typ == typeOPT && rr.section == 2 {
			return rr.start
		}
	}
	return -1
}
