package resolver

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// benchRoster is the bench script's roster: n names svc{i}.node{i%50}.mesh.internal.
func benchRoster(n int, gen uint64) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"mesh.internal"}, Names: make(map[string][]netip.Addr, n)}
	for i := range n {
		r.Names[fmt.Sprintf("svc%d.node%d.mesh.internal", i, i%50)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	return r
}

func BenchmarkParseRoster100k(b *testing.B) {
	data, err := benchRoster(100000, 1).MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := spec.ParseRoster(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate100k(b *testing.B) {
	r := benchRoster(100000, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNormalize100k(b *testing.B) {
	r := benchRoster(100000, 1)
	b.ReportAllocs()
	for b.Loop() {
		r.Normalize()
	}
}

func BenchmarkBuildTable100k(b *testing.B) {
	r := benchRoster(100000, 1).Normalize()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildTable(r, 5, 5); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTableSize100k(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r := benchRoster(100000, 1).Normalize()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb, err := buildTable(r, 5, 5)
	if err != nil {
		t.Fatal(err)
	}
	r = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("table of 100k names: %.1f MB heap", float64(after.HeapAlloc-before.HeapAlloc)/1e6)
	runtime.KeepAlive(tb)
}
