package resolver

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// ErrStaleGeneration is returned by Update for a roster whose generation is
// not newer than the one being served; the served roster is kept.
var ErrStaleGeneration = errors.New("roster generation is not newer than the one being served")

// Update validates r, compiles it off the hot path and swaps it in whole:
// every query is answered from either the old roster or the new one, never a
// mix. It refuses an invalid roster (the error lists each *spec.FieldError)
// and one whose generation is not newer (ErrStaleGeneration); both leave the
// served roster in place. When Update returns nil the new roster is being
// served and, with Config.StatePath set, saved.
//
// A roster that differs from the one served by few names (a quarter at
// most, same zones) is not compiled: Update finds what changed and applies
// that, as Apply does, so it costs reading the roster once and saving what
// changed. Any other roster is compiled and saved whole.
//
// When only saving fails, the new roster is served anyway and the error says
// so: serving the newest roster matters more than remembering it. It is
// saved again every SaveRetryInterval until that succeeds.
//
// A panic while validating, compiling or saving a roster (a bug: every
// roster Validate accepts must compile) is recovered, logged with its
// stack and counted (meshhost_resolver_swap_panics_total), and refuses the
// roster: the one served stays, and so does the process serving it.
func (s *Server) Update(r *spec.Roster) error {
	if r == nil {
		return errors.New("roster is nil")
	}
	start := time.Now()
	if err := s.safely(r.Generation, "validating", func() error {
		return r.ValidateYielding((&yield.Yielder{Pending: s.Busy}).Maybe)
	}); err != nil {
		return fmt.Errorf("roster generation %d refused: %w", r.Generation, err)
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	cur := s.table.Load()
	if cur != nil && r.Generation <= cur.gen {
		return fmt.Errorf("%w: got generation %d, serving %d", ErrStaleGeneration, r.Generation, cur.gen)
	}
	if cur != nil && sameZones(cur, r.Zones) {
		var d *spec.RosterDelta
		var ok bool
		err := s.safely(r.Generation, "comparing", func() error {
			d, ok = cur.diff(r, s.Busy)
			return nil
		})
		if err != nil {
			return fmt.Errorf("roster generation %d refused: %w", r.Generation, err)
		}
		if ok {
			return s.applyLocked(cur, d, start, "diff")
		}
	}
	// The table canonicalizes names itself, so r need not be normalized.
	var t *table
	err := s.safely(r.Generation, "compiling", func() (err error) {
		t, err = s.compile(r, seconds(s.cfg.TTL), seconds(s.cfg.NegativeTTL), s.Busy)
		return err
	})
	if err != nil {
		return fmt.Errorf("roster generation %d refused: %w", r.Generation, err)
	}
	s.swapLocked(t, nil, start, "whole")
	if s.state != nil {
		err := s.safely(r.Generation, "saving", func() error { return s.state.saveWhole(t, s.Busy) })
		s.state.saved(err)
		if err != nil {
			return fmt.Errorf("roster generation %d is served but not saved (saved again every %s until that succeeds): %w", r.Generation, SaveRetryInterval, err)
		}
	}
	return nil
}

// Apply puts a roster delta in force: the roster served, changed by d,
// swapped in whole like Update's (every query is answered from the old
// roster or the new one), and, with Config.StatePath set, saved by
// appending d to the state's log. It costs what d changes, not the size of
// the roster: d is validated alone, and the new roster served is the
// compiled one with a small overlay of the names changed (folded into a
// newly compiled table in the background once it grows).
//
// d applies only on top of the generation it names: a d.To not newer than
// the generation served is refused with ErrStaleGeneration, and a d.From
// that is not the generation served with an error wrapping
// spec.ErrDeltaBase (the caller then sends the whole roster, to Update).
// An invalid d is refused with every *spec.FieldError. A delta that
// changes the zones is applied by compiling the whole roster.
//
// As with Update, a failure to save leaves the new roster served and says
// so, and a panic refuses the delta and keeps the roster served.
func (s *Server) Apply(d *spec.RosterDelta) error {
	if d == nil {
		return errors.New("roster delta is nil")
	}
	start := time.Now()
	if err := s.safely(d.To, "validating", d.Validate); err != nil {
		return fmt.Errorf("roster delta to generation %d refused: %w", d.To, err)
	}
	d = d.Normalize()
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	cur := s.table.Load()
	switch {
	case cur != nil && d.To <= cur.gen:
		return fmt.Errorf("%w: got a delta to generation %d, serving %d", ErrStaleGeneration, d.To, cur.gen)
	case cur == nil && d.From != 0:
		return fmt.Errorf("roster delta to generation %d refused: %w: it is from generation %d, and no roster is served", d.To, spec.ErrDeltaBase, d.From)
	case cur != nil && d.From != cur.gen:
		return fmt.Errorf("roster delta to generation %d refused: %w: it is from generation %d, serving %d", d.To, spec.ErrDeltaBase, d.From, cur.gen)
	}
	return s.applyLocked(cur, d, start, "delta")
}

// applyLocked puts the normalized delta d (from cur's generation; cur nil
// for none) in force and saves it. kind labels the swap: "delta" (Apply)
// or "diff" (Update found a small change).
func (s *Server) applyLocked(cur *table, d *spec.RosterDelta, start time.Time, kind string) error {
	syncs.AssertLocked(&s.updateMu)
	var t *table
	err := s.safely(d.To, "applying", func() (err error) {
		if cur != nil && (d.Zones == nil || sameZones(cur, d.Zones)) {
			t, err = s.applyDelta(cur, d)
			return err
		}
		// The zones change (or nothing is served yet): compile the roster
		// the delta makes, whole.
		r := &spec.Roster{}
		if cur != nil {
			r = cur.roster(s.Busy)
		}
		if _, err := r.Apply(d); err != nil {
			return err
		}
		kind = "whole"
		t, err = s.compile(r, seconds(s.cfg.TTL), seconds(s.cfg.NegativeTTL), s.Busy)
		return err
	})
	if err != nil {
		return fmt.Errorf("roster generation %d refused: %w", d.To, err)
	}
	changed := d
	if kind == "whole" {
		changed = nil // the zones changed: any cached name may be in a new one
	}
	s.swapLocked(t, changed, start, kind)
	if s.state != nil {
		save := func() error { return s.state.saveDelta(t, d, s.Busy) }
		if kind == "whole" {
			save = func() error { return s.state.saveWhole(t, s.Busy) }
		}
		err := s.safely(d.To, "saving", save)
		s.state.saved(err)
		if err != nil {
			return fmt.Errorf("roster generation %d is served but not saved (saved again every %s until that succeeds): %w", d.To, SaveRetryInterval, err)
		}
		s.state.maybeCompact(s)
	}
	s.maybeMerge(t)
	return nil
}

// swapLocked serves t from now on: the roster served changed by d, or,
// when d is nil, a roster compiled whole.
func (s *Server) swapLocked(t *table, d *spec.RosterDelta, start time.Time, kind string) {
	syncs.AssertLocked(&s.updateMu)
	s.table.Store(t)
	if s.cache != nil {
		// Names the new roster took over are answered from it; the cached
		// outside answers that depend on them go. The rest of the cache
		// stays. A delta names what it changed (a name it removes leaves
		// no cached answer wrong, but costs nothing to look at); a whole
		// roster is compared with every entry.
		if d == nil {
			s.cache.dropMesh(s.isMeshName)
		} else {
			s.cache.dropNames(deltaNames(d))
		}
	}
	took := time.Since(start)
	s.metrics.swap.Observe(took.Seconds())
	s.metrics.swaps.WithLabelValues(kind).Inc()
	s.metrics.generation.Set(float64(t.gen))
	s.log.Info("roster swapped in", "roster_generation", t.gen, "names", t.count, "how", kind, "duration_seconds", took.Seconds())
}

// deltaNames is the lowercase wire form of every name the normalized d
// sets or removes.
func deltaNames(d *spec.RosterDelta) [][]byte {
	out := make([][]byte, 0, d.Len())
	for n := range d.Set {
		if w, err := wireName(spec.CanonicalName(n)); err == nil {
			out = append(out, w)
		}
	}
	for _, n := range d.Remove {
		if w, err := wireName(spec.CanonicalName(n)); err == nil {
			out = append(out, w)
		}
	}
	return out
}

func sameZones(t *table, zones []string) bool {
	if len(zones) != len(t.zones) {
		return false
	}
	for _, z := range zones {
		if !slices.ContainsFunc(t.zones, func(tz zone) bool { return tz.name == spec.CanonicalName(z) }) {
			return false
		}
	}
	return true
}

// maybeMerge folds t's overlay into a newly compiled table in the
// background once it has grown past mergeAt names (one merge at a time).
func (s *Server) maybeMerge(t *table) {
	if t.overlaySize() < s.mergeAt || !s.merging.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.merging.Store(false)
		s.merge()
	}()
}

// merge compiles the roster served now into a new table and swaps in the
// view of whatever is served by then over it: the overlay left is the
// names changed meanwhile. Queries never wait for it; a delta arriving
// meanwhile waits only for the swap at its end.
func (s *Server) merge() {
	v := s.table.Load()
	var nb *table
	err := s.safely(v.gen, "merging", func() (err error) {
		nb, err = s.compactView(v, s.Busy)
		return err
	})
	if err != nil {
		s.log.Error("folding roster changes into a compiled table failed; the changes stay served as they are", "roster_generation", v.gen, "err", err)
		return
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	cur := s.table.Load()
	if cur.base != v.base {
		return // a whole roster was compiled meanwhile
	}
	s.table.Store(cur.rebase(v, nb))
	s.metrics.merges.Inc()
}

// safely runs one step of a swap of roster generation gen, turning a panic
// into an error: logged with its stack, and counted.
func (s *Server) safely(gen uint64, step string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.swapPanics.Inc()
			s.log.Error("a roster swap panicked; the roster served stays", "roster_generation", gen, "step", step, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s the roster panicked: %v", step, v)
		}
	}()
	return f()
}
