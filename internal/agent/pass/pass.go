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
//	declaration ─┐
//	roster in force (RosterInForce: served, declared, guard) ─┤
//	gate (Modes) ─┤
//	observed (one List) ─┴─> Compute ─> modes, rendered, plan, hold ─> reconcile.Apply (the agent only, unless held)
package pass

import (
	"context"
	"fmt"

	"github.com/meshhost/meshhost/internal/agent/rosterguard"
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
	Roster   *spec.Roster
	Gate     Gate
	Observed []reconcile.Observed // what the runtime reports: one List
	Planner  Planner
	// HoldAbove holds the declaration (Computed.Hold) when its plan would
	// replace more than this many containers, whatever the cause (the
	// migration flag's switch of name modes included). 0 never holds.
	HoldAbove int
	// Approved returns the declaration generation the operator let past
	// the hold (meshhost approve); asked only when the plan would be held.
	// Nil: none.
	Approved func() uint64
}

// Computed is what a pass would do.
type Computed struct {
	// Modes is each declared container's name mode, by name.
	Modes map[string]spec.Mode
	// Rendered are the declared containers as rendered for their modes, in
	// the declaration's order. Plan refers to them.
	Rendered []spec.Rendered
	Plan     *reconcile.Plan
	// Hold, when not nil, is the blast-radius hold: the plan replaces more
	// containers than Input.HoldAbove. Unless the operator approved the
	// generation (Hold.Approved), the agent applies nothing of the plan:
	// the containers stay as they are (the resolver serves the roster in
	// force all the same).
	Hold *Hold
}

// Hold is a declaration whose plan would replace more containers than the
// machine allows at once without an operator: the incident's push, which
// replaced every container on the hub, is held here, not paced.
type Hold struct {
	Generation uint64 `json:"generation"`
	HoldAbove  int    `json:"hold_above"`
	// Replacements are the containers the plan replaces, and why (values
	// of env and labels hashed, as every reason is).
	Replacements []Replacement `json:"replacements"`
	// Approved: the operator approved this generation; it goes ahead,
	// paced by the replacement budget.
	Approved bool `json:"approved,omitempty"`
}

// Replacement is one container a held plan replaces.
type Replacement struct {
	Container string `json:"container"`
	Reason    string `json:"reason"`
}

// Held reports whether h holds its declaration back (not approved).
func (h *Hold) Held() bool { return h != nil && !h.Approved }

// String says what is held and how to release it.
func (h *Hold) String() string {
	if h.Approved {
		return fmt.Sprintf("declaration %d replaces %d containers, more than --hold-above %d; approved by the operator, it goes ahead within the replacement budget", h.Generation, len(h.Replacements), h.HoldAbove)
	}
	return fmt.Sprintf("declaration %d held: it would replace %d containers, more than --hold-above %d; the containers stay as they are until `meshhost approve %d` (then the replacement budget paces it) or a newer declaration", h.Generation, len(h.Replacements), h.HoldAbove, h.Generation)
}

// Compute renders every declared container for the mode the gate gives it,
// with the roster in force, and plans against what the runtime reports.
func Compute(ctx context.Context, in Input) (*Computed, error) {
	d := in.Declaration
	c := &Computed{
		Modes:    in.Gate.Modes(d.Containers, in.Observed),
		Rendered: make([]spec.Rendered, 0, len(d.Containers)),
	}
	for _, ct := range d.Containers {
		r, err := spec.Render(ct, in.Roster, c.Modes[ct.Name])
		if err != nil {
			return nil, fmt.Errorf("rendering %q: %w", ct.Name, err)
		}
		c.Rendered = append(c.Rendered, r)
	}
	p, err := in.Planner.PlanObserved(ctx, c.Rendered, in.Observed)
	if err != nil {
		return nil, err
	}
	c.Plan = p
	c.Hold = hold(d.Generation, p, in.HoldAbove, in.Approved)
	return c, nil
}

// hold returns the hold of declaration gen's plan p, or nil when p replaces
// at most holdAbove containers (or holdAbove is 0).
func hold(gen uint64, p *reconcile.Plan, holdAbove int, approved func() uint64) *Hold {
	if holdAbove <= 0 || p.Count(reconcile.Replace) <= holdAbove {
		return nil
	}
	h := &Hold{Generation: gen, HoldAbove: holdAbove}
	for _, a := range p.Actions {
		if a.Kind == reconcile.Replace {
			h.Replacements = append(h.Replacements, Replacement{Container: a.Name, Reason: a.Reason})
		}
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
// otherwise.
func RosterInForce(served, declared *spec.Roster, guard rosterguard.Policy, accepted func() uint64) Roster {
	if served != nil && declared.Generation <= served.Generation {
		return Roster{InForce: served, Older: declared.Generation < served.Generation}
	}
	if err := rosterguard.Check(served, declared, guard); err != nil {
		if accepted == nil || accepted() != declared.Generation {
			return Roster{InForce: served, Held: err}
		}
		return Roster{InForce: declared, Update: true, Accepted: true}
	}
	return Roster{InForce: declared, Update: true}
}
