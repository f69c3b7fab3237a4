package agent

import (
	"context"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/reconcile"
)

// recordPass journals a pass that did something, with the generation of
// the declaration it applied. Passes that only kept containers are not
// recorded: they would push the history out. A failed write is logged; the
// pass goes on.
func (a *Agent) recordPass(ctx context.Context, generation uint64, res *reconcile.Result) {
	if a.cfg.Journal == nil || res == nil {
		return
	}
	p := journal.PassEntry{Time: res.Start, Generation: generation, Duration: res.Duration, Deferred: res.Deferred}
	for _, o := range res.Outcomes {
		if o.Kind == reconcile.Keep && o.Err == nil {
			continue
		}
		act := journal.Action{
			Kind: string(o.Kind), Container: o.Name, Reason: o.Reason, ID: o.ID, NewID: o.NewID,
			Deferred: o.Deferred, Duration: o.Duration,
		}
		if o.Err != nil {
			act.Err = o.Err.Error()
		}
		p.Actions = append(p.Actions, act)
	}
	if len(p.Actions) == 0 {
		return
	}
	if _, err := a.cfg.Journal.RecordPass(p); err != nil {
		a.log.WarnContext(ctx, "recording the pass in the journal", "err", err)
	}
}
