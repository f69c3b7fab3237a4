package pass

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func roster(gen uint64, names int) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for i := range names {
		r.Names[fmt.Sprintf("n%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}
	}
	return r
}

func TestRosterInForce(t *testing.T) {
	served := roster(5, 20)
	tests := []struct {
		name            string
		served, decl    *spec.Roster
		accepted        uint64
		wantGen         uint64
		update, held    bool
		older, acceptOK bool
	}{
		{name: "first roster", decl: roster(1, 20), wantGen: 1, update: true},
		{name: "newer", served: served, decl: roster(6, 21), wantGen: 6, update: true},
		{name: "same generation", served: served, decl: roster(5, 20), wantGen: 5},
		{name: "older", served: served, decl: roster(4, 20), wantGen: 5, older: true},
		{name: "drops too many: held", served: served, decl: roster(6, 10), wantGen: 5, held: true},
		{name: "held, another generation accepted", served: served, decl: roster(6, 10), accepted: 7, wantGen: 5, held: true},
		{name: "drop accepted", served: served, decl: roster(6, 10), accepted: 6, wantGen: 6, update: true, acceptOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			got := RosterInForce(tc.served, tc.decl, rosterguard.Policy{}, func() uint64 { asked = true; return tc.accepted })
			if got.InForce.Generation != tc.wantGen || got.Update != tc.update || (got.Held != nil) != tc.held || got.Older != tc.older || got.Accepted != tc.acceptOK {
				t.Errorf("RosterInForce = in force %d, update %t, held %v, older %t, accepted %t; want %d, %t, %t, %t, %t",
					got.InForce.Generation, got.Update, got.Held, got.Older, got.Accepted, tc.wantGen, tc.update, tc.held, tc.older, tc.acceptOK)
			}
			if asked != (got.Held != nil || got.Accepted) {
				t.Errorf("the accepted generation was asked: %t; want it asked only when the guard holds the roster", asked)
			}
		})
	}
}

// fixed gives every container one mode.
type fixed spec.Mode

func (m fixed) Modes(cs []spec.Container, _ []reconcile.Observed) map[string]spec.Mode {
	out := map[string]spec.Mode{}
	for _, c := range cs {
		out[c.Name] = spec.Mode(m)
	}
	return out
}

// TestComputeRendersWithTheRosterInForce: copy-mode hosts come from the
// roster given, not the declared one.
func TestComputeRendersWithTheRosterInForce(t *testing.T) {
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOff, Roster: roster(2, 3),
		Containers: []spec.Container{{Name: "a", Image: "busybox"}}}
	inForce := roster(1, 1)
	c, err := Compute(context.Background(), Input{Declaration: d, Roster: inForce, Gate: fixed{Names: spec.Copy}, Planner: rec})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Rendered[0].Hosts); n != 1 {
		t.Errorf("rendered with %d hosts, want 1 (the roster in force)", n)
	}
	if c.Modes["a"].Names != spec.Copy || c.Plan.Count(reconcile.Create) != 1 {
		t.Errorf("modes %v, plan %v; want a in copy mode, created", c.Modes, c.Plan)
	}
}

// TestComputeHold: the hold is judged on the plan's replacements (creates
// do not count), at more than HoldAbove; 0 never holds; the operator's
// approval is asked only when the plan would be held, and releases only
// its own generation.
func TestComputeHold(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Budget: reconcile.Budget{Max: 100, Window: 1}})
	if err != nil {
		t.Fatal(err)
	}
	decl := func(gen uint64, image string, n int) *spec.Declaration {
		d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: gen, MeshNames: spec.FlagOff, Roster: roster(1, 1)}
		for i := range n {
			d.Containers = append(d.Containers, spec.Container{Name: fmt.Sprintf("c%d", i), Image: image})
		}
		return d
	}
	compute := func(d *spec.Declaration, holdAbove int, approved uint64) (*Computed, bool) {
		t.Helper()
		asked := false
		observed, _ := rt.List(ctx)
		c, err := Compute(ctx, Input{Declaration: d, Roster: d.Roster, Gate: fixed{Names: spec.Copy}, Observed: observed, Planner: rec,
			HoldAbove: holdAbove, Approved: func() uint64 { asked = true; return approved }})
		if err != nil {
			t.Fatal(err)
		}
		return c, asked
	}
	c, asked := compute(decl(1, "a:1", 4), 2, 0)
	if c.Hold != nil || asked {
		t.Fatalf("4 creates with HoldAbove 2: hold %+v, approval asked %t; want none", c.Hold, asked)
	}
	if _, err := rec.Apply(ctx, c.Plan); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		d         *spec.Declaration
		holdAbove int
		approved  uint64
		held      bool
		approvedH bool
	}{
		{"4 replacements, at most 4", decl(2, "a:2", 4), 4, 0, false, false},
		{"4 replacements, at most 3", decl(2, "a:2", 4), 3, 0, true, false},
		{"4 replacements, hold off", decl(2, "a:2", 4), 0, 0, false, false},
		{"approved", decl(2, "a:2", 4), 3, 2, false, true},
		{"another generation approved", decl(3, "a:2", 4), 3, 2, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, asked := compute(tc.d, tc.holdAbove, tc.approved)
			if c.Hold.Held() != tc.held || (c.Hold != nil && c.Hold.Approved) != tc.approvedH {
				t.Fatalf("hold %+v, want held %t approved %t", c.Hold, tc.held, tc.approvedH)
			}
			if asked != (c.Hold != nil) {
				t.Errorf("approval asked %t with hold %+v", asked, c.Hold)
			}
			if c.Hold != nil && (len(c.Hold.Replacements) != 4 || c.Hold.Replacements[0].Reason != "image: a:1 -> a:2" || c.Hold.Generation != tc.d.Generation) {
				t.Errorf("hold %+v, want declaration %d's 4 replacements with their reasons", c.Hold, tc.d.Generation)
			}
		})
	}
}

// TestComputeHoldsRemovingEverything: a declaration that removes every
// container of the machine is held like one that replaces them (it was
// applied at once).
func TestComputeHoldsRemovingEverything(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Budget: reconcile.Budget{Max: 100, Window: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOff, Roster: roster(1, 1)}
	for i := range 4 {
		d.Containers = append(d.Containers, spec.Container{Name: fmt.Sprintf("c%d", i), Image: "a:1"})
	}
	compute := func(d *spec.Declaration) *Computed {
		t.Helper()
		observed, _ := rt.List(ctx)
		c, err := Compute(ctx, Input{Declaration: d, Roster: d.Roster, Gate: fixed{Names: spec.Copy}, Observed: observed, Planner: rec, HoldAbove: 3})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := rec.Apply(ctx, compute(d).Plan); err != nil {
		t.Fatal(err)
	}
	empty := *d
	empty.Generation, empty.Containers = 2, nil
	c := compute(&empty)
	if !c.Hold.Held() || len(c.Hold.Removals) != 4 || len(c.Hold.Replacements) != 0 || c.Hold.Removals[0].Reason != "no longer declared" {
		t.Errorf("a declaration removing 4 containers with HoldAbove 3: hold %+v, want held for 4 removals", c.Hold)
	}
}
