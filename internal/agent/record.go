package reconcile

import (
	"github.com/meshhost/meshhost/internal/agent/journal"
)

// record writes a pass that did something to the journal. Passes that only
// kept containers are not recorded: they would push the history out.
func (r *Reconciler) record(res *Result) error {
	p := journal.PassEntry{Time: res.Start, Duration: res.Duration, Deferred: res.Deferred}
	for _, o := range res.Outcomes {
		if o.Kind == Keep && o.Err == nil {
			continue
		}
		a := journal.Action{
			Kind: string(o.Kind), Container: o.Name, Reason: o.Reason, ID: o.ID, NewID: o.NewID,
			Deferred: o.Deferred, Duration: o.Duration,
		}
		if o.Err != nil {
			a.Err = o.Err.Error()
		}
		p.Actions = append(p.Actions, a)
	}
	if len(p.Actions) == 0 {
		return nil
	}
	_, err := r.cfg.Journal.RecordPass(p)
	return err
}
