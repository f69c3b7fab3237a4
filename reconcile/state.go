package reconcile

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// state is what a Reconciler remembers between passes.
type state struct {
	budget Budget

	// mu guards the fields below.
	mu      sync.Mutex
	used    []time.Time               // start times of replacements, oldest first
	adopted map[string]Adoption       // by container ID
	updated map[string]spec.Resources // by container ID: resources set in place since creation
}

// init restores what cfg carries over from an earlier Reconciler, and
// returns the names of the adopted containers it does not trust (see
// Config.Adoptions).
func (s *state) init(cfg Config) (judgeAgain []string) {
	s.budget = cfg.Budget
	s.used = slices.Clone(cfg.BudgetUsed)
	slices.SortFunc(s.used, time.Time.Compare)
	s.adopted = map[string]Adoption{}
	for _, a := range cfg.Adoptions {
		if cfg.NoInPlaceUpdates && a.Version < 1 {
			judgeAgain = append(judgeAgain, a.Name)
			continue
		}
		s.adopted[a.ID] = a
	}
	s.updated = map[string]spec.Resources{}
	slices.Sort(judgeAgain)
	return judgeAgain
}

// snapshot forgets containers that no longer exist and returns copies of
// what the planner reads.
func (s *state) snapshot(observed []Observed) (map[string]Adoption, map[string]spec.Resources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.adopted)+len(s.updated) == 0 {
		return nil, nil
	}
	exists := make(map[string]bool, len(observed))
	for _, o := range observed {
		exists[o.ID] = true
	}
	maps.DeleteFunc(s.adopted, func(id string, _ Adoption) bool { return !exists[id] })
	maps.DeleteFunc(s.updated, func(id string, _ spec.Resources) bool { return !exists[id] })
	return maps.Clone(s.adopted), maps.Clone(s.updated)
}

// take charges one replacement at now to the budget, or reports false when
// the budget for the window is spent.
func (s *state) take(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	if len(s.used) >= s.budget.Max {
		return false
	}
	s.used = append(s.used, now)
	return true
}

// refund gives back the charges made at the times at (see take).
func (s *state) refund(at []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range at {
		if i := slices.IndexFunc(s.used, t.Equal); i >= 0 {
			s.used = slices.Delete(s.used, i, i+1)
		}
	}
}

// pruneLocked drops replacements older than the window. A charge from
// the future (restored from Config.BudgetUsed, stamped by a clock that
// has since gone back) is counted as made now: its age is unknown, and
// it expires a window from now rather than when the clock catches up
// with it (every replacement would wait that long, an hour or a year).
// Within a process the clock's monotonic reading never goes back.
func (s *state) pruneLocked(now time.Time) {
	assertLocked(&s.mu)
	for i := len(s.used) - 1; i >= 0 && s.used[i].After(now); i-- {
		s.used[i] = now
	}
	cut := now.Add(-s.budget.Window)
	i := 0
	for i < len(s.used) && !s.used[i].After(cut) {
		i++
	}
	s.used = s.used[i:]
}

func (s *state) usedAt(now time.Time) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	return slices.Clone(s.used)
}

func (s *state) adopt(a Adoption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopted[a.ID] = a
}

func (s *state) setUpdated(id string, res spec.Resources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updated[id] = res
}

// BudgetUsed returns the start times of the replacements within the current
// budget window, oldest first, for an agent that persists the budget across
// restarts (Config.BudgetUsed).
func (r *Reconciler) BudgetUsed() []time.Time { return r.state.usedAt(r.now()) }

// Adoptions returns the containers this Reconciler adopted that still
// exist, by name, for an agent that persists them (Config.Adoptions).
func (r *Reconciler) Adoptions() []Adoption {
	r.state.mu.Lock()
	defer r.state.mu.Unlock()
	out := slices.Collect(maps.Values(r.state.adopted))
	slices.SortFunc(out, func(a, b Adoption) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// assertLocked panics unless m is locked: a ...Locked function called
// without its lock would race silently. (The internal syncs.AssertLocked,
// which reconcile does not import.)
func assertLocked(m *sync.Mutex) {
	if m.TryLock() {
		m.Unlock()
		panic("reconcile: mutex is not locked")
	}
}
