package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/spec"
)

// TestRosterMovesAloneAreJournalled: a roster that moves without its
// declaration (the NATS source's roster commits, through PutRosterDelta
// or Put with the declaration's generation) is journalled by its roster
// generation, one entry per move even when one pass takes two, held or
// frozen passes included (the roster is in force either way), and after a
// restart; so that `meshhost history` lists each and `meshhost roster diff
// A B` answers for any two rosters the machine had, across moves alone and
// declarations alike, as the rosters themselves differ.
func TestRosterMovesAloneAreJournalled(t *testing.T) {
	ctx := context.Background()
	jdir := t.TempDir()
	j, err := journal.Open(jdir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Journal = j })
	dir := statedir.New(f.state)
	rosters := map[uint64]*spec.Roster{}
	took := func() {
		t.Helper()
		r, _ := f.source.Roster()
		rosters[r.Generation] = r
	}
	pass := func(a *Agent) {
		t.Helper()
		if _, err := a.Pass(ctx); err != nil {
			t.Fatalf("Pass: %v", err)
		}
	}
	put := func(src *declsource.Source, declGen uint64, d *spec.RosterDelta) {
		t.Helper()
		if err := src.PutRosterDelta("ace", declGen, d, "nats"); err != nil {
			t.Fatalf("PutRosterDelta %d -> %d: %v", d.From, d.To, err)
		}
		took()
	}
	addr := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }

	f.push(t, declaration(1, spec.FlagOn, 1, 5))
	took()
	put(f.source, 1, &spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"svc1.node1.internal": addr("10.99.0.1")}})
	pass(f.agent)
	// Two moves before the next pass: two entries.
	put(f.source, 1, &spec.RosterDelta{From: 2, To: 3, Set: map[string][]netip.Addr{"new.internal": addr("10.99.0.2")}})
	put(f.source, 1, &spec.RosterDelta{From: 3, To: 4, Remove: []string{"svc2.node2.internal"}})
	pass(f.agent)
	// A whole roster with the declaration's generation (natssource's Put).
	d, _ := f.source.Current()
	d.Roster.Generation = 5
	d.Roster.Names["svc0.node0.internal"] = addr("10.99.0.3")
	if err := f.source.Put(d, "nats"); err != nil {
		t.Fatal(err)
	}
	took()
	pass(f.agent)
	// Frozen: the pass applies nothing, the roster moves all the same.
	if err := SetFrozen(dir, &Freeze{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	put(f.source, 1, &spec.RosterDelta{From: 5, To: 6, Set: map[string][]netip.Addr{"new.internal": addr("10.99.0.4")}})
	pass(f.agent)
	if err := SetFrozen(dir, nil); err != nil {
		t.Fatal(err)
	}
	// A new declaration, its roster moved with it.
	f.push(t, deltaDoc(2, 6, 7, map[string]string{"newer.internal": "10.99.0.5"}))
	took()

	// Restarted: a new agent on the saved declaration, the resolver the
	// same (a service of its own); the roster moves before its first pass.
	saved, err := LoadSaved(dir)
	if err != nil || saved == nil || saved.Declaration.Generation != 2 {
		t.Fatalf("LoadSaved = %+v, %v", saved, err)
	}
	j2, err := journal.Open(jdir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src2 := declsource.New(declsource.Config{Machine: "ace", Initial: saved.Declaration})
	g := newFixture(t, true, func(c *Config) {
		c.Journal, c.State, c.Saved, c.Source, c.Resolver = j2, dir, saved, src2, f.srv
	})
	f.source = src2
	pass(g.agent) // serves the saved roster: the source learns the generation served
	put(src2, 2, &spec.RosterDelta{From: 7, To: 8, Remove: []string{"newer.internal"}})
	pass(g.agent)

	for a := uint64(1); a <= 8; a++ {
		for b := uint64(1); b <= 8; b++ {
			got, err := j2.RosterDiff(a, b)
			if err != nil {
				t.Errorf("roster diff %d %d: %v", a, b, err)
				continue
			}
			want := journal.RosterDiff(rosters[a], rosters[b])
			if diff := cmp.Diff(want, got, cmpRoster...); diff != "" {
				t.Errorf("roster diff %d %d (-rosters +journal):\n%s", a, b, diff)
			}
		}
	}
	h, err := j2.History()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	line := ""
	for _, e := range h {
		switch {
		case e.Declaration != nil:
			got = append(got, "declaration "+itoa(e.Declaration.Generation)+" roster "+itoa(e.Declaration.RosterGeneration))
		case e.Roster != nil:
			got = append(got, "roster "+itoa(e.Roster.RosterGeneration)+" of declaration "+itoa(e.Roster.Generation))
			if e.Roster.RosterGeneration == 2 {
				line = e.String()
			}
		}
	}
	want := []string{"declaration 1 roster 1", "roster 2 of declaration 1", "roster 3 of declaration 1", "roster 4 of declaration 1",
		"roster 5 of declaration 1", "roster 6 of declaration 1", "declaration 2 roster 7", "roster 8 of declaration 2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if !strings.HasSuffix(line, " roster 2 (declaration 1); names +0 -0 ~1") {
		t.Errorf("history line of roster 2 = %q", line)
	}
}
