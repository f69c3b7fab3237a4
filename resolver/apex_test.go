package resolver

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"codeberg.org/miekg/dns"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ask asks s one question in process and returns the reply.
func ask(t testing.TB, s *Server, name string, qtype uint16) *dns.Msg {
	t.Helper()
	var sc scratch
	resp := s.handle(packQuery(t, name, qtype, true), netip.MustParseAddr("127.0.0.1"), true, &sc, make([]byte, 4096), replyTo{})
	if resp == nil {
		t.Fatalf("%s %s: no reply", name, dns.TypeToString[qtype])
	}
	return unpack(t, resp)
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, strings.Join(strings.Fields(rr.String()), " "))
	}
	return out
}

// TestZoneApexName is issue 17's third bug: a roster name equal to one of
// its zones (a public domain routed as a name while also a zone) panicked
// the table build, and with it the agent, at every start. Such a name is
// the zone's apex: it answers its addresses, the apex keeps its SOA, the
// names below still resolve, reverse lookups find it, and it survives a
// save and a restart. Whatever the case or trailing dot of the name and of
// the zone, and for reverse zones too.
func TestZoneApexName(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name  string
		zones []string
		names map[string][]netip.Addr
		apex  string // the apex name asked for, canonical
		addr  netip.Addr
		ptr   string // the reverse name of addr
	}{
		{"zone", []string{"internal"}, map[string][]netip.Addr{"internal": {a("100.64.0.1")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"internal", a("100.64.0.1"), "1.0.64.100.in-addr.arpa."},
		{"name with a trailing dot and capitals", []string{"internal"}, map[string][]netip.Addr{"Internal.": {a("100.64.0.1")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"internal", a("100.64.0.1"), "1.0.64.100.in-addr.arpa."},
		{"zone with a trailing dot and capitals", []string{"INTERNAL."}, map[string][]netip.Addr{"internal": {a("100.64.0.1")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"internal", a("100.64.0.1"), "1.0.64.100.in-addr.arpa."},
		{"public domain", []string{"zurag.be", "internal"}, map[string][]netip.Addr{"zurag.be": {a("100.64.0.9"), a("fd7a::9")}, "searxng.zurag.be": {a("100.64.0.10")}},
			"zurag.be", a("fd7a::9"), "9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.a.7.d.f.ip6.arpa."},
		{"inner zone", []string{"internal", "novox.internal"}, map[string][]netip.Addr{"novox.internal": {a("10.89.0.1")}, "internal": {a("10.89.0.2")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"novox.internal", a("10.89.0.1"), "1.0.89.10.in-addr.arpa."},
		{"reverse zone", []string{"internal", "10.in-addr.arpa"}, map[string][]netip.Addr{"10.in-addr.arpa": {a("10.0.0.53")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"10.in-addr.arpa", a("10.0.0.53"), "53.0.0.10.in-addr.arpa."},
		{"reverse zone of IPv6", []string{"internal", "a.7.d.f.ip6.arpa"}, map[string][]netip.Addr{"a.7.d.f.ip6.arpa": {a("fd7a::53")}, "gitea.novox.internal": {a("10.89.0.7")}},
			"a.7.d.f.ip6.arpa", a("fd7a::53"), "3.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.a.7.d.f.ip6.arpa."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &spec.Roster{Generation: 3, Zones: tc.zones, Names: tc.names}
			if err := r.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			state := filepath.Join(t.TempDir(), "roster.json")
			s1, err := New(safeConfig(t, Config{StatePath: state}))
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Close()
			if err := s1.Update(r); err != nil {
				t.Fatalf("Update: %v", err)
			}
			// After a restart, from the saved roster.
			s2, err := New(safeConfig(t, Config{StatePath: state}))
			if err != nil {
				t.Fatalf("New from the saved roster: %v", err)
			}
			defer s2.Close()
			for i, s := range []*Server{s1, s2} {
				qtype := dns.TypeA
				if tc.addr.Is6() {
					qtype = dns.TypeAAAA
				}
				m := ask(t, s, tc.apex+".", qtype)
				if m.Rcode != dns.RcodeSuccess || !slices.ContainsFunc(answers(m), func(s string) bool { return strings.HasSuffix(s, " "+tc.addr.String()) }) {
					t.Errorf("server %d: %s %s = %s %v, want %s", i, tc.apex, dns.TypeToString[qtype], dns.RcodeToString[m.Rcode], answers(m), tc.addr)
				}
				if m := ask(t, s, strings.ToUpper(tc.apex)+".", dns.TypeSOA); len(m.Answer) != 1 || dns.RRToType(m.Answer[0]) != dns.TypeSOA {
					t.Errorf("server %d: %s SOA = %v, want the zone's SOA", i, tc.apex, answers(m))
				}
				if m := ask(t, s, tc.ptr, dns.TypePTR); !slices.ContainsFunc(answers(m), func(s string) bool { return strings.HasSuffix(s, " "+tc.apex+".") }) {
					t.Errorf("server %d: %s PTR = %s %v, want %s", i, tc.ptr, dns.RcodeToString[m.Rcode], answers(m), tc.apex)
				}
				for n, addrs := range tc.names {
					cn := spec.CanonicalName(n)
					if cn == tc.apex || !addrs[0].Is4() {
						continue
					}
					if m := ask(t, s, cn+".", dns.TypeA); len(m.Answer) == 0 {
						t.Errorf("server %d: %s A = %s, want %v", i, cn, dns.RcodeToString[m.Rcode], addrs)
					}
				}
				if diff := cmp.Diff(r.Normalize(), s.Roster(), cmpAddr); diff != "" {
					t.Errorf("server %d: Roster() (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// TestReverseZonePTR: a reverse zone of the roster's does not hide the
// reverse names of roster addresses under it (NXDOMAIN for them would be
// authoritative, and wrong); other addresses in it do not exist.
func TestReverseZonePTR(t *testing.T) {
	r := testRoster(2)
	r.Zones = append(r.Zones, "10.in-addr.arpa")
	s, _ := newTestServer(t, r, Config{})
	if m := ask(t, s, "7.0.89.10.in-addr.arpa.", dns.TypePTR); m.Rcode != dns.RcodeSuccess || !slices.Equal(answers(m), []string{"7.0.89.10.in-addr.arpa. 5 IN PTR gitea.novox.internal."}) {
		t.Errorf("PTR of a roster address in a reverse zone = %s %v", dns.RcodeToString[m.Rcode], answers(m))
	}
	if m := ask(t, s, "8.0.89.10.in-addr.arpa.", dns.TypePTR); m.Rcode != dns.RcodeNameError || !m.Authoritative {
		t.Errorf("PTR of an unknown address in a reverse zone = %s (aa %v), want an authoritative NXDOMAIN", dns.RcodeToString[m.Rcode], m.Authoritative)
	}
}

// TestCompileRefusalsCaughtByValidate: every roster the table build refuses,
// spec.Roster.Validate refuses first, naming the entry, so a declaration
// carrying it is refused where it is parsed instead of failing every pass
// of every machine.
func TestCompileRefusalsCaughtByValidate(t *testing.T) {
	many := make([]netip.Addr, maxAddrs+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
	}
	zones := make([]string, 1<<16-1)
	for i := range zones {
		zones[i] = fmt.Sprintf("z%d", i)
	}
	for _, tc := range []struct {
		name   string
		roster *spec.Roster
		path   string
	}{
		{"addresses of one name", &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{"a.internal": many}}, `names["a.internal"]`},
		{"zones", &spec.Roster{Generation: 1, Zones: zones, Names: map[string][]netip.Addr{}}, `zones`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := buildTable(tc.roster, 5, 5, nil); err == nil {
				t.Fatal("buildTable accepts it: nothing to check")
			}
			err := tc.roster.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.path+": ") {
				t.Errorf("Validate = %v, want a fault at %s", err, tc.path)
			}
		})
	}
}

// FuzzRosterTable feeds random rosters, zones included, to Validate and,
// when it accepts them, to the table build and a swap: nothing may panic,
// every roster Validate accepts must compile, and the table must answer
// each name with its addresses, find it again from each address, and give
// back the roster it was built from.
//
// zones is a comma-separated list; names has one name a line, then '=',
// then addresses, comma-separated.
func FuzzRosterTable(f *testing.F) {
	f.Add("internal", "internal=100.64.0.1\ngitea.novox.internal=10.89.0.7")
	f.Add("Internal.", "INTERNAL.=100.64.0.1,fd7a::1")
	f.Add("internal,novox.internal", "novox.internal=10.0.0.1\ninternal=10.0.0.2\na.b.c.novox.internal=10.0.0.3")
	f.Add("10.in-addr.arpa,internal", "10.in-addr.arpa=10.0.0.53\n7.0.89.10.in-addr.arpa=10.89.0.7")
	f.Add("zurag.be", "zurag.be=100.64.0.9\nsearxng.zurag.be=100.64.0.9")
	f.Add("", "a=10.0.0.1\nb.c=fd00::1")
	f.Add("a.b", "x.y.a.b=10.0.0.1\ny.a.b=10.0.0.2")
	s, err := New(safeConfig(f, Config{}))
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	var gen atomic.Uint64
	f.Fuzz(func(t *testing.T, zones, names string) {
		r := &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}}
		if zones != "" {
			r.Zones = strings.Split(zones, ",")
		}
		for line := range strings.SplitSeq(names, "\n") {
			name, list, _ := strings.Cut(line, "=")
			var addrs []netip.Addr
			for a := range strings.SplitSeq(list, ",") {
				if addr, err := netip.ParseAddr(a); err == nil {
					addrs = append(addrs, addr)
				}
			}
			r.Names[name] = addrs
		}
		if r.Validate() != nil {
			return
		}
		tb, err := buildTable(r, 5, 5, nil)
		if err != nil {
			t.Fatalf("Validate accepts the roster, buildTable refuses it: %v", err)
		}
		want := r.Normalize()
		if diff := cmp.Diff(want, tb.roster(nil), cmpAddr); diff != "" {
			t.Fatalf("the table's roster (-want +got):\n%s", diff)
		}
		for name, addrs := range want.Names {
			h, found, _ := tb.lookupName(name)
			if got := addrList(h.a4, h.a6); !found || !slices.Equal(got, addrs) {
				t.Fatalf("lookup %q: %v (found %v), want %v", name, got, found, addrs)
			}
			for _, a := range addrs {
				if !slices.Contains(tb.reverse(a), name) {
					t.Fatalf("reverse %s = %v, want %q among them", a, tb.reverse(a), name)
				}
			}
		}
		back, err := specjson.ParseRoster(tb.appendJSON(nil, nil))
		if err != nil {
			t.Fatalf("the table's roster file does not parse: %v", err)
		}
		if diff := cmp.Diff(want, back, cmpAddr); diff != "" {
			t.Fatalf("the table's roster file (-want +got):\n%s", diff)
		}
		r.Generation = gen.Add(1)
		if err := s.Update(r); err != nil {
			t.Fatalf("Update: %v", err)
		}
		for name := range want.Names {
			ask(t, s, name+".", dns.TypeA)
			ask(t, s, name+".", dns.TypeSOA)
		}
	})
}
