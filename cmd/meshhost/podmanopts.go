package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/meshhost/meshhost/reconcile/podman"
)

// openPodman connects to podman with what this machine needs: healthchecks
// run by meshhost where no systemd runs them, and whether podman keeps
// in-place updates (5.1 and later).
func openPodman(ctx context.Context, uri string, logger *slog.Logger) (rt *podman.Runtime, inPlaceUpdates bool, err error) {
	var opts []podman.Option
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		// Podman schedules healthchecks with systemd timers: without
		// systemd a healthcheck never runs by itself.
		opts = append(opts, podman.RunHealthchecks())
	}
	rt, err = podman.New(ctx, uri, logger, opts...)
	if err != nil {
		return nil, false, err
	}
	keeps, err := rt.KeepsUpdates(ctx)
	if err != nil {
		return nil, false, err
	}
	return rt, keeps, nil
}
