package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/spec"
)

// rosterInForce is the roster the resolver serves, as the agent keeps it:
// a pass (step 1) and Run's roster loop put the declared change in force
// through it, the guard permitting, as soon as it arrives. Its mutex
// guards the fields below it; no other part of the agent touches them.
type rosterInForce struct {
	resolver  Resolver
	source    *declsource.Source
	guard     rosterguard.Policy
	state     statedir.Dir
	log       *slog.Logger
	heldGauge prometheus.Gauge // meshhost_agent_roster_held

	mu   sync.Mutex
	held error // why the declared roster is held, or nil
	hold rosterHoldRecord
	// roster is the one the resolver serves, the agent's own: a change is
	// applied to it in place. Nil until read from the resolver (after a
	// start, and after the resolver refused a change).
	roster *spec.Roster
	snap   *spec.Roster // a copy of roster for rendering (snapshot), nil when stale
	// dropped is the roster last dropped to be read again (the resolver
	// refused a change), never changed since: a pass that put it in force
	// in step 1 renders with it until roster is read again.
	dropped *spec.Roster
	// pending is the change from roster to the declared one, as of the
	// Source's Change declSeq; nil when they are the same. A change the
	// guard holds, or an older roster, stays pending.
	pending     *spec.RosterDelta
	declSeq     uint64
	synced      bool   // pending and declSeq follow the Source
	olderLogged uint64 // an older declared roster generation already warned about
	unsaved     error  // why the roster loop's last change is served but not saved
}

// readOnce reads, once after a start, the saved roster the
// resolver serves. It is asked before there is a declaration too, so
// that the Source refuses a first one whose roster is older, or reuses
// its generation with other names. A resolver that does not answer yet
// is asked again where the roster is needed (put).
func (r *rosterInForce) readOnce(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.roster != nil {
		return
	}
	if err := r.readLocked(ctx); err != nil {
		r.log.WarnContext(ctx, "the roster in force is unknown until the resolver answers", "err", err)
	}
}

// put is a pass's step 1: the roster in force for head reaches the
// resolver (updateLocked), and rep says which it is and whether a change
// is held. It returns the roster's zones (a roster change replaces the
// list, never changes it). unsaved is what could not be saved of it, the
// roster loop's included.
func (r *rosterInForce) put(ctx context.Context, head declsource.Head, rep *Report) (zones []string, unsaved, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	roster, unsaved, err := r.updateLocked(ctx, head)
	unsaved, r.unsaved = errors.Join(unsaved, r.unsaved), nil
	if err != nil {
		return nil, unsaved, err
	}
	rep.RosterGeneration = roster.Generation
	if r.held != nil {
		rep.RosterHeld = r.held.Error()
	}
	if h := r.hold.written; h != nil {
		c := *h
		rep.rosterHold = &c
	}
	return roster.Zones, unsaved, nil
}

// now is put for Run's roster loop: a roster served but not saved is
// reported by the next pass.
func (r *rosterInForce) now(head declsource.Head) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, unsaved, err := r.updateLocked(context.Background(), head)
	if unsaved != nil {
		r.unsaved = unsaved
	}
	return err
}

// snapshot returns a copy of the roster in force that nothing changes (nil
// before the first), for a pass to render copy-mode containers with while
// the roster loop moves the roster on. It costs the roster's size once
// per roster generation.
func (r *rosterInForce) snapshot() *spec.Roster {
	r.mu.Lock()
	defer r.mu.Unlock()
	src := r.roster
	if src == nil {
		src = r.dropped
	}
	if src != nil && (r.snap == nil || r.snap.Generation != src.Generation) {
		r.snap = &spec.Roster{Generation: src.Generation, Zones: src.Zones, Names: maps.Clone(src.Names)}
	}
	return r.snap
}

// dropLocked drops the roster in force, to be read again from the
// resolver.
func (r *rosterInForce) dropLocked() {
	syncs.AssertLocked(&r.mu)
	if r.roster != nil {
		r.dropped = r.roster
	}
	r.roster, r.snap = nil, nil
}

