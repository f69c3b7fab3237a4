package reconcile

import (
	"testing"
	"time"
)

// TestBudgetChargeFromTheFuture: a charge restored from an earlier
// Reconciler (Config.BudgetUsed, wall-clock times as saved) that is in
// the future, the clock having been set back since, is counted as made
// now: it expires one window from now, not when the clock catches up
// with it (the simulation found replacements deferred for as long as the
// clock went back; sim2-note.md). The budget's bound holds meanwhile.
func TestBudgetChargeFromTheFuture(t *testing.T) {
	now := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC) // no monotonic reading, as restored
	var s state
	s.init(Config{Budget: Budget{Max: 1, Window: 10 * time.Minute}, BudgetUsed: []time.Time{now.Add(2 * time.Hour)}})
	if s.take(now) {
		t.Fatal("a charge from the future is not counted: the budget of 1 took another at once")
	}
	if s.take(now.Add(10*time.Minute - time.Second)) {
		t.Fatal("the charge counted as made now expired before a window passed")
	}
	if !s.take(now.Add(10*time.Minute + time.Second)) {
		t.Fatalf("a window after the charge from the future was first seen, the budget is still spent (used %v): replacements wait until the clock catches up with it", s.used)
	}
}
