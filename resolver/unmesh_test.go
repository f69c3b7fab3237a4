package resolver

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
	"github.com/google/go-cmp/cmp"
)

func cnameRR(name, target string) dns.RR {
	return &dns.CNAME{Hdr: dns.Header{Name: name, Class: dns.ClassINET, TTL: 300}, CNAME: rdata.CNAME{Target: target}}
}

func aaaaRR(name, addr string) dns.RR {
	return &dns.AAAA{Hdr: dns.Header{Name: name, Class: dns.ClassINET, TTL: 300}, AAAA: rdata.AAAA{Addr: netip.MustParseAddr(addr)}}
}

func nsRR(name, host string) dns.RR {
	return &dns.NS{Hdr: dns.Header{Name: name, Class: dns.ClassINET, TTL: 300}, NS: rdata.NS{Ns: host}}
}

// rrStrings is each record of rrs in presentation form, one space apart,
// without its TTL unless ttl.
func rrStrings(rrs []dns.RR, ttl bool) []string {
	var out []string
	for _, rr := range rrs {
		f := strings.Fields(rr.String())
		if !ttl && len(f) > 1 {
			f = append(f[:1], f[2:]...)
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}

// noTTL is rrStrings(rrs, false) for records in presentation form.
func noTTL(rrs []string) []string {
	var out []string
	for _, rr := range rrs {
		f := strings.Fields(rr)
		out = append(out, strings.Join(append(f[:1:1], f[2:]...), " "))
	}
	return out
}

// TestForwardNeverAnswersForTheMesh: a forwarded reply for an outside name
// reaches the client (and the cache) without the upstream's records for
// mesh names, in any section; when its CNAME chain leads into the mesh,
// the chain is kept and the roster answers for its target, and that reply
// is not cached. The roster's TTL is 5 s, its zone "internal".
func TestForwardNeverAnswersForTheMesh(t *testing.T) {
	type upReply struct {
		rcode      uint16
		ad         bool
		answer, ns []dns.RR
		extra      []dns.RR
	}
	rootSOA := &dns.SOA{Hdr: dns.Header{Name: ".", Class: dns.ClassINET, TTL: 86400},
		SOA: rdata.SOA{Ns: "a.root-servers.net.", Mbox: "nstld.verisign-grs.com.", Serial: 1, Refresh: 1800, Retry: 900, Expire: 604800, Minttl: 86400}}
	for _, tc := range []struct {
		name  string
		qtype uint16
		up    upReply
		// want: the reply's rcode and sections, and whether the second
		// question is answered from the cache.
		rcode             uint16
		answer, ns, extra []string
		cached            bool
	}{
		{
			name:  "CNAME into the zone with the upstream's A for its target",
			qtype: dns.TypeA,
			up:    upReply{answer: []dns.RR{cnameRR("Q.example.com.", "gitea.novox.internal."), aRR("gitea.novox.internal.", 300, "6.6.6.6")}},
			answer: []string{
				"Q.example.com. 300 IN CNAME gitea.novox.internal.",
				"gitea.novox.internal. 5 IN A 10.89.0.7",
			},
		},
		{
			name:  "CNAME into the zone that public DNS denies (NXDOMAIN, the root's SOA)",
			qtype: dns.TypeA,
			up:    upReply{rcode: dns.RcodeNameError, ad: true, answer: []dns.RR{cnameRR("Q.example.com.", "GITEA.novox.internal.")}, ns: []dns.RR{rootSOA}},
			answer: []string{
				"Q.example.com. 300 IN CNAME GITEA.novox.internal.",
				"GITEA.novox.internal. 5 IN A 10.89.0.7",
			},
		},
		{
			name:   "CNAME to a name of the zone the roster lacks",
			qtype:  dns.TypeA,
			up:     upReply{answer: []dns.RR{cnameRR("Q.example.com.", "nobody.novox.internal."), aRR("nobody.novox.internal.", 300, "6.6.6.6")}},
			rcode:  dns.RcodeNameError,
			answer: []string{"Q.example.com. 300 IN CNAME nobody.novox.internal."},
			ns:     []string{"internal. 30 IN SOA ns1.internal. hostmaster.internal. 7 3600 600 86400 30"},
		},
		{
			name:   "AAAA through a CNAME to a name with IPv4 only: NODATA",
			qtype:  dns.TypeAAAA,
			up:     upReply{answer: []dns.RR{cnameRR("Q.example.com.", "gitea.novox.internal."), aaaaRR("gitea.novox.internal.", "2001:db8::66")}},
			answer: []string{"Q.example.com. 300 IN CNAME gitea.novox.internal."},
			ns:     []string{"internal. 30 IN SOA ns1.internal. hostmaster.internal. 7 3600 600 86400 30"},
		},
		{
			name:  "AAAA through a CNAME into the zone",
			qtype: dns.TypeAAAA,
			up:    upReply{rcode: dns.RcodeNameError, answer: []dns.RR{cnameRR("Q.example.com.", "v6only.novox.internal.")}, ns: []dns.RR{rootSOA}},
			answer: []string{
				"Q.example.com. 300 IN CNAME v6only.novox.internal.",
				"v6only.novox.internal. 5 IN AAAA fd7a::6",
			},
		},
		{
			name:   "a question for the CNAME itself: answered by the CNAME, not cached (it names the mesh)",
			qtype:  dns.TypeCNAME,
			up:     upReply{answer: []dns.RR{cnameRR("Q.example.com.", "gitea.novox.internal.")}, ns: []dns.RR{nsRR("example.com.", "ns.example.com.")}},
			answer: []string{"Q.example.com. 300 IN CNAME gitea.novox.internal."},
			ns:     []string{"example.com. 300 IN NS ns.example.com."},
		},
		{
			name:  "a chain through an outside name to a routed name outside the zones",
			qtype: dns.TypeA,
			up: upReply{answer: []dns.RR{
				cnameRR("Q.example.com.", "mid.example.net."),
				cnameRR("mid.example.net.", "searxng.zurag.be."),
				aRR("searxng.zurag.be.", 300, "6.6.6.6"),
			}},
			answer: []string{
				"Q.example.com. 300 IN CNAME mid.example.net.",
				"mid.example.net. 300 IN CNAME searxng.zurag.be.",
				"searxng.zurag.be. 5 IN A 100.64.0.9",
			},
		},
		{
			name:  "mesh names in the authority and additional sections",
			qtype: dns.TypeA,
			up: upReply{
				answer: []dns.RR{aRR("Q.example.com.", 300, "192.0.2.10")},
				ns:     []dns.RR{nsRR("example.com.", "ns.example.com."), nsRR("novox.internal.", "ns.example.com.")},
				extra:  []dns.RR{aRR("gitea.novox.internal.", 300, "6.6.6.6"), aRR("ns.example.com.", 300, "192.0.2.53"), aRR("searxng.zurag.be.", 300, "6.6.6.6")},
			},
			answer: []string{"Q.example.com. 300 IN A 192.0.2.10"},
			ns:     []string{"example.com. 300 IN NS ns.example.com."},
			extra:  []string{"ns.example.com. 300 IN A 192.0.2.53"},
			cached: true,
		},
		{
			name:   "nothing of the mesh: passed as it came",
			qtype:  dns.TypeA,
			up:     upReply{answer: []dns.RR{cnameRR("Q.example.com.", "cdn.example.net."), aRR("cdn.example.net.", 300, "192.0.2.11")}},
			answer: []string{"Q.example.com. 300 IN CNAME cdn.example.net.", "cdn.example.net. 300 IN A 192.0.2.11"},
			cached: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex // guards asked
			asked := 0
			up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
				mu.Lock()
				asked++
				mu.Unlock()
				r := new(dns.Msg)
				r.ID, r.Response, r.RecursionDesired, r.RecursionAvailable = q.ID, true, q.RecursionDesired, true
				r.Rcode, r.AuthenticatedData = tc.up.rcode, tc.up.ad
				r.Question = q.Question
				r.Answer, r.Ns, r.Extra = tc.up.answer, tc.up.ns, tc.up.extra
				if err := r.Pack(); err != nil {
					panic(err)
				}
				u.conn.WriteToUDPAddrPort(r.Data, from)
			})
			s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, NegativeTTL: 30 * time.Second})
			type reply struct {
				Rcode             uint16
				AD                bool
				Answer, Ns, Extra []string
			}
			for i, from := range []string{"the upstream", "the cache"} {
				m := unpack(t, exchangeRaw(t, addr, packQuery(t, "Q.example.com.", tc.qtype, false)))
				// The second time, TTLs may have counted down.
				withTTL := i == 0
				if i == 1 && !tc.cached {
					from = "the upstream again"
				}
				got := reply{m.Rcode, m.AuthenticatedData, rrStrings(m.Answer, withTTL), rrStrings(m.Ns, withTTL), rrStrings(m.Extra, withTTL)}
				want := reply{tc.rcode, false, tc.answer, tc.ns, tc.extra}
				if !withTTL {
					want.Answer, want.Ns, want.Extra = noTTL(want.Answer), noTTL(want.Ns), noTTL(want.Extra)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("reply from %s (-want +got):\n%s", from, diff)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if want := map[bool]int{true: 1, false: 2}[tc.cached]; asked != want {
				t.Errorf("upstream asked %d times for two questions, want %d (cached: %v)", asked, want, tc.cached)
			}
			checkCacheHoldsNoMeshName(t, s)
		})
	}
}

