package resolver

import (
	"net/netip"
	"regexp"
	"testing"

	"codeberg.org/miekg/dns"
	"github.com/google/go-cmp/cmp"
)

// TestFastMatchesSlow: the fast path must answer exactly what the full
// miekg/dns path answers, for every query it takes.
func TestFastMatchesSlow(t *testing.T) {
	s, err := New(safeConfig(t, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(testRoster(7)); err != nil {
		t.Fatal(err)
	}
	tbl := s.table.Load()
	tests := []struct {
		name  string
		qtype uint16
		edns  bool
		do    bool
		fast  bool // whether the fast path must take it
	}{
		{"gitea.novox.internal.", dns.TypeA, false, false, true},
		{"GITEA.novox.Internal.", dns.TypeA, true, false, true},
		{"gitea.novox.internal.", dns.TypeAAAA, true, true, true},
		{"v6only.novox.internal.", dns.TypeAAAA, false, false, true},
		{"searxng.zurag.be.", dns.TypeAAAA, true, false, true},
		{"searxng.zurag.be.", dns.TypeA, false, false, true},
		{"nope.novox.internal.", dns.TypeA, true, false, true},
		{"novox.internal.", dns.TypeA, false, false, true},
		{"internal.", dns.TypeAAAA, false, false, true},
		{"many.novox.internal.", dns.TypeA, true, false, true},
		{"many.novox.internal.", dns.TypeA, false, false, false}, // too big: slow path truncates
		{"x.meshhost-probe.internal.", dns.TypeA, false, false, false},
		{"example.com.", dns.TypeA, false, false, false},
		{"gitea.novox.internal.", dns.TypeMX, false, false, false},
	}
	for _, tc := range tests {
		m := dns.NewMsg(tc.name, tc.qtype)
		m.ID = 77
		m.RecursionDesired = true
		if tc.edns || tc.do {
			m.UDPSize = 1232
			m.Security = tc.do
		}
		if err := m.Pack(); err != nil {
			t.Fatal(err)
		}
		req := m.Data
		var sc scratch
		buf := make([]byte, 4096)
		fast, ok := tbl.fast(req, &sc, buf, true)
		if ok != tc.fast {
			t.Errorf("fast(%s %s) took it = %v, want %v", tc.name, dns.TypeToString[tc.qtype], ok, tc.fast)
			continue
		}
		if !ok {
			continue
		}
		slow, job := s.slow(tbl, req, netip.MustParseAddr("127.0.0.1"), true)
		if job != nil {
			t.Errorf("slow(%s) forwarded a question the fast path answers", tc.name)
			continue
		}
		// The slow path compresses names; the fast path writes the SOA
		// owner in full. Compare everything but the size.
		noSize := func(m *dns.Msg) string { return dataSize.ReplaceAllString(m.String(), "") }
		if diff := cmp.Diff(noSize(unpack(t, slow)), noSize(unpack(t, fast))); diff != "" {
			t.Errorf("%s %s: fast path differs from the slow path (-slow +fast):\n%s", tc.name, dns.TypeToString[tc.qtype], diff)
		}
	}
}

func TestParseQuery(t *testing.T) {
	good := packQuery(t, "A.b.", dns.TypeA, true)
	tests := []struct {
		name string
		req  []byte
		ok   bool
	}{
		{"plain", packQuery(t, "a.b.", dns.TypeA, false), true},
		{"edns", good, true},
		{"short", good[:11], false},
		{"truncated question", good[:15], false},
		{"trailing garbage", append(append([]byte(nil), packQuery(t, "a.b.", dns.TypeA, false)...), 0), false},
		{"response", func() []byte { b := append([]byte(nil), good...); b[2] |= 0x80; return b }(), false},
		{"two questions", func() []byte { b := append([]byte(nil), good...); b[5] = 2; return b }(), false},
		{"compression pointer", []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1}, false},
		{"class CH", []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 3}, false},
		{"EDNS version 1", func() []byte { b := append([]byte(nil), good...); b[len(b)-5] = 1; return b }(), false},
	}
	for _, tc := range tests {
		var sc scratch
		if got := parseQuery(tc.req, &sc); got != tc.ok {
			t.Errorf("parseQuery(%s) = %v, want %v", tc.name, got, tc.ok)
		}
	}
	var sc scratch
	parseQuery(good, &sc)
	if got, want := string(sc.q.qname), "\x01a\x01b\x00"; got != want {
		t.Errorf("parseQuery lowercased name = %q, want %q", got, want)
	}
}

func TestInZoneWire(t *testing.T) {
	w := func(s string) []byte { b, _ := wireName(s); return b }
	tests := []struct {
		name, zone string
		want       bool
	}{
		{"a.internal", "internal", true},
		{"internal", "internal", true},
		{"xinternal", "internal", false},
		{"a.b.internal", "b.internal", true},
		{"a.xb.internal", "b.internal", false},
		{"internal", "a.internal", false},
	}
	for _, tc := range tests {
		if got := inZoneWire(w(tc.name), w(tc.zone)); got != tc.want {
			t.Errorf("inZoneWire(%q, %q) = %v, want %v", tc.name, tc.zone, got, tc.want)
		}
	}
}

func TestIsProbe(t *testing.T) {
	w := func(s string) []byte { b, _ := wireName(s); return b }
	tests := []struct {
		name string
		want bool
	}{
		{"abc.meshhost-probe.internal", true},
		{"meshhost-probe.internal", false},
		{"a.b.meshhost-probe.internal", false},
		{"abc.meshhost-probx.internal", false},
		{"abc.internal", false},
	}
	for _, tc := range tests {
		if got := isProbe(w(tc.name), w("internal")); got != tc.want {
			t.Errorf("isProbe(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

var dataSize = regexp.MustCompile(`DATA SIZE: \d+`)
