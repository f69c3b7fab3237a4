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
//	observed (one List) ─┴─> Compute ─> modes, rendered, plan ─> reconcile.Apply (the agent only)
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
}

// Computed is what a pass would do.
type Computed struct {
	// Modes is each declared container's name mode, by name.
	Modes map[string]spec.Mode
	// Rendered are the declared containers as rendered for their modes, in
	// the declaration's order. Plan refers to them.
	Rendered []spec.Rendered
	Plan     *reconcile.Plan
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
	return c, nil
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
		if accepted == nil || accepted() != change.To {
			return Roster{Held: err}
		}
		return Roster{Update: true, Accepted: true}
	}
	return Roster{Update: true}
}
