package declsource

import (
	"fmt"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/spec"
)

// Put puts in force a declaration that is parsed and valid already: one a
// source builds from parts that travel apart (natssource reads the roster
// from one bucket and the rest from another, each validated as it
// arrives). It is newer than the declaration in force when its generation
// is higher, or equal with a higher roster generation: the roster moves
// without the rest of the declaration. An older one is refused
// (ErrConflict, ErrStale), as is a roster older than the one served or in
// force, or of their generation with other names (admit.Parts); the same
// one again changes nothing. On error nothing changes. d's roster is
// copied (its names are not: address lists are never changed in place),
// so the caller may share it.
func (s *Source) Put(d *spec.Declaration, origin string) error {
	err := s.put(d, origin)
	if err != nil {
		s.refused.WithLabelValues(string(refusalOf(err))).Inc()
	}
	return err
}

func (s *Source) put(d *spec.Declaration, origin string) error {
	if d == nil || d.Roster == nil {
		return fmt.Errorf("declaration from %s: no roster", origin)
	}
	if err := s.checkMachine(d.Machine); err != nil {
		return err
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, srv := s.current, s.served
	s.mu.Unlock()
	var from *spec.Roster
	if cur != nil {
		if err := admit.Machine("", cur, d.Machine).Err(); err != nil {
			return err
		}
		from = cur.Roster
	}
	dec := admit.Parts(d, cur, srv)
	if err := dec.Err(); err != nil {
		return err
	}
	if dec.Verdict == admit.Same {
		return nil
	}
	if dec.RosterOnly {
		// The declaration in force is newer (an operator's rollback): it
		// stays, and the roster, which travels apart, moves.
		rosterOnly := *cur
		rosterOnly.Roster = d.Roster
		s.logger.Info("declaration older than the one in force (a local rollback?); its roster is taken, the declaration in force stays",
			"origin", origin, "declaration_generation", d.Generation, "in_force", cur.Generation, "roster_generation", d.Roster.Generation)
		d = &rosterOnly
	}
	next := *d
	next.Roster = copyRoster(d.Roster) // the Source's own: deltas change it in place
	delta, undo := spec.DiffRosters(from, next.Roster)
	s.mu.Lock()
	// No document: the agent saves this declaration by marshalling it.
	s.raw, s.rawGen = nil, 0
	s.recordLocked(&next, origin, Change{Generation: next.Generation, Roster: delta, Undo: undo, Whole: true})
	s.mu.Unlock()
	s.logger.Debug("declaration accepted", "origin", origin, "machine", d.Machine, "declaration_generation", d.Generation,
		"roster_generation", d.Roster.Generation, "containers", len(d.Containers), "mesh_names", d.MeshNames, "names_changed", delta.Len())
	s.signal()
	return nil
}

// PutRosterDelta puts in force the roster in force changed by d, the rest
// of the declaration unchanged: the roster of a source whose roster moves
// without the declaration (natssource), as a change that is parsed and
// valid already, judged by admit.RosterDelta: machine must be the
// declaration's in force, declGen not newer than its generation (an older
// one: a local rollback is in force, and the roster moves under it), and d
// must apply to the roster in force (d.From); else it is refused,
// ErrDeltaBase for a roster in force of another generation (a delta to an
// older roster is one; or none, or a newer declaration: those are Put
// whole), ErrStale when the resolver serves a newer roster. The same
// change again (the roster generation in force, making the roster in
// force) changes nothing; the roster generation in force with other names
// is refused (RefusedRosterGenerationReused). On error nothing changes,
// and the refusal is counted by its Refusal.
//
// It costs what d changes, not the roster: the roster in force is changed
// in place, and the Change recorded is not Whole. d becomes the Source's
// (the Change holds it): the caller must not modify it afterwards.
func (s *Source) PutRosterDelta(machine string, declGen uint64, d *spec.RosterDelta, origin string) error {
	err := s.putRosterDelta(machine, declGen, d, origin)
	if err != nil {
		s.refused.WithLabelValues(string(refusalOf(err))).Inc()
	}
	return err
}

func (s *Source) putRosterDelta(machine string, declGen uint64, d *spec.RosterDelta, origin string) error {
	if d == nil {
		return fmt.Errorf("roster delta from %s: none", origin)
	}
	if err := s.checkMachine(machine); err != nil {
		return err
	}
	if err := d.Validate(); err != nil { // the cost of d
		return fmt.Errorf("roster delta from %s: %w", origin, err)
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, srv := s.current, s.served
	s.mu.Unlock()
	if cur != nil {
		if err := admit.Machine("", cur, machine).Err(); err != nil {
			return err
		}
	}
	dec := admit.RosterDelta(declGen, d, cur, srv, func() admit.Faults { return s.deltaDifferencesLocked(cur, d) })
	if err := dec.Err(); err != nil {
		return err
	}
	if dec.Verdict == admit.Same {
		return nil // the same change again
	}
	if _, err := s.applyDeltaLocked(cur, cur.Generation, d, origin); err != nil {
		return err
	}
	s.logger.Debug("roster delta accepted", "origin", origin, "machine", machine, "declaration_generation", declGen,
		"roster_generation", d.To, "set", len(d.Set), "removed", len(d.Remove))
	s.signal()
	return nil
}
