// Command hostagent is a host agent of its own, built on meshhost's public
// packages only, as an existing host agent would import them: each pass
// decides the roster in force (pass.RosterInForce) and serves it (resolver),
// computes the containers' name modes, renderings and plan (pass.Compute,
// with a migrations.Gate and a reconcile.Reconciler), and applies the plan
// unless the blast-radius hold keeps it back.
//
// It runs over the in-memory runtime (reconcile/memory) and a scripted
// controller and operator (script), one step a pass. A real agent puts
// reconcile/podman's runtime in its place and takes declarations and
// operator controls as they arrive. It prints what each pass decided, and a lookup of a mesh name
// from the resolver it serves on loopback.
//
// It is a module of its own (go.mod replaces meshhost with this checkout),
// under a path outside meshhost's, so that the go command lets it import
// nothing internal: meshhost's deptest builds and runs it and compares
// what it prints with output.txt (TestHostAgentExample).
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

const machine = "ace"

// holdAbove holds a declaration whose plan replaces or removes more than
// this many containers at once (the agent's --hold-above).
const holdAbove = 2

// agent is what the loop keeps from one pass to the next.
type agent struct {
	rt    *memory.Runtime
	rec   *reconcile.Reconciler
	gate  *migrations.Gate
	dns   *resolver.Server
	cache pass.Cache
	// approved is the declaration generation the operator let past the
	// hold (the agent's `meshhost approve`).
	approved uint64
}

// step is one pass's input: the declaration in force and, when not 0, the
// declaration generation the operator approves first.
type step struct {
	d       *spec.Declaration
	approve uint64
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "hostagent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, err := open(dir)
	if err != nil {
		return err
	}
	defer a.dns.Close()
	for _, s := range script() {
		if s.approve != 0 {
			fmt.Printf("operator approves declaration %d\n", s.approve)
			a.approved = s.approve
		}
		if err := a.pass(ctx, s.d); err != nil {
			return fmt.Errorf("declaration %d: %w", s.d.Generation, err)
		}
	}
	return a.lookup(ctx, "db.internal")
}

// open makes the agent's parts: the runtime, the reconciler, the gate (its
// state file in dir) and the resolver, listening on loopback.
func open(dir string) (*agent, error) {
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: machine})
	if err != nil {
		return nil, err
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(dir, "migrations.json"), Owner: machine})
	if err != nil {
		return nil, err
	}
	dns, err := resolver.New(resolver.Config{
		Upstreams:       []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")},
		NoLoopQuestions: true,
		StatePath:       filepath.Join(dir, "roster.json"),
	})
	if err != nil {
		return nil, err
	}
	if err := dns.Listen(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		dns.Close()
		return nil, err
	}
	return &agent{rt: rt, rec: rec, gate: gate, dns: dns}, nil
}

// pass is one pass over declaration d: the roster first, then the
// containers.
func (a *agent) pass(ctx context.Context, d *spec.Declaration) error {
	fmt.Printf("declaration %d, roster %d:\n", d.Generation, d.Roster.Generation)
	inForce, err := a.roster(d.Roster)
	if err != nil {
		return err
	}
	if err := a.gate.Declare(d); err != nil {
		return err
	}
	observed, err := a.rt.List(ctx)
	if err != nil {
		return err
	}
	c, err := pass.Compute(ctx, pass.Input{Declaration: d, Roster: inForce, Gate: a.gate,
		Observed: observed, Planner: a.rec, Cache: &a.cache, HoldAbove: holdAbove,
		Approved: func() uint64 { return a.approved }})
	if err != nil {
		return err
	}
	for _, act := range c.Plan.Changes() {
		fmt.Printf("  plan: %s %s\n", act.Kind, act.Name)
	}
	if len(c.Plan.Changes()) == 0 {
		fmt.Println("  plan: nothing to change")
		return nil
	}
	if c.Hold != nil {
		fmt.Printf("  %s\n", c.Hold)
	}
	if c.Hold.Held() {
		return nil // the containers stay as they are
	}
	res, err := a.rec.Apply(ctx, c.Plan)
	if err != nil {
		return err
	}
	fmt.Printf("  applied: %d created, %d replaced, %d removed\n",
		res.Count(reconcile.Create), res.Count(reconcile.Replace), res.Count(reconcile.Remove))
	return res.Err()
}

// roster decides the roster in force, from the one the resolver serves
// and the declared one, and serves it: the resolver has a newer roster
// before any container is touched.
func (a *agent) roster(declared *spec.Roster) (*spec.Roster, error) {
	served := a.dns.Roster()
	if a.dns.Generation() == 0 {
		served = nil // nothing served yet
	}
	r := pass.RosterInForce(served, declared, rosterguard.DefaultPolicy, nil)
	switch {
	case r.Held != nil:
		fmt.Printf("  roster held: %v\n", r.Held)
	case r.Update:
		if err := a.dns.Update(r.InForce); err != nil {
			return nil, err
		}
		fmt.Printf("  roster %d served: %d names\n", r.InForce.Generation, len(r.InForce.Names))
	}
	return r.InForce, nil
}

// lookup asks the resolver for name, as a container in resolve mode would.
func (a *agent) lookup(ctx context.Context, name string) error {
	addr := a.dns.Listeners()[0].String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	ips, err := r.LookupNetIP(ctx, "ip4", name+".")
	if err != nil {
		return err
	}
	fmt.Printf("lookup %s: %v\n", name, ips)
	return nil
}

// script is the controller's declarations and the operator's approvals,
// one step a pass: the first creates the containers; the second moves a
// name, which every copy-mode container's hosts carry, so it would replace
// them all, and the blast-radius hold keeps it back until the operator
// approves it; the third drops most names at once, which the roster guard
// holds, so the roster in force and the containers stay as they are.
func script() []step {
	names := map[string]string{"db": "10.89.0.2", "web": "10.89.0.3", "cache": "10.89.0.4"}
	for i := range 6 {
		names[fmt.Sprintf("node%d", i)] = fmt.Sprintf("10.89.1.%d", i+1)
	}
	r1 := roster(1, names)
	names["db"] = "10.89.0.12"
	r2 := roster(2, names)
	r3 := roster(3, map[string]string{"db": "10.89.0.12"})
	return []step{
		{d: declaration(1, r1)},
		{d: declaration(2, r2)},
		{d: declaration(2, r2), approve: 2},
		{d: declaration(3, r3)},
	}
}

func declaration(gen uint64, r *spec.Roster) *spec.Declaration {
	return &spec.Declaration{Schema: 1, Machine: machine, Generation: gen, MeshNames: spec.FlagOff, Roster: r,
		Containers: []spec.Container{
			{Name: "db", Image: "localhost/db:1"},
			{Name: "cache", Image: "localhost/cache:1"},
			{Name: "web", Image: "localhost/web:1", DependsOn: []string{"db", "cache"}},
		}}
}

func roster(gen uint64, names map[string]string) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for name, addr := range names {
		r.Names[name+".internal"] = []netip.Addr{netip.MustParseAddr(addr)}
	}
	return r
}
