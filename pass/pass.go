// Package pass computes what one pass of the agent does, without doing any
// of it: the roster in force (RosterInForce), then, from the declaration,
// that roster, the migration gate and one List of the runtime, each
// container's name mode, its rendering and the reconciler's plan (Compute).
//
// The agent's pass, `meshhost plan`, `meshhost explain` and the demo all
// call it, so that a dry run announces what the agent will do: two copies
// of "render every container" drift, and one did (plan rendered with the
// declared roster while the agent rendered with the roster in force).
//
// A host agent of your own composes a pass from public packages the same
// way: a reconcile.Reconciler over its runtime (reconcile/podman, or
// reconcile/memory in tests) is the Planner, a migrations.Gate is the
// Gate, and the roster guard's Policy is pass/rosterguard's. Compute only
// computes; the caller applies the plan (reconcile.Reconciler.Apply) unless
// Computed.Hold holds it, and serves the roster in force (resolver). See
// the package example, and examples/hostagent for a whole loop built
// outside this module.
//
//	declaration ─┐
//	roster in force (RosterInForce: served, declared, guard) ─┤
//	gate (Modes) ─┤
//	observed (one List) ─┴─> Compute ─> modes, rendered, plan, hold ─> reconcile.Apply (the agent only, unless held)
package pass

