package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/pass"
	"github.com/meshhost/meshhost/internal/agent/rosterguard"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "plan", summary: "dry run: what a pass would do, and why (exit 0: nothing, 2: changes)", run: runPlan})
	register(command{name: "explain", summary: "why a container would be replaced, field by field, old and new", run: runExplain})
}

// planFlags are the flags plan and explain share.
type planFlags struct {
	declaration, state, socket, output *string
}

func addPlanFlags(fs *flag.FlagSet) planFlags {
	return planFlags{
		declaration: fs.String("declaration", "", "the declaration to plan for (default: the one the agent applied last, STATE/declaration.json)"),
		state:       fs.String("state", statedir.Default, "the agent's state directory (served roster, migration state, saved declaration)"),
		socket:      fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)"),
		output:      fs.String("output", "text", "output format: text or json"),
	}
}

// plan computes, without changing anything, what the agent's next pass
// would do for the declaration (planPass).
func (f planFlags) plan(ctx context.Context, env *environment) (*planned, error) {
	dir := statedir.New(*f.state)
	var decl *spec.Declaration
	if *f.declaration != "" {
		data, err := os.ReadFile(*f.declaration)
		if err != nil {
			return nil, err
		}
		if specjson.IsDeclarationDelta(data) {
			// A delta: what the declaration the agent saved would become.
			if decl, err = applyDelta(dir, data); err != nil {
				return nil, fmt.Errorf("%s: %w", *f.declaration, err)
			}
		} else if decl, err = specjson.ParseDeclaration(data); err != nil {
			return nil, fmt.Errorf("%s: %w", *f.declaration, err)
		}
	} else {
		d, err := agent.LoadDeclaration(dir)
		if err != nil {
			return nil, err
		}
		if d == nil {
			return nil, fmt.Errorf("no declaration: pass --declaration FILE (the agent has applied none in %s)", dir.Path())
		}
		decl = d
	}
	rt, inPlace, err := env.runtime(ctx, podmanSocket(env, *f.socket))
	if err != nil {
		return nil, err
	}
	return planPass(ctx, dir, decl, rt, inPlace)
}

// applyDelta returns the declaration the agent saved in dir changed by the
// declaration delta data, as the agent would take it.
func applyDelta(dir statedir.Dir, data []byte) (*spec.Declaration, error) {
	dd, err := specjson.ParseDeclarationDelta(data)
	if err != nil {
		return nil, err
	}
	d, err := agent.LoadDeclaration(dir)
	switch {
	case err != nil:
		return nil, err
	case d == nil:
		return nil, fmt.Errorf("a roster delta applies to the declaration in force, and the agent has applied none in %s", dir.Path())
	case dd.Machine != d.Machine:
		return nil, fmt.Errorf("the delta is for machine %q, the declaration in force for %q", dd.Machine, d.Machine)
	case dd.Generation <= d.Generation:
		return nil, fmt.Errorf("the delta is generation %d, the declaration in force %d", dd.Generation, d.Generation)
	}
	if _, err := d.Roster.Apply(dd.Roster); err != nil {
		return nil, err
	}
	d.Generation = dd.Generation
	return d, nil
}

// planned is what planPass found: the pass, and the roster it renders with.
type planned struct {
	*pass.Computed
	Roster pass.Roster
}

// planPass computes what the agent's next pass would do for decl on rt,
// from the agent's state in dir, through package pass as the agent does:
// the roster in force (the one the resolver serves, the roster guard and
// the operator's accepted generation decide whether decl's replaces it),
// the migration gate's state, and the reconciler's owner and adoptions.
// The gate works on a copy of its state: a dry run never writes anything.
// What it cannot foresee is what the pass itself would learn first (a probe
// of a network changing its mode).
func planPass(ctx context.Context, dir statedir.Dir, decl *spec.Declaration, rt reconcile.Runtime, inPlace bool) (*planned, error) {
	served, err := resolver.LoadState(dir.Roster()) // the roster file and the deltas logged beside it
	if errors.Is(err, fs.ErrNotExist) {
		served, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the resolver's saved roster %s: %w", dir.Roster(), err)
	}
	roster := pass.RosterInForce(served, decl.Roster, rosterguard.Policy{}, func() uint64 { return agent.AcceptedRoster(dir) })

	scratch, err := os.MkdirTemp("", "meshhost-plan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	gatePath := statedir.New(scratch).Migrations()
	if data, err := os.ReadFile(dir.Migrations()); err == nil {
		if err := os.WriteFile(gatePath, data, 0o600); err != nil {
			return nil, err
		}
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: gatePath, Owner: decl.Machine})
	if err != nil {
		return nil, err
	}
	if err := gate.SetFlag(decl.MeshNames); err != nil {
		return nil, err
	}
	observed, err := rt.List(ctx)
	if err != nil {
		return nil, err
	}
	rstate, _ := loadReconcileState(dir.Reconciler(), slog.New(slog.DiscardHandler))
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: decl.Machine, NoInPlaceUpdates: !inPlace, Adoptions: rstate.Adoptions, BudgetUsed: rstate.BudgetUsed})
	if err != nil {
		return nil, err
	}
	c, err := pass.Compute(ctx, pass.Input{Declaration: decl, Roster: roster.InForce, Gate: gate, Observed: observed, Planner: rec})
	if err != nil {
		return nil, err
	}
	return &planned{Computed: c, Roster: roster}, nil
}

