package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "plan", summary: "dry run: what a pass would do, and why (exit 0: nothing, 2: changes)", define: definePlan})
	register(command{name: "explain", use: "CONTAINER", args: cobra.ExactArgs(1), summary: "why a container would be replaced, field by field, old and new", define: defineExplain})
}

// planFlags are the flags plan and explain share.
type planFlags struct {
	declaration, state, socket, output *string
	// resolverAt is where the agent's resolver is, to read the roster in
	// force from; empty: as the agent recorded it in the state directory.
	resolverAt *string
	// showValues prints env and label values in changes, for a person at a
	// terminal; without it they show as a key and short hashes.
	showValues *bool
	// holdAbove is the blast-radius hold to judge the plan by; -1: the
	// agent's, as its status.json says.
	holdAbove *int
}

func addPlanFlags(fs *flag.FlagSet) planFlags {
	return planFlags{
		declaration: fs.String("declaration", "", "the declaration to plan for (default: the one the agent applied last, STATE/declaration.json)"),
		state:       fs.String("state", statedir.Default, "the agent's state directory (migration state, saved declaration, where its resolver is)"),
		resolverAt:  fs.String("resolver", "", "where the agent's resolver is, to read the roster in force from: embedded (STATE/roster.json) or unix:PATH (meshhost-resolver's control socket); default: where the agent that last started said, in STATE/resolver"),
		socket:      fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)"),
		output:      fs.String("output", "text", "output format: text or json"),
		holdAbove:   holdAboveFlag(fs),
		showValues:  fs.Bool("show-values", false, "show env and label values in changes (they may be secrets: for a person at a terminal, never for logs): the declared ones, and a running container's as their hash (its record keeps no value); without it a change shows the key and a short keyed hash (STATE/hash.key) of the old and new value"),
	}
}

// holdAboveFlag defines --hold-above, whose default is the agent's: -1
// until given, shown as no default of its own (an int flag showed its -1
// beside the text's).
func holdAboveFlag(fs *flag.FlagSet) *int {
	n := -1
	fs.Func("hold-above", "judge the plan's blast radius by this `N` (default: the agent's --hold-above, from STATE/status.json, else 5)", func(v string) error {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return fmt.Errorf("%q: want 0 (never hold) or more", v)
		}
		n = i
		return nil
	})
	return &n
}

// changes returns cs as the output shows them: with values when
// --show-values is given.
func (f planFlags) changes(cs []digest.Change) []digest.Change {
	if !*f.showValues {
		return cs
	}
	out := make([]digest.Change, len(cs))
	for i, c := range cs {
		out[i] = c.WithValues()
	}
	return out
}

// plan computes, without changing anything, what the agent's next pass
// would do for the declaration (planPass).
func (f planFlags) plan(ctx context.Context, env *environment) (*planned, error) {
	dir, err := existingState(*f.state)
	if err != nil {
		return nil, err
	}
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
	// The roster in force is the one the agent's resolver serves, read
	// where the agent reads it; without it no plan is the agent's.
	served, err := agent.ServedRoster(ctx, dir, *f.resolverAt)
	if err != nil {
		return nil, fmt.Errorf("no plan without the roster in force: %w", err)
	}
	rt, inPlace, err := env.runtime(ctx, podmanSocket(env, *f.socket))
	if err != nil {
		return nil, err
	}
	holdAbove := *f.holdAbove
	if holdAbove < 0 {
		holdAbove = agent.DefaultHoldAbove
		if st, err := agent.LoadStatus(dir); err == nil && st != nil {
			holdAbove = st.HoldAbove
		}
	}
	return planPass(ctx, dir, decl, served, rt, inPlace, holdAbove)
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
	}
	// Judged as the agent judges it (admit); the agent's served roster is
	// the one it saved.
	if err := admit.Machine("", d, dd.Machine).Err(); err != nil {
		return nil, err
	}
	dec := admit.DeclarationDelta(dd.Generation, dd.Roster, d, admit.Served{}, func() admit.Faults { return deltaAgainst(d.Roster, dd.Roster) })
	switch dec.Verdict {
	case admit.Refused:
		return nil, dec.Err()
	case admit.Same:
		return d, nil // the same delta again: nothing changes
	}
	if _, err := d.Roster.Apply(dd.Roster); err != nil {
		return nil, err
	}
	d.Generation = dd.Generation
	return d, nil
}

// deltaAgainst names what rd, a delta to roster r's generation, sets or
// removes otherwise than r has it: the agent's judgement of the same delta
// again, by the names it carries.
func deltaAgainst(r *spec.Roster, rd *spec.RosterDelta) admit.Faults {
	var out admit.Faults
	for n, addrs := range rd.Set {
		if have := r.Names[n]; !slices.Equal(have, addrs) {
			out.Add(fmt.Sprintf("roster_delta.set[%q]", n), "%s here, %s in force", admit.AddrList(addrs), admit.AddrList(have))
		}
	}
	for i, n := range rd.Remove {
		if have, ok := r.Names[n]; ok {
			out.Add(fmt.Sprintf("roster_delta.remove[%d]", i), "%q is removed here; roster generation %d in force has it (%s)", n, r.Generation, admit.AddrList(have))
		}
	}
	return out
}

// planned is what planPass found: the pass, the roster it renders with,
// and the freeze in force (nil: none).
type planned struct {
	*pass.Computed
	Roster pass.Roster
	Frozen *agent.Freeze
}

