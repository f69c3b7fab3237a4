package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/spec"
)

// Reconcile plans and applies one pass.
func (r *Reconciler) Reconcile(ctx context.Context, desired []spec.Rendered) (*Result, error) {
	p, err := r.Plan(ctx, desired)
	if err != nil {
		return nil, err
	}
	return r.Apply(ctx, p)
}

// Apply carries out p: removals first (dependants before their
// dependencies), then the declared containers, each after its dependencies
// are done (and healthy, when they have a healthcheck and were just
// started), with at most Config.Concurrency actions at once. Replacements
// and removals beyond the budget are deferred (Outcome.Deferred); the
// others are charged to it, and the charges saved (Config.BudgetCharged),
// before the first action. An action whose dependency failed is not attempted.
//
// Apply returns a Result in every case, and an error joining the errors of
// every failed action.
func (r *Reconciler) Apply(ctx context.Context, p *Plan) (*Result, error) {
	start := r.now()
	res := &Result{Start: start, Outcomes: make([]Outcome, len(p.Actions))}
	for i, a := range p.Actions {
		res.Outcomes[i].Action = a
	}
	r.charge(res)
	r.run(ctx, res)
	for _, o := range res.Outcomes {
		if o.Frozen {
			res.Frozen++
		}
	}
	res.Duration = r.now().Sub(start)
	r.metrics.passDuration.Observe(res.Duration.Seconds())
	r.metrics.budgetUsed.Set(float64(len(r.BudgetUsed())))
	r.metrics.pending.WithLabelValues(PendingBudget).Set(float64(res.Deferred))
	return res, res.Err()
}

// charge takes a budget token for each replacement and removal
// (Action.Disrupts) in order, and defers those beyond the budget. It runs
// before any action of the pass, and saves the charges through
// Config.BudgetCharged before returning: one whose charge cannot be saved
// is deferred and refunded (see Config.BudgetCharged for why).
func (r *Reconciler) charge(res *Result) {
	var charged []*Outcome
	var at []time.Time
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		if !o.Disrupts() {
			continue
		}
		if now := r.now(); r.state.take(now) {
			charged, at = append(charged, o), append(at, now)
			continue
		}
		o.Deferred = true
		res.Deferred++
		r.metrics.deferred.Inc()
	}
	if len(charged) == 0 || r.cfg.BudgetCharged == nil {
		return
	}
	err := r.cfg.BudgetCharged(r.BudgetUsed())
	if err == nil {
		return
	}
	r.state.refund(at)
	for _, o := range charged {
		o.Deferred, o.unsaved = true, true
		res.Deferred++
		r.metrics.deferred.Inc()
	}
	res.ChargeErr = fmt.Errorf("replacements and removals deferred (%d): saving the replacement budget before they begin: %w", len(charged), err)
}

// run carries out the outcomes' actions in two phases, removals then the
// rest. Within a phase, actions are launched in plan order and wait only
// for actions launched before them, so the concurrency limit cannot
// deadlock.
func (r *Reconciler) run(ctx context.Context, res *Result) {
	var removals, rest []int
	for i, o := range res.Outcomes {
		if o.Kind == Remove {
			removals = append(removals, i)
		} else {
			rest = append(rest, i)
		}
	}
	needHealthy := map[string]bool{}
	for _, o := range res.Outcomes {
		if o.Kind != Keep && o.Kind != Conflict && o.Kind != Remove {
			for _, d := range o.DependsOn {
				needHealthy[d] = true
			}
		}
	}
	for _, phase := range [][]int{removals, rest} {
		done := make(map[string]chan struct{}, len(phase))
		failed := make(map[string]*Outcome, len(phase))
		var g errgroup.Group
		g.SetLimit(r.cfg.Concurrency)
		for _, i := range phase {
			if o := &res.Outcomes[i]; o.Kind != Keep && o.Kind != Conflict {
				done[o.Name], failed[o.Name] = make(chan struct{}), o
			}
		}
		for _, i := range phase {
			o := &res.Outcomes[i]
			ch, ok := done[o.Name]
			if !ok {
				r.finish(ctx, o, nil) // nothing to do: don't take a slot
				continue
			}
			g.Go(func() error {
				defer close(ch)
				if err := r.waitFor(ctx, o, done, failed); err != nil {
					r.finish(ctx, o, err)
					return nil
				}
				if freezes[o.Kind] && !o.Deferred && r.cfg.Frozen != nil && r.cfg.Frozen() {
					o.Frozen = true
				}
				began := r.now()
				err := r.safely(ctx, fmt.Sprintf("%s %q", o.Kind, o.Name), func() error { return r.do(ctx, o, needHealthy[o.Name]) })
				o.Duration = r.now().Sub(began)
				r.finish(ctx, o, err)
				return nil
			})
		}
		g.Wait()
	}
}

