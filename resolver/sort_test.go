package resolver

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshhost/meshhost/internal/plumbing/yield"
)

// TestSortYielding checks the PTR index's radix sort against slices.Sort,
// on keys that differ in every 16-bit digit, in only some, and not at all.
func TestSortYielding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string][]uint64{"empty": nil, "one": {42}}
	random := make([]uint64, 5000)
	for i := range random {
		random[i] = rng.Uint64()
	}
	cases["random"] = random
	low := make([]uint64, 5000) // same address, entries differ
	for i := range low {
		low[i] = 0x0A000001<<32 | uint64(rng.Uint32N(1<<20))
	}
	cases["low digits only"] = low
	cases["all equal"] = slices.Repeat([]uint64{7 << 40}, 300)
	for name, keys := range cases {
		want := slices.Clone(keys)
		slices.Sort(want)
		var y yield.Yielder
		sortYielding(keys, &y)
		if !slices.Equal(keys, want) {
			t.Errorf("%s: sortYielding differs from slices.Sort", name)
		}
	}
}
