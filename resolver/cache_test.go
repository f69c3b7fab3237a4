package resolver

import (
	"fmt"
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshhost/meshhost/spec"
)

// cacheReply builds an upstream reply to name/qtype: rcode, answer records
// and authority records, with an OPT record when edns.
func cacheReply(t testing.TB, name string, rcode uint16, answer, ns []dns.RR, edns bool) []byte {
	t.Helper()
	m := dns.NewMsg(name, dns.TypeA)
	m.ID, m.Response, m.RecursionAvailable = 0x4242, true, true
	m.Rcode = rcode
	m.Answer, m.Ns = answer, ns
	if edns {
		m.UDPSize = 4096
	}
	if err := m.Pack(); err != nil {
		t.Fatal(err)
	}
	return m.Data
}

func aRR(name string, ttl uint32, addr string) dns.RR {
	return &dns.A{Hdr: dns.Header{Name: name, Class: dns.ClassINET, TTL: ttl}, A: rdata.A{Addr: netip.MustParseAddr(addr)}}
}

func soaRR(zone string, ttl, minimum uint32) dns.RR {
	return &dns.SOA{Hdr: dns.Header{Name: zone, Class: dns.ClassINET, TTL: ttl},
		SOA: rdata.SOA{Ns: "ns." + zone, Mbox: "hostmaster." + zone, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: minimum}}
}

// testCache is a cache with its own metrics, and a client's query to it.
func testCache(t testing.TB, size int, maxTTL, maxNeg time.Duration) *cache {
	c := newCache(size, maxTTL, maxNeg)
	m, err := newMetrics(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	c.metrics = m
	return c
}

func notMesh([]byte) bool { return false }

// cacheAsk asks c for name (A, with or without EDNS) as a client would,
// and returns the reply unpacked, or nil on a miss.
func cacheAsk(t *testing.T, c *cache, name string, edns bool) *dns.Msg {
	t.Helper()
	req := packQuery(t, name, dns.TypeA, edns)
	var sc scratch
	if !parseQuery(req, &sc) {
		t.Fatalf("query for %s does not parse", name)
	}
	resp, ok := c.answer(cacheKey(req, &sc), req, &sc.q, make([]byte, respBufSize), 65535, time.Now())
	if !ok {
		return nil
	}
	return unpack(t, append([]byte(nil), resp...))
}

// cacheStore stores reply as the answer to name's A question.
func cacheStore(t *testing.T, c *cache, name string, reply []byte) {
	t.Helper()
	req := packQuery(t, name, dns.TypeA, false)
	var sc scratch
	parseQuery(req, &sc)
	c.store(cacheKey(req, &sc), reply, time.Now(), notMesh)
}

func ttls(m *dns.Msg) []uint32 {
	var out []uint32
	for _, s := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range s {
			out = append(out, rr.Header().TTL)
		}
	}
	return out
}

// TestCacheTTL: answers are served with their TTLs lowered by their age,
// capped by the maximum, and expire with their smallest TTL.
func TestCacheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCache(t, 100, time.Hour, 5*time.Minute)
		cacheStore(t, c, "a.example.com.", cacheReply(t, "a.example.com.", dns.RcodeSuccess,
			[]dns.RR{aRR("a.example.com.", 60, "192.0.2.1"), aRR("a.example.com.", 30, "192.0.2.2")}, nil, false))
		cacheStore(t, c, "long.example.com.", cacheReply(t, "long.example.com.", dns.RcodeSuccess,
			[]dns.RR{aRR("long.example.com.", 86400, "192.0.2.3")}, nil, false))
		time.Sleep(10 * time.Second)
		m := cacheAsk(t, c, "A.example.COM.", false)
		if m == nil {
			t.Fatal("a.example.com: miss after 10 s of a 30 s TTL")
		}
		if got := ttls(m); len(got) != 2 || got[0] != 50 || got[1] != 20 {
			t.Errorf("TTLs after 10 s: %v, want [50 20]", got)
		}
		if m.Question[0].Header().Name != "A.example.COM." || m.ID != 0x1234 || len(m.Answer) != 2 {
			t.Errorf("reply: question %q, ID %#x, %d answers", m.Question[0].Header().Name, m.ID, len(m.Answer))
		}
		if got := ttls(cacheAsk(t, c, "long.example.com.", false)); got[0] != 3600-10 {
			t.Errorf("TTL 86400 capped to an hour, after 10 s: %v, want [3590]", got)
		}
		time.Sleep(20*time.Second - time.Millisecond)
		if m := cacheAsk(t, c, "a.example.com.", false); m == nil || ttls(m)[1] != 1 {
			t.Errorf("just before the smallest TTL ran out: %v, want TTLs ending in 1", m)
		}
		time.Sleep(time.Millisecond)
		if m := cacheAsk(t, c, "a.example.com.", false); m != nil {
			t.Errorf("after the smallest TTL: still served, %v", m.Answer)
		}
	})
}

