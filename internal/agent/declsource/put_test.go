package declsource

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/spec"
)

func TestPut(t *testing.T) {
	decl := func(machine string, gen, rosterGen uint64) *spec.Declaration {
		return decltest.Declaration(gen).Machine(machine).Flag(spec.FlagOff).RosterGen(rosterGen).Zones().Name("a.internal", "10.0.0.1").Value()
	}
	s := New(Config{Machine: "ace"})
	changed := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		name         string
		d            *spec.Declaration
		stale        bool
		fails        bool
		wantGen      uint64
		wantRoster   uint64
		wantSignaled bool
	}{
		{"first", decl("ace", 5, 3), false, false, 5, 3, true},
		{"roster moves alone", decl("ace", 5, 4), false, false, 5, 4, true},
		{"same again", decl("ace", 5, 4), false, false, 5, 4, false},
		{"older roster, same generation", decl("ace", 5, 2), true, true, 5, 4, false},
		// An older generation with a newer roster moves the roster alone
		// (TestRosterMovesUnderALocalRollback); with none, it is refused.
		{"older generation", decl("ace", 4, 4), true, true, 5, 4, false},
		// Rosters never go back, whatever the declaration generation (as
		// a push is judged: admit.Declaration; Put took it before).
		{"newer generation, older roster", decl("ace", 6, 1), true, true, 5, 4, false},
		{"another machine", decl("novox", 9, 9), false, true, 5, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Put(tc.d, "test")
			if (err != nil) != tc.fails || errors.Is(err, ErrStale) != tc.stale {
				t.Errorf("Put = %v, want failure %v (stale %v)", err, tc.fails, tc.stale)
			}
			cur, origin := s.Current()
			if cur.Generation != tc.wantGen || cur.Roster.Generation != tc.wantRoster || origin != "test" {
				t.Errorf("in force: generation %d roster %d origin %q, want %d, %d, test", cur.Generation, cur.Roster.Generation, origin, tc.wantGen, tc.wantRoster)
			}
			if got := changed(); got != tc.wantSignaled {
				t.Errorf("Changed signalled %v, want %v", got, tc.wantSignaled)
			}
			if doc, _ := s.Document(); doc != nil {
				t.Error("Document() after Put is not nil: the agent would save bytes of another declaration")
			}
		})
	}
}

