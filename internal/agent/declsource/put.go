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
// without the rest of the declaration. An older one is refused with
// ErrStale; the same one again changes nothing. On error nothing changes.
func (s *Source) Put(d *spec.Declaration, origin string) error {
	if d == nil || d.Roster == nil {
		return fmt.Errorf("declaration from %s: no roster", origin)
	}
	if s.machine != "" && d.Machine != s.machine {
		return &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; this agent runs %q", d.Machine, s.machine)}
	}
	s.mu.Lock()
	if cur := s.current; cur != nil {
		if d.Machine != cur.Machine {
			s.mu.Unlock()
			return &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; the declaration in force is for %q", d.Machine, cur.Machine)}
		}
		switch {
		case d.Generation < cur.Generation:
			s.mu.Unlock()
			return fmt.Errorf("generation %d, in force %d: %w", d.Generation, cur.Generation, ErrStale)
		case d.Generation == cur.Generation && d.Roster.Generation < cur.Roster.Generation:
			s.mu.Unlock()
			return fmt.Errorf("generation %d with roster generation %d, in force with roster generation %d: %w", d.Generation, d.Roster.Generation, cur.Roster.Generation, ErrStale)
		case d.Generation == cur.Generation && d.Roster.Generation == cur.Roster.Generation:
			s.mu.Unlock()
			return nil
		}
	}
	s.current, s.raw, s.origin = d, nil, origin
	s.mu.Unlock()
	s.logger.Debug("declaration accepted", "origin", origin, "machine", d.Machine, "generation", d.Generation,
		"roster_generation", d.Roster.Generation, "containers", len(d.Containers), "mesh_names", d.MeshNames)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}
