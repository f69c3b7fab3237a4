package resolver

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDifferences(t *testing.T) {
	s, _ := newTestServer(t, testRoster(7), Config{})
	if got := s.Generation(); got != 7 {
		t.Errorf("Generation = %d, want 7", got)
	}
	if d := s.Differences(testRoster(7), 10); d != nil {
		t.Errorf("Differences(the served roster) = %q, want none", d)
	}
	same := testRoster(7)
	same.Names["GITEA.novox.internal."] = same.Names["gitea.novox.internal"]
	delete(same.Names, "gitea.novox.internal")
	addrs := same.Names["searxng.zurag.be"]
	same.Names["searxng.zurag.be"] = []netip.Addr{addrs[1], addrs[0]}
	if d := s.Differences(same, 10); d != nil {
		t.Errorf("Differences(the served roster, spelled otherwise) = %q, want none", d)
	}

	other := testRoster(7)
	other.Zones = []string{"internal", "mesh"}
	other.Names["gitea.novox.internal"] = []netip.Addr{netip.MustParseAddr("10.89.0.70")}
	delete(other.Names, "v6only.novox.internal")
	other.Names["new.novox.internal"] = []netip.Addr{netip.MustParseAddr("10.89.0.71")}
	want := []string{
		`names["gitea.novox.internal"]: served 10.89.0.7, here 10.89.0.70`,
		`names["new.novox.internal"]: not in the served roster`,
		`names["v6only.novox.internal"]: served, missing here`,
		`zones: served [internal], here [internal mesh]`,
	}
	if diff := cmp.Diff(want, s.Differences(other, 10)); diff != "" {
		t.Errorf("Differences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(append(want[:2:2], "and 2 more"), s.Differences(other, 3)); diff != "" {
		t.Errorf("Differences, at most 3 (-want +got):\n%s", diff)
	}
}

func BenchmarkDifferencesSame(b *testing.B) {
	r := testRoster(1)
	for i := range 100_000 {
		r.Names[fmt.Sprintf("n%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	s, err := New(Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := s.Differences(r, 10); d != nil {
			b.Fatal(d)
		}
	}
}
