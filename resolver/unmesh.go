package resolver

import (
	"encoding/binary"
	"net/netip"

	"codeberg.org/miekg/dns"
)

// An upstream answers for outside names only: what it says about a mesh
// name (a roster name, or any name in a zone of the roster) never reaches
// a client, nor the cache. A forwarded reply loses every record whose
// owner is a mesh name, in every section. When its answer is a CNAME chain
// that leads into the mesh (www.example.com CNAME gitea.novox.internal),
// the chain is kept and the roster answers for the name it leads to: the
// roster's records for it, or NXDOMAIN or NODATA with the zone's SOA, in
// place of whatever the upstream said about it (public DNS knows nothing
// of .internal, so it says NXDOMAIN). Such a reply is not cached: it holds
// the roster's answer of the moment, which a later roster changes.
//
// Reading a reply costs one pass over its records on the wire; only a
// reply that names the mesh is unpacked and packed again.

// cnameChainMax bounds the CNAME records of one chain that are followed.
const cnameChainMax = 16

// typeCNAME is the CNAME record type.
const typeCNAME = 5

// unmesh returns resp, a reply from upstream to a question for an outside
// name, without what it says about the mesh served by t (nil: none), and
// whether that reply may be cached. A reply whose records cannot be read
// becomes SERVFAIL to req, or, when it is truncated, its header and
// question (the client asks again over TCP).
func (s *Server) unmesh(t *table, req, resp []byte) ([]byte, bool) {
	if t == nil {
		return resp, true
	}
	sc, ok := scanMesh(t, resp)
	if sc.question {
		// The question's name was forwarded as not the mesh's and has
		// joined the roster while the upstream answered: the roster
		// answers it (a mesh name is never answered from an upstream), and
		// the reply is not cached: it is the roster's answer of the moment.
		if out, job := s.slow(t, req, netip.Addr{}, false); out != nil && job == nil {
			return out, false
		}
		return servFail(req), false
	}
	switch {
	case !ok && resp[2]&0x02 != 0:
		return fit(resp, 0), true // cut to its header and question, as fit does
	case !ok:
		return servFail(req), true
	case sc.drop == nil && sc.chain < 0:
		return resp, true
	}
	out := s.rewriteMesh(t, resp, sc)
	if out == nil {
		return servFail(req), true
	}
	return out, sc.chain < 0
}

// meshScan is what a reply says about the mesh.
type meshScan struct {
	// drop marks the records (answer, authority, additional, in order; an
	// OPT record not counted) whose owner is a mesh name; nil when none is.
	drop []bool
	// chain is the index in the answer of the CNAME record that leads the
	// question's name into the mesh, -1 when none does; target is the
	// lowercase wire name it leads to.
	chain  int
	target []byte
	// counts are the records of each section, an OPT record not counted.
	counts [3]int
	// question is set when the question's own name is a mesh name: the
	// rest of the scan is not made.
	question bool
}

// scanMesh reads every record of resp. It reports false when it cannot.
func scanMesh(t *table, resp []byte) (meshScan, bool) {
	sc := meshScan{chain: -1}
	qend, ok := questionEnd(resp)
	if !ok || binary.BigEndian.Uint16(resp[4:]) != 1 {
		return sc, false
	}
	var qbuf, obuf, cbuf, tbuf [256]byte
	qname, _, ok := readName(resp, headerLen, qbuf[:0])
	if !ok {
		return sc, false
	}
	if isMeshWire(t, qname) {
		sc.question = true
		return sc, true
	}
	// The name the chain has reached; a question for the CNAME itself is
	// answered by the first one, whatever it leads to.
	chain, links := qname, 0
	if binary.BigEndian.Uint16(resp[qend-4:]) == typeCNAME {
		links = cnameChainMax
	}
	counts := [3]int{int(binary.BigEndian.Uint16(resp[6:])), int(binary.BigEndian.Uint16(resp[8:])), int(binary.BigEndian.Uint16(resp[10:]))}
	total := counts[0] + counts[1] + counts[2]
	off, i := qend, 0
	for sec, n := range counts {
		for range n {
			owner, next, ok := readName(resp, off, obuf[:0])
			if !ok || next+10 > len(resp) {
				return sc, false
			}
			typ := binary.BigEndian.Uint16(resp[next:])
			rdata := next + 10
			end := rdata + int(binary.BigEndian.Uint16(resp[next+8:]))
			if end > len(resp) {
				return sc, false
			}
			off = end
			if typ == typeOPT && sec == 2 {
				continue
			}
			sc.counts[sec]++
			// The question's own name was forwarded as not the mesh's.
			if string(owner) != string(qname) && isMeshWire(t, owner) {
				if sc.drop == nil {
					sc.drop = make([]bool, total)
				}
				sc.drop[i] = true
			}
			if sec == 0 && typ == typeCNAME && links < cnameChainMax && string(owner) == string(chain) {
				target, _, ok := readName(resp, rdata, tbuf[:0])
				if !ok {
					return sc, false
				}
				chain, links = append(cbuf[:0], target...), links+1
				if sc.chain < 0 && isMeshWire(t, chain) {
					sc.chain, sc.target = i, append([]byte(nil), chain...)
				}
			}
			i++
		}
	}
	return sc, true
}

