package reconcile

import (
	"errors"
	"time"
)

// Result is what Apply did.
type Result struct {
	// Outcomes has one entry per action of the plan, in the plan's order.
	Outcomes []Outcome
	// Deferred counts replacements and removals left for a later pass by
	// the budget.
	Deferred int
	// Frozen counts actions not begun because the machine is frozen
	// (Config.Frozen).
	Frozen int
	// ChargeErr says why the replacements and removals the budget allowed were deferred
	// all the same: their charge could not be saved (Config.BudgetCharged).
	ChargeErr error
	Start     time.Time
	Duration  time.Duration
}

// Outcome is what became of one Action.
type Outcome struct {
	Action
	// Err says what failed, naming the container and the step:
	// `replacing "gitea": starting new container: ...`.
	Err error
	// Deferred reports a replacement or a removal the budget left for a
	// later pass. The container stays as it is; one a deferred
	// replacement finds not running is started as it is.
	Deferred bool
	// Frozen reports an action not begun because the machine is frozen
	// (Config.Frozen).
	Frozen bool
	// unsaved: deferred because its charge could not be saved, not because
	// the budget was spent.
	unsaved bool
	// NewID is the container now holding the name, when the action created
	// one (Create, Replace, Resume).
	NewID    string
	Duration time.Duration
}

// Err joins ChargeErr and the errors of every failed action, or returns
// nil.
func (r *Result) Err() error {
	errs := []error{r.ChargeErr}
	for _, o := range r.Outcomes {
		if o.Err != nil {
			errs = append(errs, o.Err)
		}
	}
	return errors.Join(errs...)
}

// Count returns how many actions of kind k completed without error and
// were neither deferred nor frozen.
func (r *Result) Count(k Kind) int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Kind == k && o.Err == nil && !o.Deferred && !o.Frozen {
			n++
		}
	}
	return n
}
