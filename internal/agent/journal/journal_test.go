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
// entries (each a small diff) lie between them, and whichever way round.
func TestRosterDiffComposes(t *testing.T) {
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var rosters []*spec.Roster
	var prev *spec.Roster
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
		d := declaration(gen, gen, n)
		if _, err := j.RecordDeclaration(d, journal.RosterDiff(prev, d.Roster), time.Now()); err != nil {
			t.Fatal(err)
		}
		rosters = append(rosters, d.Roster)
		prev = d.Roster
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
