package pass_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// Example computes two passes of a host agent over the in-memory runtime:
// the first creates the declared containers, the second, over what the
// first made, has nothing to do.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pass-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace"})
	if err != nil {
		log.Fatal(err)
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(dir, "migrations.json"), Owner: "ace"})
	if err != nil {
		log.Fatal(err)
	}
	d := &spec.Declaration{
		Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOff,
		Roster: &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{
			"db.internal": {netip.MustParseAddr("10.0.0.2")},
		}},
		Containers: []spec.Container{
			{Name: "db", Image: "localhost/db:1"},
			{Name: "web", Image: "localhost/web:1", DependsOn: []string{"db"}},
		},
	}
	if err := gate.Declare(d); err != nil {
		log.Fatal(err)
	}
	for i := range 2 {
		observed, err := rt.List(ctx)
		if err != nil {
			log.Fatal(err)
		}
		c, err := pass.Compute(ctx, pass.Input{Declaration: d, Roster: d.Roster, Gate: gate, Observed: observed, Planner: rec, HoldAbove: 10})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("pass %d: web in %s mode, hosts %v\n", i+1, c.Modes["web"].Names, c.Rendered[1].Hosts)
		for _, a := range c.Plan.Actions {
			fmt.Printf("  %s %s\n", a.Kind, a.Name)
		}
		if c.Hold.Held() {
			fmt.Println(c.Hold)
			continue
		}
		if _, err := rec.Apply(ctx, c.Plan); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// pass 1: web in copy mode, hosts [{db.internal 10.0.0.2}]
	//   create db
	//   create web
	// pass 2: web in copy mode, hosts [{db.internal 10.0.0.2}]
	//   keep db
	//   keep web
}

// ExampleRosterInForce: a declared roster that drops most of the names
// served is held by the guard, and the served one stays in force, until
// the operator accepts its generation.
func ExampleRosterInForce() {
	served := &spec.Roster{Generation: 4, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for i := range 10 {
		served.Names[fmt.Sprintf("n%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}
	}
	declared := &spec.Roster{Generation: 5, Zones: served.Zones, Names: map[string][]netip.Addr{
		"n0.internal": served.Names["n0.internal"],
	}}

	r := pass.RosterInForce(served, declared, rosterguard.DefaultPolicy, nil)
	fmt.Println("in force:", r.InForce.Generation, "update:", r.Update)
	fmt.Println("held:", r.Held)

	accepted := func() uint64 { return 5 } // meshhost roster accept 5
	r = pass.RosterInForce(served, declared, rosterguard.DefaultPolicy, accepted)
	fmt.Println("in force:", r.InForce.Generation, "update:", r.Update, "accepted:", r.Accepted)
	// Output:
	// in force: 4 update: false
	// held: roster generation 5 drops 9 of 10 names at once (more than 25%): n1.internal, n2.internal, n3.internal, n4.internal, n5.internal, n6.internal, n7.internal, n8.internal, n9.internal; held, the previous roster keeps serving. If the drop is intended, accept it with `meshhost roster accept 5`
	// in force: 5 update: true accepted: true
}