// TestPutRosterDelta: a roster change alone is applied to the roster in
// force in place and recorded as a delta (not Whole), at the declaration
// generation in force; what does not apply is refused as a pushed delta
// is, with the same refusal reasons counted, and changes nothing.
func TestPutRosterDelta(t *testing.T) {
	a1, a9 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")
	reg := prometheus.NewRegistry()
	s := New(Config{Machine: "ace", Registerer: reg})
	if err := s.PutRosterDelta("ace", 5, &spec.RosterDelta{From: 0, To: 3, Set: map[string][]netip.Addr{"a.internal": {a1}}}, "nats"); !errors.Is(err, ErrDeltaBase) || !errors.Is(err, spec.ErrDeltaBase) {
		t.Errorf("PutRosterDelta before any declaration = %v, want ErrDeltaBase (and spec.ErrDeltaBase)", err)
	}
	d := decltest.Declaration(5).Flag(spec.FlagOff).RosterGen(3).Name("a.internal", a1.String()).Name("b.internal", a1.String()).Value()
	if err := s.Put(d, "nats"); err != nil {
		t.Fatal(err)
	}
	<-s.Changed()
	_, seq := s.Roster()

	delta := &spec.RosterDelta{From: 3, To: 4, Set: map[string][]netip.Addr{"a.internal": {a9}, "c.internal": {a1}}, Remove: []string{"b.internal"}}
	if err := s.PutRosterDelta("ace", 5, delta, "nats"); err != nil {
		t.Fatalf("PutRosterDelta(3 -> 4) = %v", err)
	}
	select {
	case <-s.Changed():
	default:
		t.Error("Changed not signalled")
	}
	cur, origin := s.Current()
	want := map[string][]netip.Addr{"a.internal": {a9}, "c.internal": {a1}}
	if diff := cmp.Diff(want, cur.Roster.Names, cmpopts.EquateComparable(netip.Addr{})); diff != "" || cur.Generation != 5 || cur.Roster.Generation != 4 || origin != "nats" {
		t.Errorf("in force: generation %d, roster %d, origin %q, names (-want +got):\n%s", cur.Generation, cur.Roster.Generation, origin, diff)
	}
	changes, ok := s.ChangesSince(seq)
	if !ok || len(changes) != 1 {
		t.Fatalf("ChangesSince = %d changes, %v; want 1", len(changes), ok)
	}
	if c := changes[0]; c.Whole || c.Generation != 5 || c.Roster != delta || c.Undo.From != 4 || c.Undo.To != 3 ||
		!slices.Equal(c.Undo.Remove, []string{"c.internal"}) || len(c.Undo.Set) != 2 {
		t.Errorf("recorded change = %+v, undo %+v; want the delta itself, not Whole, at declaration generation 5", c, c.Undo)
	}
	if err := s.PutRosterDelta("ace", 5, delta, "nats"); err != nil {
		t.Errorf("the same delta again = %v, want no fault", err)
	}
	if again, _ := s.ChangesSince(seq + 1); len(again) != 0 {
		t.Errorf("the same delta again recorded %d changes", len(again))
	}

	one := func(from, to uint64) *spec.RosterDelta {
		return &spec.RosterDelta{From: from, To: to, Set: map[string][]netip.Addr{"d.internal": {a1}}}
	}
	for _, tc := range []struct {
		name    string
		machine string
		declGen uint64
		d       *spec.RosterDelta
		is      error
		refusal Refusal
		reason  string
	}{
		{"from another roster", "ace", 5, one(2, 6), ErrDeltaBase, RefusedDeltaBase, "roster_delta.from: 2, but the roster in force is generation 4"},
		// A delta to an older roster is from another base, as a pushed
		// one is judged (admit.RosterDelta; roster_older before).
		{"older roster", "ace", 5, one(1, 2), ErrDeltaBase, RefusedDeltaBase, "roster_delta.from: 1, but the roster in force is generation 4"},
		{"newer declaration", "ace", 6, one(4, 5), ErrDeltaBase, RefusedDeltaBase, "the declaration in force is generation 5"},
		{"another machine", "bob", 5, one(4, 5), nil, RefusedOtherMachine, `machine: "bob" is another machine`},
		{"removes a name not there", "ace", 5, &spec.RosterDelta{From: 4, To: 5, Remove: []string{"b.internal"}}, nil, RefusedInvalid, `roster_delta.remove[0]: "b.internal" is not in roster generation 4`},
		{"invalid", "ace", 5, &spec.RosterDelta{From: 4, To: 5, Set: map[string][]netip.Addr{"-bad-": {a1}}}, nil, RefusedInvalid, "-bad-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(t, reg)
			err := s.PutRosterDelta(tc.machine, tc.declGen, tc.d, "nats")
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("PutRosterDelta = %v, want %v saying %q", err, tc.is, tc.reason)
			}
			if got := refusalOf(err); got != tc.refusal {
				t.Errorf("refusal = %q, want %q", got, tc.refusal)
			}
			if after := refusedCounts(t, reg); after[string(tc.refusal)] != before[string(tc.refusal)]+1 {
				t.Errorf("refused{reason=%q} went from %v to %v, want one more", tc.refusal, before[string(tc.refusal)], after[string(tc.refusal)])
			}
			cur, _ := s.Current()
			if cur.Generation != 5 || cur.Roster.Generation != 4 || len(cur.Roster.Names) != 2 {
				t.Errorf("after a refusal: generation %d, roster %d, %d names; want 5, 4, 2 (unchanged)", cur.Generation, cur.Roster.Generation, len(cur.Roster.Names))
			}
		})
	}

	// A roster older than the one the resolver serves is refused too.
	s.SetServed(9, nil)
	if err := s.PutRosterDelta("ace", 5, one(4, 5), "nats"); refusalOf(err) != RefusedRosterOlder || !errors.Is(err, ErrStale) {
		t.Errorf("PutRosterDelta(4 -> 5) with 9 served = %v, want roster_older", err)
	}
	// A declaration change after deltas is still Put whole.
	d2 := *d
	d2.Generation, d2.Roster = 6, &spec.Roster{Generation: 10, Names: map[string][]netip.Addr{"a.internal": {a9}}}
	if err := s.Put(&d2, "nats"); err != nil {
		t.Errorf("Put(generation 6) after deltas = %v", err)
	}
}

