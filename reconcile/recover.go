package reconcile

import (
	"fmt"
)

// recover decides how to finish a replacement that a crash interrupted: the
// old container, aside, waits under Name+AsideSuffix (stopped, unless
// someone started it since), and the new one, o, may or may not have been
// created or started. aside is managed by this Reconciler (planner.aside):
// anyone else's container under that name is never taken for one.
//
//   - nothing holds the name and the old container matches the declaration:
//     roll back (rename it back and start it);
//   - nothing holds the name: resume (create the new one, start it, wait
//     until healthy, remove the old one);
//   - a managed container matching the declaration holds the name: resume
//     from there (start it, wait until healthy, remove the old one);
//   - a managed container that does not match holds it: roll back, and let
//     the next pass replace within the budget;
//   - an unmanaged container holds it: a conflict, nothing is touched.
//
// Resuming is not charged to the budget: the replacement was charged when it
// began (and the charge saved then, before its first step: see
// Config.BudgetCharged), and the old container is down until it ends.
func (p *planner) recover(a Action, o, aside *Observed) Action {
	a.AsideID = aside.ID
	asideID := identityOf(aside, p.adopted, p.owner)
	a.AsideStopTimeout = recordStopTimeout(asideID.record)
	d := a.Desired
	stopping := ""
	if aside.State == StateRunning {
		// Started by hand, or by an older meshhost after a rename whose
		// reply was lost: it must stop before the new one starts on the
		// same volumes.
		stopping = fmt.Sprintf(" (%q runs: it is stopped first)", aside.Name)
	}
	if o == nil {
		if ok, _ := p.key.Matches(asideID.digest, *d); ok {
			a.Kind = Rollback
			a.Reason = fmt.Sprintf("a replacement was interrupted before the new container was created; %q matches the declaration: renaming it back", aside.Name)
			return a
		}
		a.Kind = Resume
		a.Reason = fmt.Sprintf("a replacement was interrupted after %q was set aside: creating the new container%s", aside.Name, stopping)
		return a
	}
	a.ID, a.Running = o.ID, o.State == StateRunning
	id := identityOf(o, p.adopted, p.owner)
	switch match, _ := p.judge(d, o, id); {
	case !id.managed:
		a.Kind = Conflict
		a.Reason = fmt.Sprintf("an unmanaged container holds the name while %q waits aside from an interrupted replacement; meshhost touches neither: resolve by hand", aside.Name)
	case match:
		a.Kind = Resume
		a.Reason = fmt.Sprintf("a replacement was interrupted after the new container was created: starting it, then removing %q%s", aside.Name, stopping)
	default:
		a.Kind = Rollback
		a.StopTimeout = recordStopTimeout(id.record)
		a.Reason = fmt.Sprintf("a replacement was interrupted and its new container no longer matches the declaration: removing it and renaming %q back", aside.Name)
	}
	return a
}