// freezes are the kinds of action Config.Frozen holds back: those that
// change which containers exist or how they run.
var freezes = map[Kind]bool{Create: true, Replace: true, Remove: true, Update: true, Adopt: true}

// safely runs f, one action (or inspection) on a goroutine of its own,
// turning a panic into its error, logged with the stack and counted
// (meshhost_reconcile_panics_total): nothing could recover it on that
// goroutine, and the process, every other action of the pass with it,
// would die.
func (r *Reconciler) safely(ctx context.Context, what string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			r.metrics.panics.Inc()
			r.log.ErrorContext(ctx, "recovered from a panic", "in", what, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s: panicked: %v", what, v)
		}
	}()
	return f()
}

// waitFor waits until every dependency of o in this phase is done, and
// fails if one of them failed.
func (r *Reconciler) waitFor(ctx context.Context, o *Outcome, done map[string]chan struct{}, failed map[string]*Outcome) error {
	for _, dep := range o.DependsOn {
		ch, ok := done[dep]
		if !ok {
			continue // nothing to do for it this pass
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s %q: waiting for %q: %w", o.Kind, o.Name, dep, ctx.Err())
		}
		if failed[dep].Err != nil {
			return fmt.Errorf("%s %q: not attempted: dependency %q failed", o.Kind, o.Name, dep)
		}
	}
	return ctx.Err()
}

// finish logs and counts one outcome. Its lines are logged with the
// pass's context, so a handler may add what the context carries (the
// agent's pass, say).
func (r *Reconciler) finish(ctx context.Context, o *Outcome, err error) {
	o.Err = err
	attrs := []any{"container", o.Name, "kind", string(o.Kind), "reason", o.Reason, "duration_seconds", o.Duration.Seconds()}
	if o.NewID != "" {
		attrs = append(attrs, "id", o.NewID)
	}
	switch {
	case err != nil:
		r.metrics.errors.WithLabelValues(string(o.Kind)).Inc()
		r.log.ErrorContext(ctx, "reconcile action failed", append(attrs, "err", err)...)
	case o.Frozen:
		r.log.InfoContext(ctx, "action not begun: the machine is frozen (meshhost unfreeze lets it go on)", attrs...)
	case o.unsaved:
		r.log.ErrorContext(ctx, deferredWhat[o.Kind]+" deferred: its charge to the budget could not be saved; it goes ahead once a save succeeds", attrs...)
	case o.Deferred:
		// The budget pacing a large change, as it is there to: not a
		// fault (MeshhostReplacementBudgetExhausted says when it lasts).
		r.log.InfoContext(ctx, deferredWhat[o.Kind]+" deferred: budget spent", append(attrs, "budget_limit", r.cfg.Budget.Max, "budget_window_seconds", r.cfg.Budget.Window.Seconds())...)
	default:
		r.metrics.actions.WithLabelValues(string(o.Kind)).Inc()
		if o.Kind == Replace || o.Kind == Resume {
			r.metrics.replacements.Inc()
		}
		level := slog.LevelInfo
		if o.Kind == Keep {
			level = slog.LevelDebug
		}
		r.log.Log(ctx, level, "reconcile action", attrs...)
	}
}

// deferredWhat names the actions the budget defers, for the log.
var deferredWhat = map[Kind]string{Replace: "replacement", Remove: "removal"}