// TestPutGenerationReused: Put refuses the declaration generation in force
// with other containers as Offer does (generation_reused), and still takes
// the same declaration with a newer roster.
func TestPutGenerationReused(t *testing.T) {
	decl := func(rosterGen uint64, image string) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
			Containers: []spec.Container{{Name: "web", Image: image}},
			Roster:     &spec.Roster{Generation: rosterGen, Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}}
	}
	s := New(Config{Machine: "ace"})
	if err := s.Put(decl(3, "web:1"), "test"); err != nil {
		t.Fatalf("Put first = %v", err)
	}
	for _, put := range []func(d *spec.Declaration) error{
		func(d *spec.Declaration) error { return s.Put(d, "test") },
		func(d *spec.Declaration) error { _, err := s.Offer(mustMarshal(t, d), "test"); return err },
	} {
		err := put(decl(3, "web:2"))
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Reason != RefusedGenerationReused {
			t.Errorf("same generation, other image = %v, want %s", err, RefusedGenerationReused)
		}
	}
	if err := s.Put(decl(4, "web:2"), "test"); err == nil {
		t.Errorf("same generation, other image, newer roster = nil, want %s", RefusedGenerationReused)
	}
	if err := s.Put(decl(4, "web:1"), "test"); err != nil {
		t.Errorf("roster moves alone = %v, want nil", err)
	}
	if cur, _ := s.Current(); cur.Containers[0].Image != "web:1" || cur.Roster.Generation != 4 {
		t.Errorf("in force: image %q roster %d, want web:1, 4", cur.Containers[0].Image, cur.Roster.Generation)
	}
}

func mustMarshal(t *testing.T, d *spec.Declaration) []byte {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRosterMovesUnderALocalRollback: after an operator's rollback (a
// pushed declaration of a generation above the controller's), the NATS
// source's roster commits, which carry the controller's older declaration
// generation, still move the roster, as a delta and whole, and the
// rollback's containers stay (issue 22 defect 4: on 9933242 both were
// refused as older, and the machine's names froze for good). A roster
// that does not move is still refused as older.
func TestRosterMovesUnderALocalRollback(t *testing.T) {
	a1, a2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	s := New(Config{Machine: "ace"})
	controller := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
		Containers: []spec.Container{{Name: "web", Image: "busybox:2"}},
		Roster:     &spec.Roster{Generation: 3, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"a.internal": {a1}}}}
	if err := s.Put(controller, "nats"); err != nil {
		t.Fatal(err)
	}
	rollback := []byte(`{"schema": 1, "machine": "ace", "generation": 8, "mesh_names": "off",
	  "roster": {"generation": 3, "zones": ["internal"], "names": {"a.internal": ["10.0.0.1"]}},
	  "containers": [{"name": "web", "image": "busybox:1"}]}`)
	if _, err := s.Offer(rollback, "push"); err != nil {
		t.Fatalf("the rollback: %v", err)
	}

	delta := &spec.RosterDelta{From: 3, To: 4, Set: map[string][]netip.Addr{"b.internal": {a2}}}
	if err := s.PutRosterDelta("ace", 7, delta, "nats"); err != nil {
		t.Fatalf("a roster commit of declaration 7 under rollback 8: %v, want it applied", err)
	}
	whole := *controller
	whole.Roster = &spec.Roster{Generation: 5, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"a.internal": {a2}, "b.internal": {a2}}}
	if err := s.Put(&whole, "nats"); err != nil {
		t.Fatalf("declaration 7 with roster 5 under rollback 8: %v, want its roster taken", err)
	}
	cur, _ := s.Current()
	if cur.Generation != 8 || cur.Containers[0].Image != "busybox:1" || cur.Roster.Generation != 5 || len(cur.Roster.Names) != 2 {
		t.Errorf("in force: declaration %d, image %s, roster %d with %d names; want the rollback (8, busybox:1) with roster 5 and 2 names",
			cur.Generation, cur.Containers[0].Image, cur.Roster.Generation, len(cur.Roster.Names))
	}
	if err := s.Put(&whole, "nats"); refusalOf(err) != RefusedOlder {
		t.Errorf("declaration 7 with the roster in force again = %v, want older_generation (nothing moves)", err)
	}
}
