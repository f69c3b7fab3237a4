package agent

import (
	"context"
	"slices"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/reconcile"
)

// recordPassLocked journals pass n, which began at start, under its own
// number (the log's pass=): what it planned, each action done, deferred,
// frozen or failed (res, nil when a hold or a freeze stopped it), with
// the generation of the declaration it applied, and the holds it met
// first and those it found released (holds is every hold in force now).
// Passes that only kept containers and met no new hold are not recorded:
// they would push the history out. A failed write is logged; the pass
// goes on.
func (a *Agent) recordPassLocked(ctx context.Context, n uint64, start time.Time, generation uint64, res *reconcile.Result, holds []journal.Hold) {
	syncs.AssertLocked(&a.mu)
	if a.cfg.Journal == nil {
		return
	}
	p := journal.PassEntry{Seq: n, Time: start, Generation: generation}
	for _, h := range holds {
		if !slices.Contains(a.holds, h) {
			p.Holds = append(p.Holds, h)
		}
	}
	for _, h := range a.holds {
		if !slices.Contains(holds, h) {
			p.Released = append(p.Released, h)
		}
	}
	if res != nil {
		p.Time, p.Duration, p.Deferred = res.Start, res.Duration, res.Deferred
		for _, o := range res.Outcomes {
			if o.Kind == reconcile.Keep && o.Err == nil {
				continue
			}
			act := journal.Action{
				Kind: string(o.Kind), Container: o.Name, Reason: o.Reason, ID: o.ID, NewID: o.NewID,
				Deferred: o.Deferred, Frozen: o.Frozen, Duration: o.Duration,
			}
			if o.Err != nil {
				act.Err = o.Err.Error()
			}
			p.Actions = append(p.Actions, act)
		}
	} else {
		p.Duration = time.Since(start)
	}
	if len(p.Actions) == 0 && len(p.Holds) == 0 && len(p.Released) == 0 {
		return
	}
	if _, err := a.cfg.Journal.RecordPass(p); err != nil {
		a.log.WarnContext(ctx, "recording the pass in the journal", "err", err)
		return
	}
	a.holds = holds
}

// holdsLocked lists the holds in force for the pass that reported rep,
// the machine frozen by freeze (nil: not frozen): a held declaration, a
// held roster, a freeze.
func (a *Agent) holdsLocked(rep *Report, freeze *Freeze) []journal.Hold {
	syncs.AssertLocked(&a.mu)
	var hs []journal.Hold
	if freeze != nil {
		hs = append(hs, journal.Hold{Kind: journal.HoldFrozen, Reason: freeze.Reason})
	}
	if h := rep.Held; h.Held() {
		hs = append(hs, journal.Hold{Kind: journal.HoldDeclaration, Generation: h.Generation, Replacements: len(h.Replacements), Removals: len(h.Removals)})
	}
	if h := rep.rosterHold; h != nil {
		hs = append(hs, journal.Hold{Kind: journal.HoldRoster, Generation: h.Newest, Served: h.Served})
	}
	return hs
}