// FuzzUnmesh feeds unmesh arbitrary upstream replies: it must never panic,
// and what it returns holds no record of a mesh name but the roster's own
// (its addresses, the zone's SOA).
func FuzzUnmesh(f *testing.F) {
	pack := func(rcode uint16, answer, ns, extra []dns.RR) []byte {
		m := dns.NewMsg("q.example.com.", dns.TypeA)
		m.ID, m.Response, m.Rcode = 0x1234, true, rcode
		m.Answer, m.Ns, m.Extra = answer, ns, extra
		m.UDPSize = 1232
		if err := m.Pack(); err != nil {
			f.Fatal(err)
		}
		return m.Data
	}
	f.Add(pack(dns.RcodeSuccess, []dns.RR{cnameRR("q.example.com.", "gitea.novox.internal."), aRR("gitea.novox.internal.", 300, "6.6.6.6")}, nil, nil))
	f.Add(pack(dns.RcodeNameError, []dns.RR{cnameRR("q.example.com.", "nobody.novox.internal.")}, []dns.RR{soaRR("internal.", 60, 60)}, nil))
	f.Add(pack(dns.RcodeSuccess, []dns.RR{cnameRR("q.example.com.", "mid.example.net."), cnameRR("mid.example.net.", "searxng.zurag.be.")}, nil, []dns.RR{aRR("searxng.zurag.be.", 300, "6.6.6.6")}))
	f.Add(pack(dns.RcodeSuccess, []dns.RR{aRR("q.example.com.", 300, "192.0.2.1")}, []dns.RR{nsRR("novox.internal.", "ns.example.com.")}, []dns.RR{aaaaRR("v6only.novox.internal.", "2001:db8::6")}))
	s, err := New(safeConfig(f, Config{}))
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(testRoster(7)); err != nil {
		f.Fatal(err)
	}
	t := s.table.Load()
	roster := testRoster(7)
	req := packQuery(f, "q.example.com.", dns.TypeA, true)
	f.Fuzz(func(tt *testing.T, resp []byte) {
		if len(resp) < headerLen {
			return
		}
		out, _ := s.unmesh(t, req, append([]byte(nil), resp...))
		m := &dns.Msg{Data: append([]byte(nil), out...)}
		if m.Unpack() != nil {
			return
		}
		for _, rr := range slices.Concat(m.Answer, m.Ns, m.Extra) {
			owner := rr.Header().Name
			if strings.ContainsFunc(owner, func(r rune) bool { return r > 0x7f || r == '\\' }) {
				continue // a name lookupName would read otherwise than the wire
			}
			if _, found, zi := t.lookupName(owner); !found && zi == 0 {
				continue
			}
			switch rr := rr.(type) {
			case *dns.A:
				if slices.Contains(roster.Names[strings.ToLower(strings.TrimSuffix(owner, "."))], rr.A.Addr) {
					continue
				}
			case *dns.AAAA:
				if slices.Contains(roster.Names[strings.ToLower(strings.TrimSuffix(owner, "."))], rr.AAAA.Addr) {
					continue
				}
			case *dns.SOA:
				if rr.String() == s.soaRR(t, &t.zones[0]).String() {
					continue
				}
			}
			tt.Fatalf("reply holds the upstream's record of a mesh name: %v\nupstream %x\nserved %x", rr, resp, out)
		}
	})
}

