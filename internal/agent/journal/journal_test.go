package journal_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/spec"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestRosterDiff(t *testing.T) {
	a := &spec.Roster{Generation: 7, Names: map[string][]netip.Addr{
		"gitea.novox.internal": addrs("10.89.0.7"),
		"old.internal":         addrs("10.0.0.1"),
		"vault.hub.internal":   addrs("10.0.0.2"),
	}}
	b := &spec.Roster{Generation: 8, Names: map[string][]netip.Addr{
		"gitea.novox.internal": addrs("10.89.0.8"),
		"searxng.zurag.be":     addrs("100.64.0.9"),
		"vault.hub.internal":   addrs("10.0.0.2"),
	}}
	for _, tc := range []struct {
		name string
		a, b *spec.Roster
		want journal.Diff
	}{
		{"same", a, a, journal.Diff{From: 7, To: 7}},
		{"first", nil, &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{"x.internal": addrs("10.0.0.1")}},
			journal.Diff{To: 1, Added: []journal.Name{{"x.internal", addrs("10.0.0.1")}}}},
		{"changed", a, b, journal.Diff{From: 7, To: 8,
			Added:   []journal.Name{{"searxng.zurag.be", addrs("100.64.0.9")}},
			Removed: []journal.Name{{"old.internal", addrs("10.0.0.1")}},
			Moved:   []journal.Move{{"gitea.novox.internal", addrs("10.89.0.7"), addrs("10.89.0.8")}}}},
	} {
		got := journal.RosterDiff(tc.a, tc.b)
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Errorf("RosterDiff(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
	want := "+ searxng.zurag.be 100.64.0.9\n- old.internal 10.0.0.1\n~ gitea.novox.internal 10.89.0.7 -> 10.89.0.8\n"
	if got := journal.RosterDiff(a, b).String(); got != want {
		t.Errorf("Diff.String() = %q, want %q", got, want)
	}
}

func declaration(gen, rosterGen uint64, names map[string][]netip.Addr) *spec.Declaration {
	return &spec.Declaration{Schema: 1, Machine: "hub", Generation: gen, MeshNames: spec.FlagOff,
		Roster:     &spec.Roster{Generation: rosterGen, Zones: []string{"internal"}, Names: names},
		Containers: []spec.Container{{Name: "gitea", Image: "gitea:1"}}}
}

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	names := map[string][]netip.Addr{"gitea.novox.internal": addrs("10.89.0.7")}
	var prev *spec.Roster
	for gen := uint64(1); gen <= 5; gen++ {
		n := map[string][]netip.Addr{"gitea.novox.internal": addrs("10.89.0.7")}
		if gen >= 4 {
			n["searxng.zurag.be"] = addrs("100.64.0.9")
		}
		d := declaration(gen, gen+10, n)
		e, err := j.RecordDeclaration(d, journal.RosterDiff(prev, d.Roster), at.Add(time.Duration(gen)*time.Minute))
		prev = d.Roster
		if err != nil {
			t.Fatalf("RecordDeclaration(%d): %v", gen, err)
		}
		if wantAdded := gen == 1 || gen == 4; (len(e.RosterDiff.Added) == 1) != wantAdded {
			t.Errorf("declaration %d: roster diff %v", gen, e.RosterDiff)
		}
		if _, err := j.RecordPass(journal.PassEntry{Time: at.Add(time.Duration(gen)*time.Minute + time.Second), Generation: gen,
			Actions: []journal.Action{{Kind: "replace", Container: "gitea", Reason: "image: a -> b"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.RecordDeclaration(declaration(2, 12, names), journal.Diff{}, at); !errors.Is(err, journal.ErrOlderGeneration) {
		t.Errorf("recording an older generation: %v, want ErrOlderGeneration", err)
	}

	// A reopened journal holds the last 3 of each, in time order.
	j, _ = journal.Open(dir, journal.Options{Keep: 3})
	h, err := j.History()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h {
		if e.Declaration != nil {
			got = append(got, "declaration "+e.Time.Format("15:04:05"))
		} else {
			got = append(got, "pass "+e.Time.Format("15:04:05"))
		}
	}
	want := []string{"declaration 12:03:00", "pass 12:03:01", "declaration 12:04:00", "pass 12:04:01", "declaration 12:05:00", "pass 12:05:01"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}
	if p := h[len(h)-1].Pass; p.Seq != 5 {
		t.Errorf("last pass seq = %d, want 5", p.Seq)
	}

	if d, err := j.RosterDiff(13, 15); err != nil || len(d.Added) != 1 || d.Added[0].Name != "searxng.zurag.be" || d.From != 13 || d.To != 15 {
		t.Errorf("roster diff 13 15 = %v, %v", d, err)
	}
	if d, err := j.RosterDiff(15, 13); err != nil || len(d.Removed) != 1 || d.Removed[0].Name != "searxng.zurag.be" {
		t.Errorf("roster diff 15 13 = %v, %v", d, err)
	}
	if d, err := j.RosterDiff(12, 14); err != nil || len(d.Added) != 1 {
		t.Errorf("roster diff 12 14 (12: where the oldest entry kept starts from) = %v, %v", d, err)
	}
	if _, err := j.RosterDiff(11, 15); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("roster diff from a pruned generation: %v, want ErrNotFound", err)
	}
}

// TestRosterDiffComposes: the journal's roster diff between any two
// generations it holds is the diff of the two rosters, however many
// entries (each a small diff) lie between them, and whichever way round;
// the roster moves now with a new declaration, now alone (a roster
// entry), now not at all with a new declaration.
func TestRosterDiffComposes(t *testing.T) {
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var rosters []*spec.Roster
	var prev *spec.Roster
	declGen := uint64(0)
	for gen := uint64(1); gen <= 30; gen++ {
		n := map[string][]netip.Addr{}
		if prev != nil {
			maps.Copy(n, prev.Names)
		}
		for range 1 + rng.IntN(4) {
			name := fmt.Sprintf("n%d.internal", rng.IntN(12))
			if rng.IntN(3) == 0 {
				delete(n, name)
			} else {
				n[name] = addrs(fmt.Sprintf("10.0.0.%d", rng.IntN(5)))
			}
		}
		r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: n}
		switch {
		case gen > 1 && rng.IntN(2) == 0: // the roster alone
			if _, err := j.RecordRoster("hub", declGen, journal.RosterDiff(prev, r), time.Now()); err != nil {
				t.Fatal(err)
			}
		default:
			declGen++
			d := declaration(declGen, gen, n)
			if _, err := j.RecordDeclaration(d, journal.RosterDiff(prev, r), time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(4) == 0 { // a new declaration, the roster unchanged
			declGen++
			if _, err := j.RecordDeclaration(declaration(declGen, gen, n), journal.RosterDiff(r, r), time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		rosters = append(rosters, r)
		prev = r
	}
	if rs, err := j.Rosters(); err != nil || len(rs) == 0 {
		t.Fatalf("Rosters() = %d entries, %v; the test records some", len(rs), err)
	}
	for range 200 {
		a, b := 1+rng.IntN(30), 1+rng.IntN(30)
		got, err := j.RosterDiff(uint64(a), uint64(b))
		if err != nil {
			t.Fatal(err)
		}
		want := journal.RosterDiff(rosters[a-1], rosters[b-1])
		if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Fatalf("roster diff %d %d (-rosters +journal):\n%s", a, b, diff)
		}
	}
}

func TestJournalBoundsBytes(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{MaxBytes: 3000})
	if err != nil {
		t.Fatal(err)
	}
	// Each declaration carries a roster of 40 names: about 1.5 KB an entry,
	// so 3000 bytes hold the newest one or two, however many Keep allows.
	for gen := uint64(1); gen <= 6; gen++ {
		n := map[string][]netip.Addr{}
		for i := range 40 {
			n[fmt.Sprintf("svc%d.gen%d.internal", i, gen)] = addrs("10.89.0.7")
		}
		d := declaration(gen, gen, n)
		if _, err := j.RecordDeclaration(d, journal.RosterDiff(nil, d.Roster), time.Now()); err != nil {
			t.Fatalf("RecordDeclaration(%d): %v", gen, err)
		}
	}
	decls, err := j.Declarations()
	if err != nil {
		t.Fatal(err)
	}
	if len(decls) == 0 || len(decls) > 2 || decls[len(decls)-1].Generation != 6 {
		var gens []uint64
		for _, d := range decls {
			gens = append(gens, d.Generation)
		}
		t.Errorf("declarations kept under a 3000-byte bound: %v; want the newest one or two, ending with 6", gens)
	}
}

// TestRosterEntries: a roster that moves alone (the declaration's
// generation unchanged) is a roster entry named by its roster generation;
// history lists it, roster diff composes across it and the declarations
// around it, the same generation again changes nothing, an older one is
// refused, and a change that was not recorded (an entry pruned, or
// never written) is ErrNotFound rather than a wrong diff.
func TestRosterEntries(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	alpha := func(a string) map[string][]netip.Addr { return map[string][]netip.Addr{"alpha.internal": addrs(a)} }
	r1 := &spec.Roster{Generation: 1, Names: alpha("10.7.0.1")}
	r2 := &spec.Roster{Generation: 2, Names: map[string][]netip.Addr{"alpha.internal": addrs("10.7.0.2"), "beta.internal": addrs("10.7.0.3")}}
	r3 := &spec.Roster{Generation: 3, Names: alpha("10.7.0.2")}
	if _, err := j.RecordDeclaration(declaration(1, 1, r1.Names), journal.RosterDiff(nil, r1), at); err != nil {
		t.Fatal(err)
	}
	e, err := j.RecordRoster("hub", 1, journal.RosterDiff(r1, r2), at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if e.Version != journal.Version || e.RosterGeneration != 2 || e.Generation != 1 || e.Machine != "hub" {
		t.Errorf("RecordRoster = %+v", e)
	}
	if again, err := j.RecordRoster("hub", 1, journal.Diff{From: 1, To: 2, Unknown: true}, at.Add(2*time.Minute)); err != nil || again.RosterDiff.Unknown || !again.Time.Equal(e.Time) {
		t.Errorf("recording roster 2 again = %+v, %v; want the entry recorded first", again, err)
	}
	if _, err := j.RecordRoster("hub", 1, journal.Diff{From: 0, To: 1}, at); !errors.Is(err, journal.ErrOlderGeneration) {
		t.Errorf("recording an older roster: %v, want ErrOlderGeneration", err)
	}
	// A new declaration, its roster moved too.
	if _, err := j.RecordDeclaration(declaration(2, 3, r3.Names), journal.RosterDiff(r2, r3), at.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}

	j, _ = journal.Open(dir, journal.Options{}) // reopened: read from disk
	for _, tc := range []struct {
		a, b uint64
		want string
	}{
		{1, 2, "+ beta.internal 10.7.0.3\n~ alpha.internal 10.7.0.1 -> 10.7.0.2\n"},
		{2, 3, "- beta.internal 10.7.0.3\n"},
		{1, 3, "~ alpha.internal 10.7.0.1 -> 10.7.0.2\n"},
		{2, 1, "- beta.internal 10.7.0.3\n~ alpha.internal 10.7.0.2 -> 10.7.0.1\n"},
		{0, 2, "+ alpha.internal 10.7.0.2\n+ beta.internal 10.7.0.3\n"},
	} {
		d, err := j.RosterDiff(tc.a, tc.b)
		if err != nil || d.String() != tc.want || d.From != tc.a || d.To != tc.b {
			t.Errorf("RosterDiff(%d, %d) = %+v, %v; want\n%s", tc.a, tc.b, d, err, tc.want)
		}
	}
	h, err := j.History()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range h {
		lines = append(lines, e.String())
	}
	want := []string{
		"2025-03-01T12:00:00Z declaration 1: roster 1, 1 containers, mesh_names off; names +1 -0 ~0",
		"2025-03-01T12:01:00Z roster 2 (declaration 1); names +1 -0 ~1",
		"2025-03-01T12:03:00Z declaration 2: roster 3, 1 containers, mesh_names off; names +0 -1 ~0",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}

	// Roster 4 and 5 move alone; 4's entry is lost (pruned, say): the
	// journal says it does not know rather than compose past the hole.
	r4 := &spec.Roster{Generation: 4, Names: alpha("10.7.0.4")}
	r5 := &spec.Roster{Generation: 5, Names: alpha("10.7.0.5")}
	if _, err := j.RecordRoster("hub", 2, journal.RosterDiff(r4, r5), at.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if d, err := j.RosterDiff(3, 5); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("RosterDiff(3, 5) across an unrecorded change = %v, %v; want ErrNotFound", d, err)
	}
	if d, err := j.RosterDiff(4, 5); err != nil || d.String() != "~ alpha.internal 10.7.0.4 -> 10.7.0.5\n" {
		t.Errorf("RosterDiff(4, 5) = %v, %v", d, err)
	}
	for _, ab := range [][2]uint64{{3, 4}, {4, 3}, {2, 4}} {
		if d, err := j.RosterDiff(ab[0], ab[1]); !errors.Is(err, journal.ErrNotFound) {
			t.Errorf("RosterDiff(%d, %d) across an unrecorded change = %v, %v; want ErrNotFound", ab[0], ab[1], d, err)
		}
	}
}
