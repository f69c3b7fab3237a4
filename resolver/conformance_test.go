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

// recorder counts the questions an upstream stub saw.
type recorder struct {
	mu   sync.Mutex // guards seen
	seen []string
}

func (r *recorder) wrap(answer func(*dns.Msg, bool) *dns.Msg) func(*dns.Msg, bool) *dns.Msg {
	return func(q *dns.Msg, tcp bool) *dns.Msg {
		r.mu.Lock()
		r.seen = append(r.seen, strings.ToLower(q.Question[0].Header().Name))
		r.mu.Unlock()
		return answer(q, tcp)
	}
}

func (r *recorder) saw(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.seen, name)
}

const soa7 = "internal. 5 IN SOA ns1.internal. hostmaster.internal. 7 3600 600 86400 5"

// TestConformance asks a real dig for every behaviour of issue 4 point 1.
func TestConformance(t *testing.T) {
	needDig(t)
	var rec recorder
	up := startStub(t, rec.wrap(upstreamAnswer))
	s, addr := newTestServer(t, testRoster(7), Config{
		Upstreams: []netip.AddrPort{up.addr},
		// Long enough for the in-process stub under -race on a loaded
		// machine; short enough that "silent upstream gives SERVFAIL" (one
		// upstream, one attempt) answers well within dig's +time=5.
		UpstreamTimeout: 2 * time.Second,
	})
	_ = s

	tests := []struct {
		name      string
		args      []string
		status    string
		flags     []string // must be present
		noFlags   []string // must be absent
		answer    []string // nil: not checked; empty: must be empty
		authority []string
		raw       []string // substrings of dig's output
	}{
		{name: "mesh A is authoritative", args: []string{"gitea.novox.internal", "A"},
			status: "NOERROR", flags: []string{"qr", "aa", "rd", "ra"},
			answer: []string{"gitea.novox.internal. 5 IN A 10.89.0.7"}, authority: []string{}},
		{name: "question case is echoed", args: []string{"GiTeA.NoVoX.InTeRnAl", "A"},
			status: "NOERROR", flags: []string{"aa"},
			answer: []string{"GiTeA.NoVoX.InTeRnAl. 5 IN A 10.89.0.7"}},
		{name: "name without the type is NODATA with SOA", args: []string{"gitea.novox.internal", "AAAA"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{}, authority: []string{soa7}},
		{name: "mesh AAAA", args: []string{"v6only.novox.internal", "AAAA"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"v6only.novox.internal. 5 IN AAAA fd7a::6"}},
		{name: "unknown name in zone is NXDOMAIN with SOA", args: []string{"nope.novox.internal", "A"},
			status: "NXDOMAIN", flags: []string{"aa"}, answer: []string{}, authority: []string{soa7}},
		{name: "unknown name in zone, other type", args: []string{"nope.novox.internal", "MX"},
			status: "NXDOMAIN", flags: []string{"aa"}, authority: []string{soa7}},
		{name: "empty non-terminal is NODATA", args: []string{"novox.internal", "A"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{}, authority: []string{soa7}},
		{name: "zone apex SOA", args: []string{"internal", "SOA"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{soa7}},
		{name: "mesh name, other type is NODATA", args: []string{"gitea.novox.internal", "TXT"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{}, authority: []string{soa7}},
		{name: "routed name outside the zones", args: []string{"searxng.zurag.be", "A"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"searxng.zurag.be. 5 IN A 100.64.0.9"}},
		{name: "routed name outside the zones, AAAA", args: []string{"SEARXNG.zurag.be", "AAAA"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"SEARXNG.zurag.be. 5 IN AAAA fd7a::9"}},
		{name: "sibling of a routed name is forwarded", args: []string{"other.zurag.be", "A"},
			status: "NOERROR", noFlags: []string{"aa"}, answer: []string{"other.zurag.be. 60 IN A 192.0.2.10"}},
		{name: "PTR of a mesh IPv4 address", args: []string{"-x", "10.89.0.7"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"7.0.89.10.in-addr.arpa. 5 IN PTR gitea.novox.internal."}},
		{name: "PTR of a mesh IPv6 address", args: []string{"-x", "fd7a::9"},
			status: "NOERROR", flags: []string{"aa"},
			answer: []string{"9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.a.7.d.f.ip6.arpa. 5 IN PTR searxng.zurag.be."}},
		{name: "PTR of another address is forwarded", args: []string{"-x", "192.0.2.99"},
			status: "NOERROR", noFlags: []string{"aa"}, answer: []string{"99.2.0.192.in-addr.arpa. 60 IN PTR upstream.example."}},
		{name: "other names are forwarded", args: []string{"example.com", "A"},
			status: "NOERROR", flags: []string{"ra"}, noFlags: []string{"aa"}, answer: []string{"example.com. 60 IN A 192.0.2.10"}},
		{name: "upstream NXDOMAIN passes through", args: []string{"nothing.example.com", "A"},
			status: "NXDOMAIN", noFlags: []string{"aa"}},
		{name: "silent upstream gives SERVFAIL", args: []string{"silent.example.com", "A"}, status: "SERVFAIL"},
		{name: "failing upstream gives SERVFAIL", args: []string{"fail.example.com", "A"}, status: "SERVFAIL"},
		{name: "upstream truncation passes through", args: []string{"+noedns", "+ignore", "big.example.com", "TXT"},
			status: "NOERROR", flags: []string{"tc"}, answer: []string{}},
		{name: "EDNS0 is honoured", args: []string{"gitea.novox.internal", "A"},
			status: "NOERROR", raw: []string{"; EDNS: version: 0, flags:; udp: 1232"}},
		{name: "no EDNS0 in, none out", args: []string{"+noedns", "gitea.novox.internal", "A"},
			status: "NOERROR", answer: []string{"gitea.novox.internal. 5 IN A 10.89.0.7"}},
		{name: "DO bit is echoed", args: []string{"+dnssec", "gitea.novox.internal", "A"},
			status: "NOERROR", raw: []string{"; EDNS: version: 0, flags: do; udp: 1232"}},
		{name: "EDNS version 1 gets BADVERS", args: []string{"+edns=1", "+noednsnegotiation", "gitea.novox.internal", "A"},
			status: "BADVERS"},
		{name: "over 512 bytes without EDNS is truncated", args: []string{"+noedns", "+ignore", "many.novox.internal", "A"},
			status: "NOERROR", flags: []string{"tc", "aa"}, answer: []string{}},
		{name: "within the advertised EDNS size it is not", args: []string{"+bufsize=1232", "+ignore", "many.novox.internal", "A"},
			status: "NOERROR", noFlags: []string{"tc"}},
		{name: "ANY gets a minimal answer (RFC 8482)", args: []string{"gitea.novox.internal", "ANY"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"gitea.novox.internal. 5 IN A 10.89.0.7"}},
		{name: "ANY elsewhere gets HINFO RFC8482", args: []string{"example.com", "ANY"},
			status: "NOERROR", answer: []string{`example.com. 3600 IN HINFO "RFC8482" ""`}},
		{name: "AXFR is refused", args: []string{"internal", "AXFR"}, raw: []string{"Transfer failed"}},
		{name: "TCP serves the same answers", args: []string{"+tcp", "gitea.novox.internal", "A"},
			status: "NOERROR", flags: []string{"aa"}, answer: []string{"gitea.novox.internal. 5 IN A 10.89.0.7"}},
		{name: "canary", args: []string{CanaryName("n0nce1", "internal"), "A"},
			status: "NOERROR", flags: []string{"aa"},
			answer: []string{"n0nce1.meshhost-probe.internal. 0 IN A " + CanaryAddress("n0nce1").String()}},
		{name: "canary has no AAAA", args: []string{CanaryName("n0nce1", "internal"), "AAAA"},
			status: "NOERROR", answer: []string{}, authority: []string{soa7}},
		{name: "deeper probe names do not exist", args: []string{"a.b.meshhost-probe.internal", "A"}, status: "NXDOMAIN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := dig(t, addr, tc.args...)
			if tc.status != "" && got.status != tc.status {
				t.Fatalf("dig %v: status %s, want %s\n%s", tc.args, got.status, tc.status, got.raw)
			}
			for _, f := range tc.flags {
				if !got.hasFlag(f) {
					t.Errorf("dig %v: flags %v lack %q", tc.args, got.flags, f)
				}
			}
			for _, f := range tc.noFlags {
				if got.hasFlag(f) {
					t.Errorf("dig %v: flags %v have %q", tc.args, got.flags, f)
				}
			}
			if tc.answer != nil {
				if diff := cmp.Diff(tc.answer, got.answer, cmpEmpty); diff != "" {
					t.Errorf("dig %v: answer (-want +got):\n%s\n%s", tc.args, diff, got.raw)
				}
			}
			if tc.authority != nil {
				if diff := cmp.Diff(tc.authority, got.authority, cmpEmpty); diff != "" {
					t.Errorf("dig %v: authority (-want +got):\n%s", tc.args, diff)
				}
			}
			for _, r := range tc.raw {
				if !strings.Contains(got.raw, r) {
					t.Errorf("dig %v: output lacks %q:\n%s", tc.args, r, got.raw)
				}
			}
		})
	}

	t.Run("names in a zone are never forwarded", func(t *testing.T) {
		for _, n := range []string{"nope.novox.internal.", "gitea.novox.internal.", "novox.internal.", "internal."} {
			if rec.saw(n) {
				t.Errorf("upstream was asked %q", n)
			}
		}
	})
	t.Run("truncated answers are complete over TCP", func(t *testing.T) {
		got := dig(t, addr, "+noedns", "many.novox.internal", "A") // dig retries over TCP on TC
		if len(got.answer) != 60 {
			t.Errorf("many.novox.internal: %d answers, want 60\n%s", len(got.answer), got.raw)
		}
		got = dig(t, addr, "+noedns", "big.example.com", "TXT")
		if len(got.answer) != 40 {
			t.Errorf("big.example.com: %d answers, want 40\n%s", len(got.answer), got.raw)
		}
	})
	t.Run("IXFR is refused", func(t *testing.T) {
		r := unpack(t, exchangeRaw(t, addr, packQuery(t, "internal.", dns.TypeIXFR, false)))
		if r.Rcode != dns.RcodeRefused {
			t.Errorf("IXFR: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
		r = unpack(t, exchangeRaw(t, addr, packQuery(t, "internal.", dns.TypeAXFR, false)))
		if r.Rcode != dns.RcodeRefused {
			t.Errorf("AXFR over UDP: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
	})
}

// cmpEmpty treats nil and empty slices alike.
var cmpEmpty = cmp.Transformer("nonil", func(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
})

func TestConformanceTTL(t *testing.T) {
	needDig(t)
	_, addr := newTestServer(t, testRoster(7), Config{TTL: 30 * time.Second, NegativeTTL: 2 * time.Second})
	got := dig(t, addr, "gitea.novox.internal", "A")
	if diff := cmp.Diff([]string{"gitea.novox.internal. 30 IN A 10.89.0.7"}, got.answer); diff != "" {
		t.Errorf("answer TTL (-want +got):\n%s", diff)
	}
	got = dig(t, addr, "nope.novox.internal", "A")
	if diff := cmp.Diff([]string{"internal. 2 IN SOA ns1.internal. hostmaster.internal. 7 3600 600 86400 2"}, got.authority); diff != "" {
		t.Errorf("negative TTL (-want +got):\n%s", diff)
	}
}

func TestConformanceNoUpstream(t *testing.T) {
	needDig(t)
	_, addr := newTestServer(t, testRoster(7), Config{})
	if got := dig(t, addr, "example.com", "A"); got.status != "SERVFAIL" {
		t.Errorf("no upstream: status %s, want SERVFAIL", got.status)
	}
	if got := dig(t, addr, "gitea.novox.internal", "A"); got.status != "NOERROR" {
		t.Errorf("no upstream, mesh name: status %s, want NOERROR", got.status)
	}
}

// TestConformanceAccess: clients outside Allow get REFUSED, for mesh names
// and forwarded names alike. Loopback is always allowed in production; the
// test turns that off to have a refused loopback client.
func TestConformanceAccess(t *testing.T) {
	needDig(t)
	up := startStub(t, upstreamAnswer)
	s, addr := newTestServer(t, testRoster(7), Config{
		Upstreams: []netip.AddrPort{up.addr},
		Allow:     []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
	})
	s.refuseLoopback.Store(true)
	for _, args := range [][]string{
		{"gitea.novox.internal", "A"},
		{"nope.novox.internal", "A"},
		{"example.com", "A"},
		{"+tcp", "gitea.novox.internal", "A"},
	} {
		got := dig(t, addr, append([]string{"-b", "127.0.0.1"}, args...)...)
		if got.status != "REFUSED" || len(got.answer) != 0 {
			t.Errorf("from 127.0.0.1, dig %v: status %s, %d answers; want REFUSED, none", args, got.status, len(got.answer))
		}
		got = dig(t, addr, append([]string{"-b", "127.0.0.2"}, args...)...)
		if got.status == "REFUSED" {
			t.Errorf("from allowed 127.0.0.2, dig %v: REFUSED", args)
		}
	}
	s.SetAllow(nil)
	if got := dig(t, addr, "-b", "127.0.0.2", "gitea.novox.internal", "A"); got.status != "REFUSED" {
		t.Errorf("after SetAllow(nil): status %s, want REFUSED", got.status)
	}
	s.refuseLoopback.Store(false)
	if got := dig(t, addr, "-b", "127.0.0.3", "gitea.novox.internal", "A"); got.status != "NOERROR" {
		t.Errorf("loopback allowed: status %s, want NOERROR", got.status)
	}
}

func TestConformanceLocalForward(t *testing.T) {
	needDig(t)
	up := startStub(t, upstreamAnswer)
	local := startStub(t, func(q *dns.Msg, tcp bool) *dns.Msg {
		r := upstreamAnswer(q, tcp)
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				a.A = rdata.A{Addr: netip.MustParseAddr("192.0.2.20")}
			}
		}
		return r
	})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}})
	s.SetLocalForward(netip.MustParsePrefix("127.0.0.0/8"), "dns.podman", local.addr)
	for _, tc := range []struct{ name, want string }{
		{"web.dns.podman", "192.0.2.20"},
		{"web", "192.0.2.20"},
		{"example.com", "192.0.2.10"},
		{"gitea.novox.internal", "10.89.0.7"},
	} {
		got := dig(t, addr, tc.name, "A")
		if len(got.answer) != 1 || !strings.HasSuffix(got.answer[0], " "+tc.want) {
			t.Errorf("with local forward, %s: answer %v, want %s", tc.name, got.answer, tc.want)
		}
	}
	s.SetLocalForward(netip.MustParsePrefix("127.0.0.0/8"), "dns.podman", netip.AddrPort{})
	got := dig(t, addr, "web.dns.podman", "A")
	if len(got.answer) != 1 || !strings.HasSuffix(got.answer[0], " 192.0.2.10") {
		t.Errorf("local forward removed, web.dns.podman: answer %v, want the upstream's 192.0.2.10", got.answer)
	}
}
