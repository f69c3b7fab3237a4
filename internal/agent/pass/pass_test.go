package pass

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/rosterguard"
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
