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
//  4. make sure the old one is stopped, then start the new one;
//  5. wait until it is healthy, when it has a healthcheck (bounded);
//  6. remove the old container (never its volumes).
//
// A failure in steps 1 to 5 puts the old container back: the new one is
// removed, the old one renamed back and started. A failure in step 6 leaves
// the old container aside, stopped, for the next pass to remove. If the
// process dies at any step, the next pass finds the container aside and
// finishes or rolls back (see the Resume and Rollback kinds).
//
// A call that fails may still have taken effect (its reply was lost: the
// API service restarted, a timeout): after a failed rename the container is
// inspected to learn its name, so that an old container already aside is
// never started there, beside its replacement.
func (r *Reconciler) replace(ctx context.Context, o *Outcome) (string, error) {
	name, old := o.Name, o.ID
	fail := func(step string, err error) error {
		return fmt.Errorf("replacing %q: %s: %w", name, step, err)
	}
	// putBack starts the old container again when it ran before, wherever
	// it is: a stopped one stays stopped.
	putBack := func(err error) error {
		if o.Running {
			if rerr := r.rt.Start(context.WithoutCancel(ctx), old); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restarting the old container: %w", rerr))
			}
		}
		return err
	}
	if err := r.stop(ctx, old, o.StopTimeout); err != nil {
		return "", fail("stopping old container", putBack(err))
	}
	if err := r.rename(ctx, old, name+AsideSuffix); err != nil {
		// Not renamed, or not known to be (the inspection failed too).
		// Started under either name, the old container keeps the service
		// up; a pass that resumes or rolls back the replacement stops an
		// old container running aside before a new one starts.
		return "", fail("renaming old container aside", putBack(err))
	}
	return r.complete(ctx, "replacing", o.Action, old, o.StopTimeout, "")
}

// rename renames container id to name. When the runtime reports a failure,
// it inspects the container: a rename that took effect all the same (its
// reply was lost) is a success.
func (r *Reconciler) rename(ctx context.Context, id, name string) error {
	err := r.rt.Rename(ctx, id, name)
	if err == nil {
		return nil
	}
	ins, ierr := r.rt.Inspect(context.WithoutCancel(ctx), id)
	switch {
	case ierr != nil:
		return errors.Join(err, fmt.Errorf("inspecting it to learn its name: %w", ierr))
	case ins.Name == name:
		r.log.WarnContext(ctx, "a rename reported a failure but took effect; going on", "container", name, "id", id, "err", err)
		return nil
	}
	return err
}

// complete brings up the new container for a (possibly resumed)
// replacement: it creates it unless newID names one already, stops the old
// container asideID (it should be stopped, but may have been started since:
// the two must never run together, on the same volumes), starts the new
// one, waits until it is healthy, and removes the old one. On failure
// before the old container is removed, it restores the old one.
func (r *Reconciler) complete(ctx context.Context, op string, a Action, asideID string, asideTimeout time.Duration, newID string) (string, error) {
	name, d := a.Name, a.Desired
	rollback := func(step string, err error) (string, error) {
		err = fmt.Errorf("%s %q: %s: %w", op, name, step, err)
		if rerr := r.restore(ctx, name, asideID, newID, d.StopTimeout); rerr != nil {
			return "", errors.Join(err, fmt.Errorf("rolling back: %w", rerr))
		}
		return "", err
	}
	if newID == "" {
		id, err := r.rt.Create(ctx, labelled(*d, r.cfg.Owner, r.cfg.HashKey))
		if err != nil {
			return rollback("creating new container", err)
		}
		newID = id
	}
	if err := r.stop(ctx, asideID, asideTimeout); err != nil && !errors.Is(err, ErrNotFound) {
		return rollback("stopping old container", err)
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
	if err := r.rename(ctx, asideID, name); err != nil {
		return fmt.Errorf("renaming old container back: %w", err)
	}
	if err := r.rt.Start(ctx, asideID); err != nil {
		return fmt.Errorf("starting old container: %w", err)
	}
	return nil
}