// planPass computes what the agent's next pass would do for decl on rt,
// from the agent's state in dir, through package pass as the agent does:
// the roster in force (served, the one the agent's resolver serves: the
// roster guard and the operator's accepted generation decide whether
// decl's replaces it), the migration gate's state, and the reconciler's
// owner and adoptions.
// The gate works on a copy of its state: a dry run never writes anything.
// What it cannot foresee is what the pass itself would learn first (a probe
// of a network changing its mode).
//
// The blast-radius hold is judged with holdAbove and the generation the
// operator approved, as the agent judges it.
func planPass(ctx context.Context, dir statedir.Dir, decl *spec.Declaration, served *spec.Roster, rt reconcile.Runtime, inPlace bool, holdAbove int) (*planned, error) {
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
	// As the agent's pass: the flag and the networks decl's containers
	// use, which alone hold flag auto back.
	if err := gate.Declare(decl); err != nil {
		return nil, err
	}
	observed, err := rt.List(ctx)
	if err != nil {
		return nil, err
	}
	rstate, _ := agent.LoadReconcileState(dir.Reconciler(), slog.New(slog.DiscardHandler))
	hashKey, err := dir.LoadHashKey() // the agent's: the hashes its records hold
	if err != nil {
		return nil, err
	}
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: decl.Machine, NoInPlaceUpdates: !inPlace, Adoptions: rstate.Adoptions, BudgetUsed: rstate.BudgetUsed, HashKey: hashKey})
	if err != nil {
		return nil, err
	}
	c, err := pass.Compute(ctx, pass.Input{Declaration: decl, Roster: roster.InForce, Gate: gate, Observed: observed, Planner: rec,
		HoldAbove: holdAbove, Approved: func() uint64 { return agent.ApprovedDeclaration(dir) }})
	if err != nil {
		return nil, err
	}
	frozen, _ := agent.Frozen(dir) // unreadable: frozen all the same
	return &planned{Computed: c, Roster: roster, Frozen: frozen}, nil
}

// actionJSON is one action of `meshhost plan --output json`.
type actionJSON struct {
	Kind      string          `json:"kind"`
	Container string          `json:"container"`
	Reason    string          `json:"reason,omitempty"`
	Changes   []digest.Change `json:"changes,omitempty"`
}

func definePlan(env *environment, fs *flag.FlagSet) runner {
	f := addPlanFlags(fs)
	return func(ctx context.Context, args []string) (int, error) {
		if *f.output != "text" && *f.output != "json" {
			return exitUsage, fmt.Errorf("--output %q: want text or json", *f.output)
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
				Actions   []actionJSON  `json:"actions"`
				Unmanaged int           `json:"unmanaged_left_alone"`
				Roster    rosterJSON    `json:"roster"`
				Held      *pass.Hold    `json:"held,omitempty"`
				Frozen    *agent.Freeze `json:"frozen,omitempty"`
			}{Actions: []actionJSON{}, Unmanaged: p.Unmanaged, Roster: rosterOf(pl.Roster), Held: pl.Hold, Frozen: pl.Frozen}
			for _, a := range changes {
				out.Actions = append(out.Actions, actionJSON{string(a.Kind), a.Name, a.Reason, f.changes(a.Changes)})
			}
			return code, json.NewEncoder(env.stdout).Encode(out)
		}
		printRoster(env.stdout, pl.Roster)
		printPlan(env.stdout, p, *f.showValues)
		printControls(env.stdout, pl)
		return code, nil
	}
}

// printControls says when the agent would not apply the plan: a
// blast-radius hold, a freeze.
func printControls(w io.Writer, pl *planned) {
	if pl.Hold != nil {
		fmt.Fprintln(w, pl.Hold)
	}
	if pl.Frozen != nil {
		fmt.Fprintf(w, "the machine is frozen (since %s): the agent applies nothing of this plan until meshhost unfreeze\n", pl.Frozen.Since.UTC().Format(time.RFC3339))
	}
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

// printPlan prints p's changes, one a line; with showValues, each change
// to env or labels follows on a line of its own with its values.
func printPlan(w io.Writer, p *reconcile.Plan, showValues bool) {
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
		if showValues {
			for _, c := range a.Changes {
				if v := c.WithValues(); v.String() != c.String() {
					fmt.Fprintf(w, "         %s\n", v)
				}
			}
		}
	}
	if p.Unmanaged > 0 {
		fmt.Fprintf(w, "(%d containers not managed by meshhost are left alone)\n", p.Unmanaged)
	}
}

func defineExplain(env *environment, fs *flag.FlagSet) runner {
	f := addPlanFlags(fs)
	return func(ctx context.Context, pos []string) (int, error) {
		if len(pos) != 1 {
			return exitUsage, errors.New("name one container")
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
				return 0, json.NewEncoder(env.stdout).Encode(actionJSON{string(a.Kind), a.Name, a.Reason, f.changes(a.Changes)})
			}
			fmt.Fprintf(env.stdout, "%s: %s", name, a.Kind)
			if a.Reason != "" {
				fmt.Fprintf(env.stdout, " (%s)", a.Reason)
			}
			fmt.Fprintln(env.stdout)
			for _, c := range f.changes(a.Changes) {
				fmt.Fprintf(env.stdout, "  %-12s %-7s %s\n", c.Field, c.Mutability, changeText(c))
			}
			return 0, nil
		}
		return 1, fmt.Errorf("%q is neither declared nor a managed container", name)
	}
}

func changeText(c digest.Change) string {
	if len(c.Added)+len(c.Removed)+len(c.Changed) > 0 {
		_, entries, _ := strings.Cut(c.String(), ": ")
		return entries
	}
	return fmt.Sprintf("old %s  new %s", orDash(c.Old), orDash(c.New))
}

func orDash(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}