// TestCacheNegative: NXDOMAIN and NODATA are kept for the SOA's TTL or its
// MINIMUM, whichever is smaller (RFC 2308), capped; never without an SOA.
// SERVFAIL is kept for a second; REFUSED and truncated replies not at all.
func TestCacheNegative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCache(t, 100, time.Hour, 2*time.Minute)
		zone := "example.com."
		for _, tc := range []struct {
			name  string
			reply []byte
		}{
			{"nx.example.com.", cacheReply(t, "nx.example.com.", dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 300, 60)}, false)},
			{"nx-ttl.example.com.", cacheReply(t, "nx-ttl.example.com.", dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 20, 600)}, false)},
			{"nx-cap.example.com.", cacheReply(t, "nx-cap.example.com.", dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 3600, 3600)}, false)},
			{"nodata.example.com.", cacheReply(t, "nodata.example.com.", dns.RcodeSuccess, nil, []dns.RR{soaRR(zone, 300, 45)}, false)},
			{"nx-nosoa.example.com.", cacheReply(t, "nx-nosoa.example.com.", dns.RcodeNameError, nil, nil, false)},
			{"nodata-nosoa.example.com.", cacheReply(t, "nodata-nosoa.example.com.", dns.RcodeSuccess, nil, nil, false)},
			{"servfail.example.com.", cacheReply(t, "servfail.example.com.", dns.RcodeServerFailure, nil, nil, true)},
			{"refused.example.com.", cacheReply(t, "refused.example.com.", dns.RcodeRefused, nil, nil, false)},
			{"ttl0.example.com.", cacheReply(t, "ttl0.example.com.", dns.RcodeSuccess, []dns.RR{aRR("ttl0.example.com.", 0, "192.0.2.1")}, nil, false)},
		} {
			cacheStore(t, c, tc.name, tc.reply)
		}
		trunc := cacheReply(t, "tc.example.com.", dns.RcodeSuccess, []dns.RR{aRR("tc.example.com.", 60, "192.0.2.1")}, nil, false)
		trunc[2] |= 0x02
		cacheStore(t, c, "tc.example.com.", trunc)
		if m := cacheAsk(t, c, "tc.example.com.", false); m != nil {
			t.Errorf("a truncated reply was cached")
		}
		if m := cacheAsk(t, c, "nx.example.com.", false); m == nil || m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 || m.Ns[0].Header().TTL != 60 {
			t.Errorf("NXDOMAIN with SOA TTL 300, MINIMUM 60: %v, want NXDOMAIN with the SOA at TTL 60", m)
		}
		for _, name := range []string{"nx-nosoa.example.com.", "nodata-nosoa.example.com.", "refused.example.com.", "ttl0.example.com."} {
			if m := cacheAsk(t, c, name, false); m != nil {
				t.Errorf("%s: cached (rcode %d), want not", name, m.Rcode)
			}
		}
		// Expiry, in order of keep.
		steps := []struct {
			at    time.Duration
			alive []string
			gone  []string
		}{
			{time.Second - time.Millisecond, []string{"servfail.example.com."}, nil},
			{time.Second, nil, []string{"servfail.example.com."}},
			{20*time.Second - time.Millisecond, []string{"nx-ttl.example.com."}, nil},
			{20 * time.Second, nil, []string{"nx-ttl.example.com."}},
			{45 * time.Second, []string{"nx.example.com."}, []string{"nodata.example.com."}},
			{60 * time.Second, []string{"nx-cap.example.com."}, []string{"nx.example.com."}},
			{2 * time.Minute, nil, []string{"nx-cap.example.com."}},
		}
		start := time.Now()
		for _, st := range steps {
			time.Sleep(start.Add(st.at).Sub(time.Now()))
			for _, n := range st.alive {
				if cacheAsk(t, c, n, false) == nil {
					t.Errorf("%s gone after %v", n, st.at)
				}
			}
			for _, n := range st.gone {
				if m := cacheAsk(t, c, n, false); m != nil {
					t.Errorf("%s still served after %v", n, st.at)
				}
			}
		}
	})
}