// updateLocked updates the resolver with the change declared since
// the roster in force, unless the guard holds it (pass.RosterChange
// decides), and returns the roster containers are rendered with: the one
// the resolver serves. It costs what changed: the change goes to the
// resolver as a delta, and is applied to the agent's own roster in place.
// unsaved is set when that roster is served but the resolver could not
// save it: the pass goes on, and fails at its end.
func (r *rosterInForce) updateLocked(ctx context.Context, head declsource.Head) (_ *spec.Roster, unsaved, err error) {
	syncs.AssertLocked(&r.mu)
	if r.roster == nil {
		// Once, after a start (or after the resolver refused a change):
		// the roster the resolver serves. Kept from then on, and changed
		// in place, since rebuilding it from the resolver's table costs a
		// pass as much as the rest for a large roster.
		if err := r.readLocked(ctx); err != nil {
			return nil, nil, err
		}
	}
	if err := r.syncDeclaredLocked(head); err != nil {
		return nil, nil, err
	}
	held := r.held
	r.held = nil
	r.heldGauge.Set(0)
	c := pass.RosterChange(r.roster, r.pending, r.guard, r.accepted)
	switch {
	case c.Older:
		r.recordHoldLocked(nil)
		if r.olderLogged != r.pending.To {
			// Generations never go backwards: keep serving the newer one.
			r.log.WarnContext(ctx, "declared roster is older than the one served; keeping the newer", "roster_generation", r.pending.To, "served_roster_generation", r.roster.Generation)
			r.olderLogged = r.pending.To
		}
		return r.roster, nil, nil
	case c.Held != nil:
		r.held = c.Held
		r.heldGauge.Set(1)
		var served uint64
		if r.roster != nil {
			served = r.roster.Generation
		}
		r.recordHoldLocked(&RosterHold{Served: served, Newest: r.pending.To})
		if held == nil || held.Error() != c.Held.Error() { // loud once; the metric stays
			// The guard doing its job, waiting for meshhost roster
			// accept: a warning, as a held declaration is.
			r.log.WarnContext(ctx, "roster held", "roster_generation", r.pending.To, "err", c.Held)
		}
		return r.roster, nil, nil
	case !c.Update:
		r.recordHoldLocked(nil)
		return r.roster, nil, nil
	case c.Accepted:
		r.log.WarnContext(ctx, "roster shrink accepted by the operator", "roster_generation", r.pending.To)
	}
	r.recordHoldLocked(nil)
	return r.applyLocked(ctx, r.pending)
}

// syncDeclaredLocked brings pending up to the Source's latest Change: the
// changes since declSeq, composed (what changed), or, when the Source no
// longer has them (or after a start), the whole declared roster compared
// with the one in force.
func (r *rosterInForce) syncDeclaredLocked(head declsource.Head) error {
	syncs.AssertLocked(&r.mu)
	if r.synced {
		if changes, ok := changesThrough(r.source, r.declSeq, head); ok {
			for _, c := range changes {
				next := c.Roster
				if r.pending != nil {
					var err error
					if next, err = r.pending.Then(c.Roster); err != nil {
						r.synced = false
						return r.syncDeclaredLocked(head)
					}
				}
				r.pending, r.declSeq = next, c.Seq
			}
			return nil
		}
	}
	r.synced = true
	if r.roster != nil && head.Seq == 0 && r.roster.Generation == head.Declaration.Roster.Generation {
		// After a start: the declaration saved and the roster the resolver
		// saved are of one generation, so they are one roster.
		r.pending, r.declSeq = nil, head.Seq
		return nil
	}
	declared, seq := r.source.Roster()
	r.pending, r.declSeq = nil, seq
	if declared != nil && (r.roster == nil || declared.Generation != r.roster.Generation) {
		r.pending, _ = spec.DiffRosters(r.roster, declared)
	}
	return nil
}

