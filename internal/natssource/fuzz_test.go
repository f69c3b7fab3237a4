package natssource

import (
	"net/netip"
	"slices"
	"testing"
)

// FuzzDecode feeds the bucket values' readers anything: they never panic,
// a name value they take is valid and sorted and survives a round trip,
// and a commit record they take has a generation and a digest.
func FuzzDecode(f *testing.F) {
	for _, seed := range []struct{ key, value string }{
		{"a.internal", `["10.0.0.1","fd00::1"]`},
		{"a.internal", `["10.0.0.1","10.0.0.1"]`},
		{"A.internal", `["10.0.0.1"]`},
		{"a.internal", `[]`},
		{"a.internal", `["::ffff:10.0.0.1"]`},
		{CommitKey, `{"version":1,"generation":3,"revision":9,"names":1,"digest":"00000000000000000000000000000000","zones":["internal"]}`},
		{CommitKey, `{"version":2,"generation":3}`},
		{"ace", `{"schema":1,"machine":"ace","generation":2,"containers":[]}`},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if addrs, err := decodeName(key, value); err == nil {
			if len(addrs) == 0 || !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
				t.Fatalf("decodeName(%q, %q) = %v: empty or unsorted", key, value, addrs)
			}
			again, err := decodeName(key, encodeAddrs(addrs))
			if err != nil || !slices.Equal(again, addrs) {
				t.Fatalf("round trip of %v: %v, %v", addrs, again, err)
			}
		}
		if c, err := parseCommit(value); err == nil {
			if c.Generation == 0 || c.Version != ProtocolVersion {
				t.Fatalf("parseCommit(%q) = %+v", value, c)
			}
			if _, err := parseDigest(c.Digest); err != nil {
				t.Fatalf("parseCommit(%q) took digest %q: %v", value, c.Digest, err)
			}
		}
		if d, err := parseMachineDeclaration(value); err == nil && (d.Roster != nil || d.Generation == 0) {
			t.Fatalf("parseMachineDeclaration(%q) = %+v", value, d)
		}
	})
}
