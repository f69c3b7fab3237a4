package agent

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// declSaver saves the declaration the Source took, before anything acts
// on it: declaration.json (statedir.Dir.Declaration) and the log of
// deltas beside it (DeclarationLog). A pass and Run's roster loop both
// save through it; its mutex guards the fields below it.
type declSaver struct {
	state  statedir.Dir
	source *declsource.Source
	saved  *Saved // Config.Saved: where the last run left off, or nil

	mu       sync.Mutex
	savedSeq uint64 // the Source's Change last saved
	savedGen uint64 // the declaration generation last saved (the log's last key)
	baseGen  uint64 // the generation of declaration.json
	// rosterBehind: a roster moved without its declaration and was not
	// saved, so the next delta is saved whole.
	rosterBehind bool
	store        *deltalog.Store // opened at the first save
}

// LoadDeclaration returns the declaration saved by the last run, or nil:
// the one written whole, changed by the deltas logged after it, in order.
// A delta that cannot be read or applied (a bug, or a disk that lost
// data) ends the log: the declaration is the one before it, and the agent
// writes the declaration whole at its next change.
func LoadDeclaration(dir statedir.Dir) (*spec.Declaration, error) {
	sv, err := LoadSaved(dir)
	if sv == nil || err != nil {
		return nil, err
	}
	return sv.Declaration, nil
}

// Saved is the declaration the last run saved, and how it is saved
// (Config.Saved).
type Saved struct {
	Declaration *spec.Declaration
	baseGen     uint64 // of declaration.json
	baseSize    int64
	broken      bool // the log did not all apply: the next save is whole
}

// LoadSaved is LoadDeclaration, with what the agent needs to go on saving
// where the last run left off; nil when nothing was saved.
func LoadSaved(dir statedir.Dir) (*Saved, error) {
	data, records, err := deltalog.ReadStore(dir.Declaration(), dir.DeclarationLog())
	if errors.Is(err, os.ErrNotExist) && data == nil {
		return nil, nil
	}
	if data == nil {
		return nil, fmt.Errorf("reading the saved declaration: %w", err)
	}
	d, err := specjson.ParseDeclaration(data)
	if err != nil {
		return nil, fmt.Errorf("the saved declaration %s: %w", dir.Declaration(), err)
	}
	sv := &Saved{Declaration: d, baseGen: d.Generation, baseSize: int64(len(data))}
	// A log damaged before its last record: the records before the damage
	// are served, the next save writes the declaration whole, and the log
	// is set aside before it is written (deltalog.Open says so).
	var corrupt *deltalog.CorruptError
	sv.broken = errors.As(err, &corrupt)
	for _, rec := range records {
		if rec.Key <= d.Generation {
			continue // written whole since
		}
		dd, err := specjson.ParseDeclarationDelta(rec.Payload)
		if err == nil && (dd.Generation != rec.Key || dd.Machine != d.Machine) {
			err = errors.New("not this log's")
		}
		if err == nil {
			_, err = d.Roster.Apply(dd.Roster)
		}
		if err != nil {
			sv.broken = true
			break
		}
		d.Generation = dd.Generation
	}
	return sv, nil
}

// save saves the declarations the Source took since the last one saved,
// up to head: a whole declaration as the document received, and the
// deltas after it by appending them to the declaration's log (what
// changed, not the roster).
func (s *declSaver) save(head declsource.Head) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if head.Seq <= s.savedSeq {
		return nil
	}
	if err := s.openLocked(); err != nil {
		return fmt.Errorf("saving the applied declaration: %w", err)
	}
	if err := s.saveChangesLocked(head); err != nil {
		return fmt.Errorf("saving the applied declaration: %w", err)
	}
	return nil
}

// openLocked opens the store at the first save, going on where Saved (the
// last run's) left off.
func (s *declSaver) openLocked() error {
	syncs.AssertLocked(&s.mu)
	if s.store != nil {
		return nil
	}
	gen, size, whole := uint64(0), int64(0), true
	if sv := s.saved; sv != nil {
		gen, size, whole = sv.baseGen, sv.baseSize, sv.broken
	}
	st, err := deltalog.OpenStore(s.state.Declaration(), s.state.DeclarationLog(), gen, size, whole)
	if err != nil {
		return err
	}
	s.store = st
	if sv := s.saved; sv != nil {
		s.savedGen, s.baseGen = sv.Declaration.Generation, sv.baseGen
	}
	return nil
}

// saveChangesLocked is save's work, the store open.
func (s *declSaver) saveChangesLocked(head declsource.Head) error {
	syncs.AssertLocked(&s.mu)
	changes, ok := changesThrough(s.source, s.savedSeq, head)
	whole := -1 // the last whole declaration among them
	for i, c := range changes {
		if c.Whole {
			whole = i
		}
	}
	if !ok {
		return s.saveWholeLocked()
	}
	if whole >= 0 {
		// The document as received: a 100,000-name roster costs far
		// more to marshal again, and what was parsed once parses
		// again the same way.
		data, gen := s.source.Document()
		if gen != changes[whole].Generation {
			return s.saveWholeLocked()
		}
		if err := s.store.WriteBase(gen, data); err != nil {
			return err
		}
		s.wroteBaseLocked(gen)
		changes = changes[whole+1:]
	}
	for _, c := range changes {
		if c.Generation <= s.savedGen {
			// A roster that moved without its declaration (a NATS
			// roster commit): the log keys deltas by declaration
			// generation, and declaration.json keeps this
			// generation's roster as first saved until the next
			// generation is saved whole. The roster source has it.
			s.rosterBehind = true
			continue
		}
		if s.rosterBehind {
			return s.saveWholeLocked()
		}
		payload, err := (&spec.DeclarationDelta{Schema: spec.SchemaVersion, Machine: head.Declaration.Machine, Generation: c.Generation, Roster: c.Roster}).MarshalJSON()
		if err == nil {
			err = s.store.Append(c.Generation, payload)
		}
		if errors.Is(err, deltalog.ErrWhole) {
			return s.saveWholeLocked()
		}
		if err != nil {
			return err
		}
		s.savedGen = c.Generation
	}
	s.savedSeq = head.Seq
	return nil
}

// saveWholeLocked writes the declaration in force whole (its roster
// marshalled again: the cost of the roster).
func (s *declSaver) saveWholeLocked() error {
	syncs.AssertLocked(&s.mu)
	d, seq := s.source.Snapshot()
	data, err := d.MarshalJSON()
	if err != nil {
		return err
	}
	if err := s.store.WriteBase(d.Generation, data); err != nil {
		return err
	}
	s.wroteBaseLocked(d.Generation)
	s.savedSeq = seq
	return nil
}

// wroteBaseLocked notes declaration.json written at generation gen, with
// the roster in force. WriteBase writes no generation at or below the
// base's (but after a failed append): the roster in force may then not be
// the one saved, so the next delta is saved whole.
func (s *declSaver) wroteBaseLocked(gen uint64) {
	syncs.AssertLocked(&s.mu)
	if gen <= s.baseGen {
		s.rosterBehind = true
		return
	}
	s.baseGen, s.savedGen, s.rosterBehind = gen, max(s.savedGen, gen), false
}

// compact writes the declaration whole once the log of deltas beside it
// has outgrown half of it: a cost of the roster's size, once per that many
// changed names.
func (s *declSaver) compact() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store == nil || !s.store.Due() {
		return nil
	}
	if err := s.saveWholeLocked(); err != nil {
		return fmt.Errorf("folding the declaration's log into it: %w", err)
	}
	return nil
}
