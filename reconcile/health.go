package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errUnhealthy is returned when a container's healthcheck reports it
// unhealthy while meshhost waits for it.
var errUnhealthy = errors.New("healthcheck reports unhealthy")

// waitHealthy inspects container id every HealthPoll until its healthcheck
// passes, for at most HealthTimeout. A container that reports no health
// (no healthcheck) passes at once.
func (r *Reconciler) waitHealthy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	defer cancel()
	t := time.NewTicker(r.cfg.HealthPoll)
	defer t.Stop()
	for {
		ins, err := r.rt.Inspect(ctx, id)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("waiting until healthy: inspecting: %w", err)
		case err != nil:
		case ins.Health == HealthHealthy || ins.Health == HealthNone:
			return nil
		case ins.Health == HealthUnhealthy:
			return fmt.Errorf("waiting until healthy: %w", errUnhealthy)
		case ins.State != StateRunning && ins.State != StateUnknown:
			return fmt.Errorf("waiting until healthy: container is %s", ins.State)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until healthy: not healthy within %v: %w", r.cfg.HealthTimeout, ctx.Err())
		case <-t.C:
		}
	}
}
