package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// rollbackTimeout bounds the steps that put an old container back after a
// failed replacement. They run even when the pass's context is cancelled:
// leaving the old container stopped aside would be an outage.
const rollbackTimeout = 5 * time.Minute

// replace replaces the container o.ID with o.Desired, crash-safely:
//
//  1. stop the old container with its own signal and timeout;
//  2. rename it to NAME+AsideSuffix;
//  3. create the new container under NAME;
//  4. start it;
//  5. wait until it is healthy, when it has a healthcheck (bounded);
//  6. remove the old container (never its volumes).
//
// A failure in steps 1 to 5 puts the old container back: the new one is
// removed, the old one renamed back and started. A failure in step 6 leaves
// the old container aside, stopped, for the next pass to remove. If the
// process dies at any step, the next pass finds the container aside and
// finishes or rolls back (see the Resume and Rollback kinds).
func (r *Reconciler) replace(ctx context.Context, o *Outcome) (string, error) {
	name, old := o.Name, o.ID
	fail := func(step string, err error) error {
		return fmt.Errorf("replacing %q: %s: %w", name, step, err)
	}
	if err := r.stop(ctx, old, o.StopTimeout); err != nil {
		if o.Running {
			if rerr := r.rt.Start(context.WithoutCancel(ctx), old); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restarting the old container: %w", rerr))
			}
		}
		return "", fail("stopping old container", err)
	}
	if err := r.rt.Rename(ctx, old, name+AsideSuffix); err != nil {
		if o.Running { // put it back as it was: a stopped one stays stopped
			if rerr := r.rt.Start(context.WithoutCancel(ctx), old); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restarting the old container: %w", rerr))
			}
		}
		return "", fail("renaming old container aside", err)
	}
	return r.complete(ctx, "replacing", o.Action, old, "")
}

// complete brings up the new container for a (possibly resumed)
// replacement: it creates it unless newID names one already, starts it,
// waits until it is healthy, and removes the old container asideID. On
// failure before the old container is removed, it restores the old one.
func (r *Reconciler) complete(ctx context.Context, op string, a Action, asideID, newID string) (string, error) {
	name, d := a.Name, a.Desired
	rollback := func(step string, err error) (string, error) {
		err = fmt.Errorf("%s %q: %s: %w", op, name, step, err)
		if rerr := r.restore(ctx, name, asideID, newID, d.StopTimeout); rerr != nil {
			return "", errors.Join(err, fmt.Errorf("rolling back: %w", rerr))
		}
		return "", err
	}
	if newID == "" {
		id, err := r.rt.Create(ctx, labelled(*d, r.cfg.Owner))
		if err != nil {
			return rollback("creating new container", err)
		}
		newID = id
	}
	if err := r.rt.Start(ctx, newID); err != nil {
		return rollback("starting new container", err)
	}
	if d.Healthcheck != nil {
		if err := r.waitHealthy(ctx, newID); err != nil {
			return rollback("new container", err)
		}
	}
	if err := r.rt.Remove(ctx, asideID); err != nil && !errors.Is(err, ErrNotFound) {
		return newID, fmt.Errorf("%s %q: removing old container %q (the next pass retries): %w", op, name, name+AsideSuffix, err)
	}
	return newID, nil
}

// restore puts the old container asideID back under name and starts it,
// after stopping and removing newID when there is one. It runs even if ctx
// is cancelled.
func (r *Reconciler) restore(ctx context.Context, name, asideID, newID string, newTimeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if newID != "" {
		if err := r.stop(ctx, newID, newTimeout); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("stopping new container: %w", err)
		}
		if err := r.rt.Remove(ctx, newID); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("removing new container: %w", err)
		}
	}
	if err := r.rt.Rename(ctx, asideID, name); err != nil {
		return fmt.Errorf("renaming old container back: %w", err)
	}
	if err := r.rt.Start(ctx, asideID); err != nil {
		return fmt.Errorf("starting old container: %w", err)
	}
	return nil
}