// actionJSON is one action of `meshhost plan --output json`.
type actionJSON struct {
	Kind      string          `json:"kind"`
	Container string          `json:"container"`
	Reason    string          `json:"reason,omitempty"`
	Changes   []digest.Change `json:"changes,omitempty"`
}

func runPlan(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "plan")
	f := addPlanFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *f.output != "text" && *f.output != "json" {
		return 2, fmt.Errorf("--output %q: want text or json", *f.output)
	}
	pl, err := f.plan(ctx, env)
	if err != nil {
		return 1, err
	}
	p := pl.Plan
	changes := p.Changes()
	code := 0
	if len(changes) > 0 {
		code = 2
	}
	if *f.output == "json" {
		out := struct {
			Actions   []actionJSON `json:"actions"`
			Unmanaged int          `json:"unmanaged_left_alone"`
			Roster    rosterJSON   `json:"roster"`
		}{Actions: []actionJSON{}, Unmanaged: p.Unmanaged, Roster: rosterOf(pl.Roster)}
		for _, a := range changes {
			out.Actions = append(out.Actions, actionJSON{string(a.Kind), a.Name, a.Reason, a.Changes})
		}
		return code, json.NewEncoder(env.stdout).Encode(out)
	}
	printRoster(env.stdout, pl.Roster)
	printPlan(env.stdout, p)
	return code, nil
}

// rosterJSON is the roster a planned pass renders with.
type rosterJSON struct {
	InForce uint64 `json:"in_force"`
	Update  bool   `json:"update,omitempty"` // the declared roster goes in force first
	Held    string `json:"held,omitempty"`   // why the declared roster is held
	Older   bool   `json:"older,omitempty"`  // the declared roster is older than the one served
}

func rosterOf(r pass.Roster) rosterJSON {
	out := rosterJSON{InForce: r.InForce.Generation, Update: r.Update, Older: r.Older}
	if r.Held != nil {
		out.Held = r.Held.Error()
	}
	return out
}

// printRoster says when the pass would not render with the declared
// roster.
func printRoster(w io.Writer, r pass.Roster) {
	switch {
	case r.Held != nil:
		fmt.Fprintf(w, "roster held: %v\n(containers keep roster generation %d)\n", r.Held, r.InForce.Generation)
	case r.Older:
		fmt.Fprintf(w, "the declared roster is older than the one served: roster generation %d stays in force\n", r.InForce.Generation)
	}
}

func printPlan(w io.Writer, p *reconcile.Plan) {
	changes := p.Changes()
	if len(changes) == 0 {
		fmt.Fprintf(w, "nothing to do: %d containers match their declaration\n", len(p.Actions))
	}
	for _, a := range changes {
		fmt.Fprintf(w, "%-8s %s", a.Kind, a.Name)
		if a.Reason != "" {
			fmt.Fprintf(w, ": %s", a.Reason)
		}
		fmt.Fprintln(w)
	}
	if p.Unmanaged > 0 {
		fmt.Fprintf(w, "(%d containers not managed by meshhost are left alone)\n", p.Unmanaged)
	}
}

func runExplain(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "explain")
	f := addPlanFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: meshhost explain [flags] CONTAINER")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2, err
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2, errors.New("name one container")
	}
	name := pos[0]
	pl, err := f.plan(ctx, env)
	if err != nil {
		return 1, err
	}
	for _, a := range pl.Plan.Actions {
		if a.Name != name {
			continue
		}
		if *f.output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(actionJSON{string(a.Kind), a.Name, a.Reason, a.Changes})
		}
		fmt.Fprintf(env.stdout, "%s: %s", name, a.Kind)
		if a.Reason != "" {
			fmt.Fprintf(env.stdout, " (%s)", a.Reason)
		}
		fmt.Fprintln(env.stdout)
		for _, c := range a.Changes {
			fmt.Fprintf(env.stdout, "  %-12s %-7s %s\n", c.Field, c.Mutability, changeText(c))
		}
		return 0, nil
	}
	return 1, fmt.Errorf("%q is neither declared nor a managed container", name)
}

func changeText(c digest.Change) string {
	if len(c.Added)+len(c.Removed) > 0 {
		var parts []string
		for _, a := range c.Added {
			parts = append(parts, "+"+a)
		}
		for _, r := range c.Removed {
			parts = append(parts, "-"+r)
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("old %s  new %s", orDash(c.Old), orDash(c.New))
}

func orDash(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}
