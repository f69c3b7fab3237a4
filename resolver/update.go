package resolver

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

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
// When only saving fails, the new roster is served anyway and the error says
// so: serving the newest roster matters more than remembering it.
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
	if cur := s.table.Load(); cur != nil && r.Generation <= cur.gen {
		return fmt.Errorf("%w: got generation %d, serving %d", ErrStaleGeneration, r.Generation, cur.gen)
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
	s.table.Store(t)
	if s.cache != nil {
		// Names the new roster took over are answered from it; their
		// cached outside answers go. The rest of the cache stays.
		s.cache.dropMesh(s.isMeshName)
	}
	took := time.Since(start)
	s.metrics.swap.Observe(took.Seconds())
	s.metrics.generation.Set(float64(t.gen))
	s.log.Info("roster swapped in", "generation", t.gen, "names", len(r.Names), "took", took)

	if s.cfg.StatePath != "" {
		if err := s.safely(r.Generation, "saving", func() error { return saveState(s.cfg.StatePath, t, s.Busy) }); err != nil {
			return fmt.Errorf("roster generation %d is served but not saved: %w", r.Generation, err)
		}
	}
	return nil
}

// safely runs one step of a swap of roster generation gen, turning a panic
// into an error: logged with its stack, and counted.
func (s *Server) safely(gen uint64, step string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.swapPanics.Inc()
			s.log.Error("a roster swap panicked; the roster served stays", "generation", gen, "step", step, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s the roster panicked: %v", step, v)
		}
	}()
	return f()
}
