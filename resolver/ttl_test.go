package resolver

import (
	"encoding/binary"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
)

// TestUpstreamTTLHighBit: a TTL (or an SOA MINIMUM) from an upstream with
// the most significant bit set is read as 0 (RFC 2181 section 8): nothing
// is cached for it, and a reply built from it says 0; a TTL just under it
// is capped as any other.
func TestUpstreamTTLHighBit(t *testing.T) {
	const name, zone = "hb.example.com.", "example.com."
	for _, tc := range []struct {
		what     string
		reply    []byte
		keep     bool
		lifetime time.Duration // of the entry, when kept
		ttls     []uint32      // of the entry's records
	}{
		{"answer TTL 2^31", cacheReply(t, name, dns.RcodeSuccess, []dns.RR{aRR(name, 1<<31, "192.0.2.1")}, nil, false), false, 0, []uint32{0}},
		{"answer TTL 2^32-1", cacheReply(t, name, dns.RcodeSuccess, []dns.RR{aRR(name, 1<<32-1, "192.0.2.1")}, nil, false), false, 0, []uint32{0}},
		{"one of two answers", cacheReply(t, name, dns.RcodeSuccess, []dns.RR{aRR(name, 60, "192.0.2.1"), aRR(name, 1<<31|60, "192.0.2.2")}, nil, true), false, 0, []uint32{60, 0}},
		{"answer TTL 2^31-1, capped", cacheReply(t, name, dns.RcodeSuccess, []dns.RR{aRR(name, 1<<31-1, "192.0.2.1")}, nil, false), true, time.Hour, []uint32{3600}},
		{"negative, SOA TTL 2^31", cacheReply(t, name, dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 1<<31, 60)}, false), false, 0, []uint32{0}},
		{"negative, SOA MINIMUM 2^31", cacheReply(t, name, dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 300, 1<<31)}, false), false, 0, []uint32{0}},
		{"nodata, SOA MINIMUM 2^32-1", cacheReply(t, name, dns.RcodeSuccess, nil, []dns.RR{soaRR(zone, 300, 1<<32-1)}, false), false, 0, []uint32{0}},
		{"negative, SOA MINIMUM 2^31-1, capped", cacheReply(t, name, dns.RcodeNameError, nil, []dns.RR{soaRR(zone, 300, 1<<31-1)}, false), true, 5 * time.Minute, []uint32{300}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := testCache(t, 100, time.Hour, 5*time.Minute)
			now := time.Now()
			e, keep := c.entry(tc.reply, now)
			if e == nil {
				t.Fatal("no entry")
			}
			if keep != tc.keep {
				t.Errorf("kept %v, want %v", keep, tc.keep)
			}
			if keep && e.expires.Sub(now) != tc.lifetime {
				t.Errorf("lifetime %v, want %v", e.expires.Sub(now), tc.lifetime)
			}
			var got []uint32
			for _, off := range e.ttls {
				got = append(got, binary.BigEndian.Uint32(e.msg[off:]))
			}
			if len(got) != len(tc.ttls) {
				t.Fatalf("TTLs %v, want %v", got, tc.ttls)
			}
			for i := range got {
				if got[i] != tc.ttls[i] {
					t.Fatalf("TTLs %v, want %v", got, tc.ttls)
				}
			}
			// Through the cache as a client sees it.
			cacheStore(t, c, name, tc.reply)
			if m := cacheAsk(t, c, name, false); (m != nil) != tc.keep {
				t.Errorf("served from the cache: %v, want %v", m != nil, tc.keep)
			}
		})
	}
}
