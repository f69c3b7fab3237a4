package specjson_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func TestParseRoster(t *testing.T) {
	r, err := specjson.ParseRoster([]byte(`{"generation": 7,
	  "zones": ["Internal."],
	  "names": {"Gitea.Novox.internal": ["10.89.0.7"],
	            "searxng.zurag.be": ["fd7a::9", "100.64.0.9"]}}`))
	if err != nil {
		t.Fatalf("ParseRoster = %v", err)
	}
	want := &spec.Roster{
		Generation: 7,
		Zones:      []string{"internal"},
		Names: map[string][]netip.Addr{
			"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")},
			"searxng.zurag.be":     {netip.MustParseAddr("100.64.0.9"), netip.MustParseAddr("fd7a::9")},
		},
	}
	if diff := cmp.Diff(want, r, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("ParseRoster (-want +got):\n%s", diff)
	}
	// MarshalJSON writes what ParseRoster reads.
	out, _ := json.Marshal(r)
	r2, err := specjson.ParseRoster(out)
	if err != nil {
		t.Fatalf("ParseRoster(MarshalJSON) = %v", err)
	}
	if diff := cmp.Diff(r, r2, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestParseRosterFaults(t *testing.T) {
	long := strings.Repeat("a", 64) + ".internal"
	tests := []struct {
		doc, want string
	}{
		{`{"generation": 0, "names": {}}`, `generation: must be greater than 0`},
		{`{"generation": -1, "names": {}}`, `generation: -1 is not a whole number >= 0`},
		{`{"names": {}}`, `generation: is required`},
		{`{"generation": 1, "names": {"a.internal": ["10.0.0.1"], "A.internal": ["10.0.0.2"]}}`, `same name as "A.internal" (names are case-insensitive)`},
		{`{"generation": 1, "names": {"a.internal": ["10.0.0.1", "10.0.0.1"]}}`, `names["a.internal"][1]: 10.0.0.1 is listed twice`},
		{`{"generation": 1, "names": {"a.internal": []}}`, `names["a.internal"]: has no addresses`},
		{`{"generation": 1, "names": {"a.internal": ["::ffff:10.0.0.1"]}}`, `is an IPv4-mapped IPv6 address; write 10.0.0.1`},
		{`{"generation": 1, "names": {"a.internal": ["fe80::1%eth0"]}}`, `has an IPv6 zone`},
		{`{"generation": 1, "names": {"a_b.internal": ["10.0.0.1"]}}`, `names["a_b.internal"]: not a valid host name`},
		{`{"generation": 1, "names": {"` + long + `": ["10.0.0.1"]}}`, `is 64 characters long, more than 63`},
		{`{"generation": 1, "names": {"-a.internal": ["10.0.0.1"]}}`, `starts or ends with a hyphen`},
		{`{"generation": 1, "names": {"a..internal": ["10.0.0.1"]}}`, `two dots in a row`},
		{`{"generation": 1, "names": {"a.internal\n10.0.0.2 evil": ["10.0.0.1"]}}`, `only letters, digits and hyphens are allowed`},
		{`{"generation": 1, "names": {"a.internal": "10.0.0.1"}}`, `names["a.internal"]: is a string, want an array of strings`},
		{`{"generation": 1, "names": {}, "zones": ["internal", "INTERNAL"]}`, `zones[1]: zone "INTERNAL" is listed twice`},
		{`{"generation": 1, "names": {}, "extra": true}`, `extra: unknown field`},
		{`{"generation": 1, "names": {"a.internal": [` + manyAddrs(spec.MaxAddrsPerName+1) + `]}}`, `names["a.internal"]: has 4001 addresses; at most 4000 fit a DNS answer`},
		{`{"generation": 1, "names": {}, "zones": [` + manyZones(spec.MaxZones+1) + `]}`, `zones: 65535 zones; at most 65534 are supported`},
	}
	for _, tt := range tests {
		r, err := specjson.ParseRoster([]byte(tt.doc))
		if err == nil || r != nil {
			t.Errorf("ParseRoster(%s) = %v, %v; want nil and an error", tt.doc, r, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRoster(%s) error =\n%v\nwant it to contain %q", tt.doc, err, tt.want)
		}
	}
}

// manyZones returns n distinct zones as JSON strings, comma-separated.
func manyZones(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf(`"z%d"`, i)
	}
	return strings.Join(s, ",")
}

// rosterSeeds are documents each reader must agree on: ones the fast path
// takes, and one of each kind it declines.
var rosterSeeds = []string{
	`{"generation": 7, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"], "searxng.zurag.be": ["100.64.0.9", "fd7a::9"]}}`,
	`{"generation": 1, "names": {"a": ["::1"]}}`,
	`{"names": {}, "zones": [], "generation": 3}`,
	"{\"generation\":2,\"zones\":[\"b\",\"a\"],\"names\":{\"x.a\":[\"10.0.0.2\",\"10.0.0.1\"]}}\n",
	`{"generation": 7, "names": {"Gitea.Internal.": ["10.0.0.1"]}}`,                                // not canonical: taken, lowercased
	`{"generation": 7, "names": {"gitea.internal": ["10.0.0.1"], "GITEA.internal": ["10.0.0.2"]}}`, // same name twice
	`{"generation": 7, "names": {"a": ["10.0.0.1"], "a": ["10.0.0.2"]}}`,                           // duplicate key
	`{"generation": 7, "names": {"a": ["10.0.0.1", "10.0.0.1"]}}`,                                  // address twice
	`{"generation": 7, "names": {"a": []}}`,                                                        // no address
	`{"generation": 7, "names": {"a": ["::ffff:10.0.0.1"]}}`,                                       // mapped
	`{"generation": 7, "names": {"a": ["fe80::1%eth0"]}}`,                                          // zone
	`{"generation": 7, "names": {"a b": ["10.0.0.1"]}}`,                                            // hosts injection
	`{"generation": 7, "names": {"\u0061": ["10.0.0.1"]}}`,                                         // escape
	`{"generation": 0, "names": {"a": ["10.0.0.1"]}}`,                                              // generation 0
	`{"generation": 7.0, "names": {"a": ["10.0.0.1"]}}`,                                            // fraction
	`{"generation": 07, "names": {"a": ["10.0.0.1"]}}`,                                             // leading zero
	`{"generation": 9223372036854775808, "names": {"a": ["10.0.0.1"]}}`,                            // past MaxInt64
	`{"generation": 7, "names": {"a": ["10.0.0.1"]}, "extra": 1}`,                                  // unknown field
	`{"generation": 7, "zones": ["a", "A"], "names": {}}`,                                          // zone twice
	`{"generation": 7}`, // no names
	`{"generation": 7, "names": {"a": ["10.0.0.1"]}} x`, // trailing data
}

// TestRosterReadersAgree checks the fast path on the seeds, and that it is
// taken for plain documents.
func TestRosterReadersAgree(t *testing.T) {
	for _, doc := range rosterSeeds {
		checkRosterReadersAgree(t, []byte(doc))
	}
	for _, doc := range rosterSeeds[:5] {
		if _, ok := specjson.DecodeRosterFast([]byte(doc)); !ok {
			t.Errorf("fast path declined a plain document: %s", doc)
		}
	}
}

// checkRosterReadersAgree: whatever the fast path takes, the strict reader
// takes too, with the same result.
func checkRosterReadersAgree(t *testing.T, data []byte) {
	t.Helper()
	fast, ok := specjson.DecodeRosterFast(data)
	if !ok {
		return
	}
	strict, err := specjson.ParseRosterStrict(data)
	if err != nil {
		t.Fatalf("fast path took a document the strict reader refuses (%v):\n%s", err, data)
	}
	if diff := cmp.Diff(strict, fast, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("fast path and strict reader differ (-strict +fast):\n%s\n%s", diff, data)
	}
}

func FuzzParseRoster(f *testing.F) {
	for _, doc := range rosterSeeds {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRosterReadersAgree(t, data)
		r, err := specjson.ParseRoster(data)
		if (r == nil) == (err == nil) {
			t.Fatalf("ParseRoster = %v, %v: want exactly one of them", r, err)
		}
		if err != nil {
			return
		}
		// A parsed roster is valid, canonical, and safe to copy into /etc/hosts.
		if err := r.Validate(); err != nil {
			t.Fatalf("parsed roster fails Validate: %v", err)
		}
		for name := range r.Names {
			if name != spec.CanonicalName(name) || strings.ContainsAny(name, " \t\r\n#") {
				t.Fatalf("name %q is not canonical or could inject a hosts line", name)
			}
		}
	})
}