// applyLocked gives the resolver the change d from the roster in force,
// and applies it to the agent's roster.
func (r *rosterInForce) applyLocked(ctx context.Context, d *spec.RosterDelta) (_ *spec.Roster, unsaved, err error) {
	syncs.AssertLocked(&r.mu)
	err = r.resolver.Apply(d)
	if err != nil {
		err = fmt.Errorf("updating the resolver to roster generation %d: %w", d.To, err)
		// The resolver serves a roster it could not save (a full disk)
		// rather than none: it is in force, and the next pass must not
		// offer it again (the resolver would refuse it as not newer, and
		// every pass after would fail). This pass goes on with it, and
		// reports the error at its end.
		served := r.resolver.Roster() // costly, but only on this error
		r.synced = false              // compare the declared roster with it again
		if served == nil || served.Generation < d.To {
			if errors.Is(err, spec.ErrDeltaBase) {
				r.dropLocked() // someone else changed the resolver's roster: read it again
			}
			return nil, nil, err
		}
		r.setLocked(served)
		r.log.ErrorContext(ctx, "roster in force but not saved: after a restart the resolver serves the roster it saved before, until the first pass", "roster_generation", served.Generation, "err", err)
		return served, err, nil
	}
	if r.roster == nil {
		r.roster = &spec.Roster{Names: map[string][]netip.Addr{}}
	}
	r.snap = nil
	if _, err := r.roster.Apply(d); err != nil {
		r.dropLocked() // cannot happen: d is from the roster's generation; read it again
		return nil, nil, err
	}
	r.pending = nil
	r.setLocked(r.roster)
	r.log.InfoContext(ctx, "roster in force", "roster_generation", d.To, "names", len(r.roster.Names), "changed", d.Len())
	return r.roster, nil, nil
}

// setLocked records served as the roster the resolver serves, and tells
// the Source, which refuses a declaration whose roster contradicts it.
func (r *rosterInForce) setLocked(served *spec.Roster) {
	syncs.AssertLocked(&r.mu)
	r.roster, r.snap = served, nil
	var gen uint64
	if served != nil {
		gen, r.dropped = served.Generation, nil
	}
	r.source.SetServed(gen, r.resolver.Roster)
}

// readLocked reads the roster in force from the resolver (costly:
// after a start, or after the resolver refused a change).
//
// A resolver in another process that does not answer leaves the roster in
// force unknown (nil, and an error), not empty: compared with an empty
// roster, a declared one that drops names would pass the roster guard,
// and reach the resolver as a whole roster once it answers again.
func (r *rosterInForce) readLocked(ctx context.Context) error {
	syncs.AssertLocked(&r.mu)
	r.synced = false
	served, err := r.resolver.RosterContext(ctx)
	if err != nil {
		r.setLocked(nil)
		return fmt.Errorf("reading the roster the resolver serves: %w", err)
	}
	r.setLocked(served)
	return nil
}

func (r *rosterInForce) accepted() uint64 { return AcceptedRoster(r.state) }

// recordHoldLocked writes h (nil: no hold) to the roster-held file when
// it differs from it. A failure is logged when it changes: the file
// informs the operator's command, the guard decides from the roster
// itself.
func (r *rosterInForce) recordHoldLocked(h *RosterHold) {
	syncs.AssertLocked(&r.mu)
	rec := &r.hold
	if !rec.known {
		rec.written, _ = LoadRosterHold(r.state)
		rec.known = true
	}
	if (h == nil && rec.written == nil) || (h != nil && rec.written != nil && *h == *rec.written) {
		return
	}
	var err error
	if h == nil {
		if err = os.Remove(r.state.RosterHeld()); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		data, _ := json.Marshal(h)
		err = writeAtomic(r.state.RosterHeld(), append(data, '\n'))
	}
	if err != nil {
		if err.Error() != rec.errLog {
			r.log.Warn("recording the held roster for meshhost roster accept", "err", err)
		}
		rec.errLog = err.Error()
		return
	}
	rec.written, rec.errLog = h, ""
}