import (
	"context"
	"fmt"
	"slices"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Gate is what Compute needs of the migration gate (*migrations.Gate): the
// name mode of each declared container, from the containers as they run.
type Gate interface {
	Modes(containers []spec.Container, observed []reconcile.Observed) map[string]spec.Mode
}

// Planner is what Compute needs of the reconciler (*reconcile.Reconciler).
type Planner interface {
	PlanObserved(ctx context.Context, desired []spec.Rendered, observed []reconcile.Observed) (*reconcile.Plan, error)
}

// Input is what one pass is computed from.
type Input struct {
	Declaration *spec.Declaration
	// Roster is the roster in force: RosterInForce's, not necessarily the
	// declared one.
	Roster *spec.Roster
	// Snapshot, when set, is asked for the roster in force instead of
	// Roster, once, when the first copy-mode container is rendered
	// (resolve mode reads no roster): a copy the caller never changes (the
	// agent moves its own roster on as changes arrive, without waiting
	// for a pass).
	Snapshot func() *spec.Roster
	Gate     Gate
	Observed []reconcile.Observed // what the runtime reports: one List
	Planner  Planner
	// Cache, when set, carries the renderings of one Compute to the next
	// (the agent keeps one): a container declared and moded as before is
	// not rendered again. Nil renders every container.
	Cache *Cache
	// HoldAbove holds the declaration (Computed.Hold) when its plan would
	// replace and remove more than this many containers together, whatever
	// the cause (the migration flag's switch of name modes included). 0
	// never holds.
	HoldAbove int
	// Approved returns the declaration generation the operator let past
	// the hold (meshhost approve); asked only when the plan would be held.
	// Nil: none.
	Approved func() uint64
}

// Cache remembers what Compute rendered, for the next Compute: a
// container declared as before (the very same declared value, as the
// declaration source hands out until a new declaration arrives, or an
// equal one), in the same mode (and, in copy mode, with the same roster
// generation), renders as before. Reusing the rendering saves rendering it
// and lets the reconciler recognise it without reading it
// (spec.Rendered.Equal), so a pass over 10,000 unchanged containers costs
// little per container. The zero Cache is empty and ready; one Cache
// serves one caller's passes, one at a time.
type Cache struct {
	m map[string]*cached
}

type cached struct {
	declared *spec.Container // what was rendered: an element of a declaration, never changed
	mode     spec.Mode
	roster   uint64 // copy mode: the roster generation rendered with
	rendered spec.Rendered
}

// render returns c's rendering (declared at ct) for mode m with roster r:
// the one cached when it still holds, else a new one, which next keeps.
func (cache *Cache) render(ct *spec.Container, r *spec.Roster, m spec.Mode, next map[string]*cached) (spec.Rendered, error) {
	var gen uint64
	if m.Names == spec.Copy && r != nil {
		gen = r.Generation
	}
	if cache != nil {
		if e, ok := cache.m[ct.Name]; ok && e.roster == gen && sameMode(e.mode, m) && (e.declared == ct || e.declared.Equal(ct)) {
			next[ct.Name] = e
			return e.rendered, nil
		}
	}
	out, err := spec.Render(*ct, r, m)
	if err == nil && next != nil {
		next[ct.Name] = &cached{declared: ct, mode: m, roster: gen, rendered: out}
	}
	return out, err
}

func sameMode(a, b spec.Mode) bool {
	return a.Names == b.Names && slices.Equal(a.DNS.Servers, b.DNS.Servers) &&
		slices.Equal(a.DNS.Search, b.DNS.Search) && slices.Equal(a.DNS.Options, b.DNS.Options)
}

// Computed is what a pass would do.
type Computed struct {
	// Modes is each declared container's name mode, by name.
	Modes map[string]spec.Mode
	// Rendered are the declared containers as rendered for their modes, in
	// the declaration's order. Plan refers to them.
	Rendered []spec.Rendered
	Plan     *reconcile.Plan
	// Hold, when not nil, is the blast-radius hold: the plan replaces and
	// removes more containers than Input.HoldAbove. Unless the operator
	// approved the
	// generation (Hold.Approved), the agent applies nothing of the plan:
	// the containers stay as they are (the resolver serves the roster in
	// force all the same).
	Hold *Hold
}

// Hold is a declaration whose plan would replace and remove more
// containers than the machine allows at once without an operator: the
// incident's push, which replaced every container on the hub, is held
// here, not paced, and so is a push that removes every container (a
// running service removed is at least the blast radius of one replaced).
type Hold struct {
	Generation uint64 `json:"generation"`
	HoldAbove  int    `json:"hold_above"`
	// Replacements are the containers the plan replaces, and why (values
	// of env and labels hashed, as every reason is).
	Replacements []Replacement `json:"replacements"`
	// Removals are the containers the plan removes, and why (no longer
	// declared); not those whose removal was cut short, in which nothing
	// runs any more.
	Removals []Replacement `json:"removals,omitempty"`
	// Approved: the operator approved this generation; it goes ahead,
	// paced by the replacement budget.
	Approved bool `json:"approved,omitempty"`
}

// Replacement is one container a held plan replaces, or removes.
type Replacement struct {
	Container string `json:"container"`
	Reason    string `json:"reason"`
}

// Held reports whether h holds its declaration back (not approved).
func (h *Hold) Held() bool { return h != nil && !h.Approved }

// Count is what the hold counts against HoldAbove: the replacements and
// the removals.
func (h *Hold) Count() int { return len(h.Replacements) + len(h.Removals) }

// String says what is held and how to release it.
func (h *Hold) String() string {
	if h.Approved {
		return fmt.Sprintf("declaration %d %s containers, more than --hold-above %d; approved by the operator, it goes ahead within the replacement budget", h.Generation, h.what("replaces", "removes"), h.HoldAbove)
	}
	return fmt.Sprintf("declaration %d held: it would %s containers, more than --hold-above %d; the containers stay as they are until `meshhost approve %d` (then the replacement budget paces it) or a newer declaration", h.Generation, h.what("replace", "remove"), h.HoldAbove, h.Generation)
}

// what says how many containers h replaces and removes: "replace 3",
// "remove 2", "replace 3 and remove 2".
func (h *Hold) what(replace, remove string) string {
	switch n, m := len(h.Replacements), len(h.Removals); {
	case m == 0:
		return fmt.Sprintf("%s %d", replace, n)
	case n == 0:
		return fmt.Sprintf("%s %d", remove, m)
	default:
		return fmt.Sprintf("%s %d and %s %d", replace, n, remove, m)
	}
}

// Compute renders every declared container for the mode the gate gives it,
// with the roster in force, and plans against what the runtime reports.
func Compute(ctx context.Context, in Input) (*Computed, error) {
	d := in.Declaration
	c := &Computed{
		Modes:    in.Gate.Modes(d.Containers, in.Observed),
		Rendered: make([]spec.Rendered, 0, len(d.Containers)),
	}
	var next map[string]*cached
	if in.Cache != nil {
		next = make(map[string]*cached, len(d.Containers))
	}
	roster, snapshot := in.Roster, in.Snapshot
	for i := range d.Containers {
		ct := &d.Containers[i]
		m := c.Modes[ct.Name]
		if m.Names == spec.Copy && snapshot != nil {
			roster, snapshot = snapshot(), nil
		}
		r, err := in.Cache.render(ct, roster, m, next)
		if err != nil {
			return nil, fmt.Errorf("rendering %q: %w", ct.Name, err)
		}
		c.Rendered = append(c.Rendered, r)
	}
	if in.Cache != nil {
		in.Cache.m = next
	}
	p, err := in.Planner.PlanObserved(ctx, c.Rendered, in.Observed)
	if err != nil {
		return nil, err
	}
	c.Plan = p
	c.Hold = hold(d.Generation, p, in.HoldAbove, in.Approved)
	return c, nil
}

// hold returns the hold of declaration gen's plan p, or nil when p
// replaces and removes at most holdAbove containers together (or
// holdAbove is 0). The removals counted are those of containers that may
// run (reconcile.Action.Disrupts): finishing a removal cut short disrupts
// nothing.
func hold(gen uint64, p *reconcile.Plan, holdAbove int, approved func() uint64) *Hold {
	if holdAbove <= 0 {
		return nil
	}
	h := &Hold{Generation: gen, HoldAbove: holdAbove}
	for _, a := range p.Actions {
		switch {
		case !a.Disrupts():
		case a.Kind == reconcile.Replace:
			h.Replacements = append(h.Replacements, Replacement{Container: a.Name, Reason: a.Reason})
		case a.Kind == reconcile.Remove:
			h.Removals = append(h.Removals, Replacement{Container: a.Name, Reason: a.Reason})
		}
	}
	if h.Count() <= holdAbove {
		return nil
	}
	h.Approved = approved != nil && approved() == gen
	return h
}

// Roster is RosterInForce's decision.
type Roster struct {
	// InForce is the roster to render with: the declared one when Update,
	// else the one served.
	InForce *spec.Roster
	// Update: the declared roster is newer than the one served and may be
	// put in force; the resolver gets it before any container is touched.
	Update bool
	// Accepted: the guard would hold the declared roster, but the operator
	// accepted its generation (meshhost roster accept).
	Accepted bool
	// Held says why the declared roster is held (a *rosterguard.ShrinkError):
	// it drops too many names at once. The served one stays in force.
	Held error
	// Older: the declared roster is older than the one served; generations
	// never go backwards, so the served one stays in force.
	Older bool
}

// RosterInForce decides which roster a pass renders with, from the roster
// the resolver serves (nil: none yet) and the declared one: the declared
// roster when it is newer and the guard lets it through (or the operator
// accepted its generation: accepted is asked only then), the served one
// otherwise. It finds what changed (the cost of reading both rosters) and
// decides as RosterChange does.
func RosterInForce(served, declared *spec.Roster, guard rosterguard.Policy, accepted func() uint64) Roster {
	change, _ := spec.DiffRosters(served, declared)
	c := RosterChange(served, change, guard, accepted)
	c.InForce = served
	if c.Update {
		c.InForce = declared
	}
	return c
}

// RosterChange is RosterInForce for the roster the resolver serves (nil:
// none yet) and the change declared since (a delta from its generation;
// nil: none): whether the change is put in force (Update), in time
// proportional to the change. It leaves InForce nil: the caller applies
// the change to the roster it holds.
func RosterChange(served *spec.Roster, change *spec.RosterDelta, guard rosterguard.Policy, accepted func() uint64) Roster {
	if change == nil {
		return Roster{}
	}
	if served != nil && change.To <= served.Generation {
		return Roster{Older: change.To < served.Generation}
	}
	if err := rosterguard.CheckDelta(served, change, guard); err != nil {
		var servedGen uint64
		if served != nil {
			servedGen = served.Generation
		}
		if accepted == nil || !AcceptCovers(servedGen, change.To, accepted()) {
			return Roster{Held: err}
		}
		return Roster{Update: true, Accepted: true}
	}
	return Roster{Update: true}
}

// AcceptCovers reports whether the operator's roster accept of generation
// gen releases a held change from roster generation served to newest: gen
// is one of the generations the change holds (after served, up to newest).
// An accept of the newest generation held only would be void once one more
// change arrives, and under steady churn a held drop could never be
// released; an accept of a generation already served, or of one not yet
// declared, releases nothing, so it never lets a future shrink through
// unseen. Both the pass and meshhost roster accept decide by it
// (admit.AcceptCovers).
func AcceptCovers(served, newest, gen uint64) bool {
	return admit.AcceptCovers(served, newest, gen)
}
