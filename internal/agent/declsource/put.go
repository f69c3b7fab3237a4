package declsource

import (
	"fmt"

	"github.com/meshhost/meshhost/spec"
)

// Put puts in force a declaration that is parsed and valid already: one a
// source builds from parts that travel apart (natssource reads the roster
// from one bucket and the rest from another, each validated as it
// arrives). It is newer than the declaration in force when its generation
// is higher, or equal with a higher roster generation: the roster moves
// without the rest of the declaration. An older one is refused
// (ErrConflict, ErrStale), as is a roster older than the one served; the
// same one again changes nothing. On error nothing changes. d's roster is
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
		if err := checkMachineInForce(cur, d.Machine); err != nil {
			return err
		}
		switch {
		case d.Generation < cur.Generation:
			return olderThan(d.Generation, cur.Generation)
		case d.Generation == cur.Generation && d.Roster.Generation < cur.Roster.Generation:
			return &ConflictError{Refusal: RefusedRosterOlder, Faults: []*spec.FieldError{{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("%d is older than roster generation %d, in force in declaration %d; rosters never go back", d.Roster.Generation, cur.Roster.Generation, cur.Generation),
			}}}
		case d.Generation == cur.Generation && d.Roster.Generation == cur.Roster.Generation:
			return nil
		}
		from = cur.Roster
	}
	if srv.gen != 0 && d.Roster.Generation < srv.gen {
		return &ConflictError{Refusal: RefusedRosterOlder, Faults: []*spec.FieldError{{
			Path:   "roster.generation",
			Reason: fmt.Sprintf("%d is older than roster generation %d, served; rosters never go back", d.Roster.Generation, srv.gen),
		}}}
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