// TestCacheEDNS: the upstream's OPT (its options, e.g. a cookie) is never
// passed on from the cache: a client with EDNS gets the server's OPT with
// its DO bit, one without gets none. DO is part of the key.
func TestCacheEDNS(t *testing.T) {
	c := testCache(t, 100, time.Hour, time.Minute)
	up := &dns.Msg{Data: cacheReply(t, "e.example.com.", dns.RcodeSuccess, []dns.RR{aRR("e.example.com.", 60, "192.0.2.1")}, nil, true)}
	up.Unpack()
	up.Pseudo = []dns.RR{&dns.COOKIE{Cookie: "0102030405060708"}}
	up.Data = nil
	if err := up.Pack(); err != nil {
		t.Fatal(err)
	}
	cacheStore(t, c, "e.example.com.", up.Data)
	m := cacheAsk(t, c, "e.example.com.", true)
	if m == nil {
		t.Fatal("miss")
	}
	if m.UDPSize != ednsSize || len(m.Pseudo) != 0 {
		t.Errorf("EDNS client: UDP size %d, options %v; want %d and none", m.UDPSize, m.Pseudo, ednsSize)
	}
	if m := cacheAsk(t, c, "e.example.com.", false); m == nil || m.UDPSize != 0 {
		t.Errorf("client without EDNS: %v, want the answer without OPT", m)
	}
	req := packQuery(t, "e.example.com.", dns.TypeA, true)
	var sc scratch
	parseQuery(req, &sc)
	k := string(cacheKey(req, &sc))
	req[len(req)-4] |= 0x80 // DO
	parseQuery(req, &sc)
	if k == string(cacheKey(req, &sc)) {
		t.Errorf("DO=1 and DO=0 share a cache key")
	}
}

// TestCacheBounded: the cache holds at most its size, counts evictions and
// flushes, and keeps no reply larger than one entry may be.
func TestCacheBounded(t *testing.T) {
	c := testCache(t, 2, time.Hour, time.Minute)
	for _, n := range []string{"1.example.com.", "2.example.com.", "3.example.com."} {
		cacheStore(t, c, n, cacheReply(t, n, dns.RcodeSuccess, []dns.RR{aRR(n, 60, "192.0.2.1")}, nil, false))
	}
	if c.len() != 2 || cacheAsk(t, c, "1.example.com.", false) != nil || cacheAsk(t, c, "3.example.com.", false) == nil {
		t.Errorf("size 2 after 3 stores: %d entries; want the 2 newest", c.len())
	}
	if got := testutil.ToFloat64(c.metrics.cacheEvictions); got != 1 {
		t.Errorf("evictions = %v, want 1", got)
	}
	var big []dns.RR
	for i := range 100 {
		big = append(big, aRR("big.example.com.", 60, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}).String()))
	}
	cacheStore(t, c, "big.example.com.", cacheReply(t, "big.example.com.", dns.RcodeSuccess, big, nil, false))
	if cacheAsk(t, c, "big.example.com.", false) != nil {
		t.Errorf("a reply over %d bytes was cached", maxCachedReply)
	}
	c.flush()
	if c.len() != 0 || testutil.ToFloat64(c.metrics.cacheFlushes) != 1 {
		t.Errorf("after flush: %d entries, %v flushes", c.len(), testutil.ToFloat64(c.metrics.cacheFlushes))
	}
}

// FuzzCacheEntry feeds the cache arbitrary upstream replies: it must never
// panic, and whatever it keeps it serves back as a message that parses
// whenever the reply itself parsed.
func FuzzCacheEntry(f *testing.F) {
	f.Add(cacheReply(f, "a.example.com.", dns.RcodeSuccess, []dns.RR{aRR("a.example.com.", 60, "192.0.2.1")}, nil, true))
	f.Add(cacheReply(f, "a.example.com.", dns.RcodeNameError, nil, []dns.RR{soaRR("example.com.", 300, 60)}, false))
	f.Add(cacheReply(f, "a.example.com.", dns.RcodeServerFailure, nil, nil, false))
	f.Add([]byte{0, 0, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1, 0xC0, 0x0C})
	req := packQuery(f, "a.example.com.", dns.TypeA, true)
	var sc scratch
	if !parseQuery(req, &sc) {
		f.Fatal("query does not parse")
	}
	key := append([]byte(nil), cacheKey(req, &sc)...)
	f.Fuzz(func(t *testing.T, resp []byte) {
		c := testCache(t, 10, time.Hour, time.Minute)
		parsed := (&dns.Msg{Data: append([]byte(nil), resp...)}).Unpack() == nil
		c.store(key, append([]byte(nil), resp...), time.Now(), notMesh)
		out, ok := c.answer(key, req, &sc.q, make([]byte, respBufSize), 65535, time.Now())
		if !ok || !parsed {
			return
		}
		if err := (&dns.Msg{Data: append([]byte(nil), out...)}).Unpack(); err != nil {
			t.Fatalf("cached reply does not parse: %v\nupstream %x\nserved %x", err, resp, out)
		}
	})
}