// isMeshWire reports whether t holds the lowercase wire name, or a zone
// holding it.
func isMeshWire(t *table, name []byte) bool {
	_, found, zi := t.lookup(name)
	return found || zi != 0
}

// rewriteMesh packs resp again without the records sc marks, and with the
// roster's answer for the name sc's chain leads to. It returns nil when it
// cannot.
func (s *Server) rewriteMesh(t *table, resp []byte, sc meshScan) []byte {
	m := &dns.Msg{Data: resp}
	if err := m.Unpack(); err != nil || len(m.Question) != 1 {
		return nil
	}
	if len(m.Answer) != sc.counts[0] || len(m.Ns) != sc.counts[1] || len(m.Extra) != sc.counts[2] {
		return nil // not the records scanMesh read
	}
	drop := func(rrs []dns.RR, from int) []dns.RR {
		if sc.drop == nil {
			return rrs
		}
		kept := rrs[:0]
		for i, rr := range rrs {
			if !sc.drop[from+i] {
				kept = append(kept, rr)
			}
		}
		return kept
	}
	na, nns := len(m.Answer), len(m.Ns)
	if sc.chain >= 0 {
		cname, ok := m.Answer[sc.chain].(*dns.CNAME)
		if !ok {
			return nil
		}
		m.Answer = drop(m.Answer, 0)
		m.Ns, m.Extra = nil, drop(m.Extra, na+nns)
		// The roster's answer for the target, as the slow path gives it.
		if h, found, zi := t.lookup(sc.target); found {
			roster := new(dns.Msg)
			s.answerName(t, roster, h, zi, cname.CNAME.Target, dns.RRToType(m.Question[0]))
			m.Answer = append(m.Answer, roster.Answer...)
			m.Ns = roster.Ns
			m.Rcode = dns.RcodeSuccess
		} else {
			m.Ns = []dns.RR{s.soaRR(t, &t.zones[zi-1])}
			m.Rcode = dns.RcodeNameError
		}
		m.AuthenticatedData = false // the roster's part is not the upstream's to vouch for
	} else {
		m.Answer, m.Ns, m.Extra = drop(m.Answer, 0), drop(m.Ns, na), drop(m.Extra, na+nns)
	}
	m.Data = nil
	if err := m.Pack(); err != nil {
		return nil
	}
	return m.Data
}

// readName appends to dst the lowercase wire form of the (possibly
// compressed) name at off in m, and returns it and the offset after the
// name at off. It reports false for a name it cannot read: out of m, a
// label over 63 bytes, a name over 255 bytes, pointers that loop.
func readName(m []byte, off int, dst []byte) ([]byte, int, bool) {
	start := len(dst)
	next := -1
	for hops := 0; ; {
		if off >= len(m) {
			return nil, 0, false
		}
		l := int(m[off])
		switch {
		case l == 0:
			if next < 0 {
				next = off + 1
			}
			return append(dst, 0), next, true
		case l&0xC0 == 0xC0:
			if off+2 > len(m) || hops > 127 {
				return nil, 0, false
			}
			if next < 0 {
				next = off + 2
			}
			off, hops = int(binary.BigEndian.Uint16(m[off:])&0x3FFF), hops+1
		case l > 63:
			return nil, 0, false
		default:
			if off+1+l > len(m) || len(dst)-start+1+l+1 > 255 {
				return nil, 0, false
			}
			dst = append(dst, byte(l))
			for _, c := range m[off+1 : off+1+l] {
				dst = append(dst, lowerASCII(c))
			}
			off += 1 + l
		}
	}
}
