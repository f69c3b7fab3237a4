package spec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var cmpAddrs = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestRosterDeltaValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    RosterDelta
		want []string // substrings, one per fault
	}{
		{"ok", RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"a.internal": addrs("10.0.0.1")}, Remove: []string{"b.internal"}}, nil},
		{"from nothing", RosterDelta{From: 0, To: 1, Zones: []string{"internal"}}, nil},
		{"backwards", RosterDelta{From: 2, To: 2}, []string{"generation: 2 is not after from 2"}},
		{"bad names", RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"a..b": addrs("10.0.0.1")}, Remove: []string{"-x"}},
			[]string{`set["a..b"]: not a valid host name`, `remove[0]: not a valid host name`}},
		{"addresses", RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"a.internal": nil, "b.internal": addrs("10.0.0.1", "10.0.0.1"), "c.internal": addrs("::ffff:10.0.0.1")}},
			[]string{`set["a.internal"]: has no addresses`, `set["b.internal"][1]: 10.0.0.1 is listed twice`, `set["c.internal"][0]: ::ffff:10.0.0.1 is an IPv4-mapped`}},
		{"case clash", RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"A.internal": addrs("10.0.0.1"), "a.internal": addrs("10.0.0.2")}}, []string{`same name as set["A.internal"]`}},
		{"set and removed", RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"a.internal": addrs("10.0.0.1")}, Remove: []string{"A.Internal."}}, []string{"either set or removed"}},
		{"removed twice", RosterDelta{From: 1, To: 2, Remove: []string{"a.internal", "a.internal"}}, []string{"remove[1]"}},
		{"zones", RosterDelta{From: 1, To: 2, Zones: []string{"internal", "Internal", "a..b"}}, []string{`zones[1]: zone "Internal" is listed twice`, "zones[2]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Validate()
			var got []string
			for _, e := range unjoin(err) {
				if e == nil {
					continue
				}
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Errorf("fault %v is not a *FieldError", e)
				}
				got = append(got, e.Error())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Validate = %q, want %d faults like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("fault %d = %q, want it to say %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// randomRoster and randomDelta draw over few names, so that deltas add,
// move and remove the same names again and again.
func randomRoster(rng *rand.Rand, gen uint64) *Roster {
	r := &Roster{Generation: gen, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for range rng.IntN(12) {
		r.Names[randomName(rng)] = randomAddrs(rng)
	}
	return r
}

func randomName(rng *rand.Rand) string { return fmt.Sprintf("n%d.internal", rng.IntN(16)) }

func randomAddrs(rng *rand.Rand) []netip.Addr {
	a := []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(4))})}
	if rng.IntN(3) == 0 {
		a = append(a, netip.AddrFrom16([16]byte{0xfd, 15: byte(rng.IntN(4))}))
	}
	return a
}

func randomDelta(rng *rand.Rand, from, to uint64) *RosterDelta {
	d := &RosterDelta{From: from, To: to, Set: map[string][]netip.Addr{}}
	seen := map[string]bool{}
	for range rng.IntN(6) {
		n := randomName(rng)
		if seen[n] {
			continue
		}
		seen[n] = true
		if rng.IntN(3) == 0 {
			d.Remove = append(d.Remove, n)
		} else {
			d.Set[n] = randomAddrs(rng)
		}
	}
	if rng.IntN(8) == 0 {
		d.Zones = []string{"internal", "x.internal"}[:1+rng.IntN(2)]
	}
	return d.Normalize()
}

func cloneRoster(r *Roster) *Roster {
	out := &Roster{Generation: r.Generation, Zones: slices.Clone(r.Zones), Names: map[string][]netip.Addr{}}
	for n, a := range r.Names {
		out.Names[n] = a
	}
	return out
}

var cmpRoster = []cmp.Option{cmpAddrs, cmpopts.EquateEmpty()}

// TestRosterDeltaAlgebra: applying a delta and then its undo gives the
// roster back; composing deltas (Then) is applying them in turn; and
// DiffRosters finds the delta (and undo) between any two rosters.
func TestRosterDeltaAlgebra(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		r0 := randomRoster(rng, 1).Normalize()
		d1, d2 := randomDelta(rng, 1, 2), randomDelta(rng, 2, 3)

		r := cloneRoster(r0)
		u1, err := r.Apply(d1)
		if err != nil {
			t.Fatal(err)
		}
		r1 := cloneRoster(r)
		u2, err := r.Apply(d2)
		if err != nil {
			t.Fatal(err)
		}
		r2 := cloneRoster(r)

		both, err := d1.Then(d2)
		if err != nil {
			t.Fatal(err)
		}
		viaThen := cloneRoster(r0)
		if _, err := viaThen.Apply(both); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r2, viaThen, cmpRoster...); diff != "" {
			t.Fatalf("case %d: d1.Then(d2) applied (-in turn +composed):\n%s", i, diff)
		}
		undoBoth, _ := u2.Then(u1)
		back := cloneRoster(r2)
		if _, err := back.Apply(undoBoth); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r0, back, cmpRoster...); diff != "" {
			t.Fatalf("case %d: undo (-before +undone):\n%s", i, diff)
		}
		dd, du := DiffRosters(r0, r2)
		viaDiff := cloneRoster(r0)
		if _, err := viaDiff.Apply(dd); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r2, viaDiff, cmpRoster...); diff != "" {
			t.Fatalf("case %d: DiffRosters' delta (-want +got):\n%s", i, diff)
		}
		if _, err := viaDiff.Apply(du); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r0, viaDiff, cmpRoster...); diff != "" {
			t.Fatalf("case %d: DiffRosters' undo (-want +got):\n%s", i, diff)
		}
		if dd.Validate() != nil && dd.To > dd.From {
			t.Fatalf("case %d: DiffRosters' delta is invalid: %v", i, dd.Validate())
		}
		_ = r1
	}
}

func TestRosterApplyRefusesOtherBase(t *testing.T) {
	r := &Roster{Generation: 3, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"a.internal": addrs("10.0.0.1")}}
	_, err := r.Apply(&RosterDelta{From: 2, To: 4, Remove: []string{"a.internal"}})
	if !errors.Is(err, ErrDeltaBase) {
		t.Fatalf("Apply of a delta from 2 to a roster of 3 = %v, want ErrDeltaBase", err)
	}
	if r.Generation != 3 || len(r.Names) != 1 {
		t.Errorf("the refused delta changed the roster: %+v", r)
	}
}
