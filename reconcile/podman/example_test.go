package podman_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/podman"
)

// The agent's wiring: a Runtime over the machine's podman service, given to
// the reconciler. On a machine without systemd, podman never runs
// healthchecks by itself, so the reconciler's wait for a healthy container
// needs RunHealthchecks.
func ExampleNew() {
	ctx := context.Background()
	rt, err := podman.New(ctx, "unix:///run/podman/podman.sock", slog.Default(), podman.RunHealthchecks())
	if err != nil {
		log.Fatal(err)
	}
	v, err := rt.Version(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("podman", v.Version)
	r, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "novox"})
	if err != nil {
		log.Fatal(err)
	}
	_ = r // r.Reconcile(ctx, desired) for each declaration
}
