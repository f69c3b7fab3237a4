package reconcile_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestFrozen: while Config.Frozen reports true, no container is created,
// replaced, removed or updated; a container that would have been replaced
// and is stopped is started as it is. Once unfrozen, the same plan goes
// ahead.
func TestFrozen(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	var frozen atomic.Bool
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Frozen = frozen.Load })
	first := []spec.Container{container("db", "pg:1"), container("web", "caddy:1"), container("old", "x:1"), container("cache", "redis:7")}
	if _, err := r.Reconcile(ctx, renderAll(t, first, nil, resolveMode)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Exited("web"); err != nil { // stopped: its replacement is frozen, it is started as it is
		t.Fatal(err)
	}
	before := ids(rt)

	next := []spec.Container{container("db", "pg:1"), container("web", "caddy:2"), container("new", "y:1"), container("cache", "redis:7")}
	next[3].Resources.MemoryBytes = 64 << 20
	desired := renderAll(t, next, nil, resolveMode)
	frozen.Store(true)
	p, err := r.Plan(ctx, desired)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"remove old", "update cache", "create new", "replace web"}, kinds(p)); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}
	res, err := r.Apply(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Frozen != 4 {
		t.Errorf("Result.Frozen = %d, want 4", res.Frozen)
	}
	if diff := cmp.Diff(before, ids(rt)); diff != "" {
		t.Errorf("frozen, containers changed (-before +after):\n%s", diff)
	}
	if c, _ := rt.Container("web"); c.State != reconcile.StateRunning || c.Settings.Image != "caddy:1" {
		t.Errorf("web is %s with %s, want started as it was (caddy:1)", c.State, c.Settings.Image)
	}
	if c, _ := rt.Container("cache"); c.Settings.Resources.MemoryBytes != 0 {
		t.Errorf("frozen, cache was updated in place to %d bytes", c.Settings.Resources.MemoryBytes)
	}

	frozen.Store(false)
	if _, err := r.Reconcile(ctx, desired); err != nil {
		t.Fatal(err)
	}
	checkConverged(t, rt, desired)
	if _, ok := rt.Container("old"); ok {
		t.Error("unfrozen, old was not removed")
	}
}

// TestFrozenMidPass: a freeze that comes while a pass runs stops the
// actions not begun yet; the one begun finishes whole.
func TestFrozenMidPass(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	var frozen atomic.Bool
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Frozen = frozen.Load; c.Concurrency = 1 })
	cs := []spec.Container{container("a", "i:1"), container("b", "i:1"), container("c", "i:1")}
	if _, err := r.Reconcile(ctx, renderAll(t, cs, nil, resolveMode)); err != nil {
		t.Fatal(err)
	}
	// The operator freezes the machine as the first replacement creates its
	// new container.
	rt.Before(func(c memory.Call) error {
		if c.Method == "Create" {
			frozen.Store(true)
		}
		return nil
	})
	for i := range cs {
		cs[i].Image = "i:2"
	}
	res, err := r.Reconcile(ctx, renderAll(t, cs, nil, resolveMode))
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, c := range rt.Containers() {
		images = append(images, c.Name+"="+c.Settings.Image+"/"+string(c.State))
	}
	if diff := cmp.Diff([]string{"a=i:2/running", "b=i:1/running", "c=i:1/running"}, images); diff != "" {
		t.Errorf("after a freeze mid-pass (-want +got):\n%s", diff)
	}
	if res.Frozen != 2 {
		t.Errorf("Result.Frozen = %d, want 2", res.Frozen)
	}
}