// TestReadName: names are read through compression pointers, lowercased
// in ASCII only, and refused when they leave the message, loop, or exceed
// the limits of a name.
func TestReadName(t *testing.T) {
	long := []byte{}
	for range 5 {
		long = append(long, 63)
		long = append(long, strings.Repeat("a", 63)...)
	}
	long = append(long, 0) // 321 bytes
	for _, tc := range []struct {
		name string
		m    []byte
		off  int
		want []byte // nil: refused
		next int
	}{
		{"plain, lowercased", []byte("\x03WwW\x02\xc3\x89\x00"), 0, []byte("\x03www\x02\xc3\x89\x00"), 8},
		{"pointer", []byte("\x01a\x00\x01B\xc0\x00"), 3, []byte("\x01b\x01a\x00"), 7},
		{"pointer first", []byte("\x01a\x00\xc0\x00"), 3, []byte("\x01a\x00"), 5},
		{"pointer loop", []byte("\x01a\xc0\x00"), 0, nil, 0},
		{"pointer out of the message", []byte("\x01a\xc0\x10"), 0, nil, 0},
		{"cut pointer", []byte("\x01a\xc0"), 0, nil, 0},
		{"cut label", []byte("\x05ab"), 0, nil, 0},
		{"no root label", []byte("\x01a"), 0, nil, 0},
		{"label over 63 bytes", []byte("\x40a\x00"), 0, nil, 0},
		{"name over 255 bytes", long, 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next, ok := readName(tc.m, tc.off, nil)
			if tc.want == nil {
				if ok {
					t.Errorf("readName(%q, %d) = %q, want refused", tc.m, tc.off, got)
				}
				return
			}
			if !ok || string(got) != string(tc.want) || next != tc.next {
				t.Errorf("readName(%q, %d) = %q, %d, %v; want %q, %d", tc.m, tc.off, got, next, ok, tc.want, tc.next)
			}
		})
	}
}