// checkIndex fails unless c.byName holds exactly the entries of c.lru,
// each under every name it depends on.
func checkIndex(t *testing.T, c *cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[uint64][]string{}
	for _, e := range c.lru.Values() {
		for n := range e.names() {
			h := maphash.Bytes(c.seed, n)
			want[h] = append(want[h], string(e.key))
		}
	}
	got := map[uint64][]string{}
	for h, set := range c.byName {
		for _, e := range set.all() {
			got[h] = append(got[h], string(e.key))
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("cache index (-want +got):\n%s", diff)
	}
}

// cachedNames is the question names of c's entries, sorted.
func cachedNames(c *cache) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.lru.Values() {
		out = append(out, presentName(e.name()))
	}
	slices.Sort(out)
	return out
}

// TestCacheDropNames: dropping a name removes every entry that depends on
// it (its own answers, answers whose records it owns, answers whose CNAME
// leads to it) and no other; the index follows every store, replacement,
// eviction, expiry and flush.
func TestCacheDropNames(t *testing.T) {
	c := testCache(t, 5, time.Hour, time.Minute)
	store := func(name string, answer, extra []dns.RR) {
		t.Helper()
		m := dns.NewMsg(name, dns.TypeA)
		m.ID, m.Response = 0x4242, true
		m.Answer, m.Extra = answer, extra
		if err := m.Pack(); err != nil {
			t.Fatal(err)
		}
		cacheStore(t, c, name, m.Data)
	}
	store("a.example.com.", []dns.RR{aRR("a.example.com.", 60, "192.0.2.1")}, nil)
	store("alias.example.com.", []dns.RR{cnameRR("alias.example.com.", "A.example.com."), aRR("A.example.com.", 60, "192.0.2.1")}, nil)
	store("dangling.example.com.", []dns.RR{cnameRR("dangling.example.com.", "a.example.com.")}, nil)
	store("glue.example.com.", []dns.RR{aRR("glue.example.com.", 60, "192.0.2.2")}, []dns.RR{aRR("a.example.com.", 60, "192.0.2.1")})
	store("other.example.com.", []dns.RR{cnameRR("other.example.com.", "cdn.example.net."), aRR("cdn.example.net.", 60, "192.0.2.3")}, nil)
	checkIndex(t, c)
	if diff := cmp.Diff([]string{"a.example.com", "alias.example.com", "dangling.example.com", "glue.example.com", "other.example.com"}, cachedNames(c)); diff != "" {
		t.Fatalf("cached (-want +got):\n%s", diff)
	}
	c.dropNames([][]byte{[]byte("\x01a\x07example\x03com\x00"), []byte("\x07unknown\x03net\x00")})
	if diff := cmp.Diff([]string{"other.example.com"}, cachedNames(c)); diff != "" {
		t.Errorf("after dropping a.example.com (-want +got):\n%s", diff)
	}
	checkIndex(t, c)
	c.dropNames([][]byte{[]byte("\x03cdn\x07example\x03net\x00")})
	if got := cachedNames(c); len(got) != 0 {
		t.Errorf("after dropping cdn.example.net, the CNAME target: %v cached, want none", got)
	}
	checkIndex(t, c)

	// Replacement, eviction (size 5), expiry and flush keep the index.
	store("r.example.com.", []dns.RR{cnameRR("r.example.com.", "old.example.net."), aRR("old.example.net.", 60, "192.0.2.4")}, nil)
	store("r.example.com.", []dns.RR{aRR("r.example.com.", 60, "192.0.2.5")}, nil)
	checkIndex(t, c)
	for i := range 8 {
		n := fmt.Sprintf("e%d.example.com.", i)
		store(n, []dns.RR{cnameRR(n, "shared.example.net."), aRR("shared.example.net.", 60, "192.0.2.6")}, nil)
	}
	checkIndex(t, c)
	store("short.example.com.", []dns.RR{aRR("short.example.com.", 1, "192.0.2.7")}, nil)
	req := packQuery(t, "short.example.com.", dns.TypeA, false)
	var sc scratch
	parseQuery(req, &sc)
	if _, ok := c.answer(cacheKey(req, &sc), req, &sc.q, nil, 65535, time.Now().Add(2*time.Second)); ok {
		t.Errorf("short.example.com served after its TTL")
	}
	checkIndex(t, c)
	c.flush()
	checkIndex(t, c)
	if len(c.byName) != 0 {
		t.Errorf("index after flush: %d names, want none", len(c.byName))
	}
}