// do carries out one action.
func (r *Reconciler) do(ctx context.Context, o *Outcome, healthy bool) error {
	d := o.Desired
	if o.Frozen {
		if (o.Kind == Replace || o.Kind == Update) && !o.Running {
			return r.start(ctx, "starting (the machine is frozen)", o.Name, o.ID, nil, false)
		}
		return nil
	}
	switch o.Kind {
	case Create:
		id, err := r.rt.Create(ctx, labelled(*d, r.cfg.Owner, r.cfg.HashKey))
		if err != nil {
			return fmt.Errorf("creating %q: %w", o.Name, err)
		}
		o.NewID = id
		return r.start(ctx, "creating", o.Name, id, d, healthy)
	case Start:
		return r.start(ctx, "starting", o.Name, o.ID, d, healthy)
	case Replace:
		if o.Deferred {
			if o.Running {
				return nil
			}
			return r.start(ctx, "starting (replacement deferred)", o.Name, o.ID, nil, false)
		}
		id, err := r.replace(ctx, o)
		o.NewID = id
		return err
	case Resume:
		id, err := r.complete(ctx, "finishing the replacement of", o.Action, o.AsideID, o.AsideStopTimeout, o.ID)
		o.NewID = id
		return err
	case Rollback:
		if err := r.restore(ctx, o.Name, o.AsideID, o.ID, o.StopTimeout); err != nil {
			return fmt.Errorf("rolling back the replacement of %q: %w", o.Name, err)
		}
		o.NewID = o.AsideID
		return r.waitIf(ctx, "rolling back", o.Name, o.AsideID, d, healthy)
	case Update:
		if err := r.rt.Update(ctx, o.ID, d.Resources); err != nil {
			return fmt.Errorf("updating %q in place: %w", o.Name, err)
		}
		r.state.setUpdated(o.ID, d.Resources)
		if o.Running {
			return nil
		}
		return r.start(ctx, "updating", o.Name, o.ID, d, healthy)
	case Adopt:
		rec := *d // what the container runs with, once adopted
		switch {
		case o.adoptAs != nil:
			rec.Resources = *o.adoptAs
		case len(o.Changes) > 0:
			if err := r.rt.Update(ctx, o.ID, d.Resources); err != nil {
				return fmt.Errorf("adopting %q: updating in place: %w", o.Name, err)
			}
		}
		r.state.adopt(Adoption{ID: o.ID, Name: o.Name, Digest: r.cfg.HashKey.Of(rec), Record: r.cfg.HashKey.Record(rec), Version: AdoptionVersion})
		if o.Running {
			return nil
		}
		return r.start(ctx, "adopting", o.Name, o.ID, d, healthy)
	case Remove:
		if o.Deferred {
			return nil // the budget was spent: the container stays as it is
		}
		if o.Removing {
			// Nothing runs in it, and the runtime refuses to stop it.
			if err := r.rt.Remove(ctx, o.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("finishing the removal of %q: %w", o.Name, err)
			}
			return nil
		}
		if err := r.stop(ctx, o.ID, o.StopTimeout); err != nil {
			return fmt.Errorf("removing %q: stopping: %w", o.Name, err)
		}
		if err := r.rt.Remove(ctx, o.ID); err != nil {
			return fmt.Errorf("removing %q: %w", o.Name, err)
		}
		return nil
	}
	return nil
}

// start starts container id and, when healthy is set and d has a
// healthcheck, waits until it is healthy.
func (r *Reconciler) start(ctx context.Context, op, name, id string, d *spec.Rendered, healthy bool) error {
	if err := r.rt.Start(ctx, id); err != nil {
		return fmt.Errorf("%s %q: starting: %w", op, name, err)
	}
	return r.waitIf(ctx, op, name, id, d, healthy)
}

func (r *Reconciler) waitIf(ctx context.Context, op, name, id string, d *spec.Rendered, healthy bool) error {
	if !healthy || d == nil || d.Healthcheck == nil {
		return nil
	}
	if err := r.waitHealthy(ctx, id); err != nil {
		return fmt.Errorf("%s %q: %w", op, name, err)
	}
	return nil
}

// stop stops container id with its own signal, waiting timeout before the
// runtime kills it. A zero timeout is unknown: the container's is read by
// inspecting it.
func (r *Reconciler) stop(ctx context.Context, id string, timeout time.Duration) error {
	if timeout == 0 {
		ins, err := r.rt.Inspect(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return err
		case err == nil && ins.Settings.StopTimeout > 0:
			timeout = ins.Settings.StopTimeout
		default:
			timeout = spec.DefaultStopTimeout
		}
	}
	return r.rt.Stop(ctx, id, timeout)
}