// TestCacheRefusesMeshDependents: an answer is not stored when a name it
// depends on, not only its question's, is the mesh's at that moment.
func TestCacheRefusesMeshDependents(t *testing.T) {
	c := testCache(t, 10, time.Hour, time.Minute)
	mesh := func(n []byte) bool { return string(n) == "\x05gitea\x05novox\x08internal\x00" }
	m := dns.NewMsg("q.example.com.", dns.TypeA)
	m.ID, m.Response = 0x4242, true
	m.Answer = []dns.RR{cnameRR("q.example.com.", "gitea.novox.internal.")}
	if err := m.Pack(); err != nil {
		t.Fatal(err)
	}
	req := packQuery(t, "q.example.com.", dns.TypeA, false)
	var sc scratch
	parseQuery(req, &sc)
	c.store(cacheKey(req, &sc), m.Data, time.Now(), mesh)
	if n := c.len(); n != 0 {
		t.Errorf("an answer whose CNAME leads into the mesh was cached (%d entries)", n)
	}
}

// TestCacheRosterSwap: a roster swap removes from the cache the outside
// answers it makes wrong, and keeps every other: a delta, the answers that
// depend on the names it sets (their own, and those whose CNAME leads to
// them); a delta that adds a zone, the answers for names in it; a delta
// that removes a name, none.
func TestCacheRosterSwap(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		if strings.EqualFold(q.Question[0].Header().Name, "via.example.com.") {
			r := new(dns.Msg)
			r.ID, r.Response, r.RecursionDesired = q.ID, true, q.RecursionDesired
			r.Question = q.Question
			r.Answer = []dns.RR{cnameRR("via.example.com.", "later.zurag.be."), aRR("later.zurag.be.", 300, "192.0.2.20")}
			r.Pack()
			u.conn.WriteToUDPAddrPort(r.Data, from)
			return
		}
		answerA(u, q, from)
	})
	asked := func(name string) int {
		n := 0
		for _, q := range up.queries() {
			if q.name == name {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		delta func(gen uint64) *spec.RosterDelta
		// answers after the swap, and the names asked upstream again
		want  map[string]string
		again []string
	}{
		{
			name: "a delta sets a cached name",
			delta: func(gen uint64) *spec.RosterDelta {
				return &spec.RosterDelta{From: gen, To: gen + 1, Set: map[string][]netip.Addr{"later.zurag.be": {netip.MustParseAddr("100.64.0.50")}}}
			},
			want:  map[string]string{"later.zurag.be.": "100.64.0.50", "via.example.com.": "100.64.0.50", "x.newzone.test.": "192.0.2.10", "kept.example.com.": "192.0.2.10"},
			again: []string{"via.example.com."},
		},
		{
			name: "a delta adds a zone",
			delta: func(gen uint64) *spec.RosterDelta {
				return &spec.RosterDelta{From: gen, To: gen + 1, Zones: []string{"internal", "newzone.test"}, Set: map[string][]netip.Addr{"x.newzone.test": {netip.MustParseAddr("10.99.0.1")}}}
			},
			want: map[string]string{"later.zurag.be.": "192.0.2.10", "via.example.com.": "192.0.2.20", "x.newzone.test.": "10.99.0.1", "kept.example.com.": "192.0.2.10"},
		},
		{
			name: "a delta removes a name",
			delta: func(gen uint64) *spec.RosterDelta {
				return &spec.RosterDelta{From: gen, To: gen + 1, Remove: []string{"gitea.novox.internal"}}
			},
			want: map[string]string{"later.zurag.be.": "192.0.2.10", "via.example.com.": "192.0.2.20", "x.newzone.test.": "192.0.2.10", "kept.example.com.": "192.0.2.10"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}})
			names := slices.Sorted(maps.Keys(tc.want))
			before := map[string]int{}
			for _, n := range names {
				askA(t, addr, n)
				before[n] = asked(n)
			}
			if err := s.Apply(tc.delta(7)); err != nil {
				t.Fatal(err)
			}
			checkCacheHoldsNoMeshName(t, s)
			checkIndex(t, s.cache)
			got := map[string]string{}
			var again []string
			for _, n := range names {
				got[n] = firstA(askA(t, addr, n))
				if asked(n) != before[n] {
					again = append(again, n)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers after the swap (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.again, again); diff != "" {
				t.Errorf("asked upstream again after the swap (-want +got):\n%s", diff)
			}
		})
	}
}
