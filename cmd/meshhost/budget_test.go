package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/fullfs"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// Issue 7: the replacement budget of an agent killed mid-pass. The agent's
// reconciler as agent.OpenReconciler wires it, on the in-memory runtime.

// budgetFixture is a running container web (image img:1) and a way to
// open the agent's reconciler on the state file path, with a budget of one
// replacement an hour.
func budgetFixture(t *testing.T, path string) (rt *memory.Runtime, open func() (*reconcile.Reconciler, func()), web func(image string) []spec.Rendered) {
	t.Helper()
	rt = memory.New(memory.Options{})
	open = func() (*reconcile.Reconciler, func()) {
		t.Helper()
		rec, save, err := agent.OpenReconciler(reconcile.Config{Runtime: rt, Owner: "ace", Budget: reconcile.Budget{Max: 1, Window: time.Hour}},
			path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return rec, save
	}
	web = func(image string) []spec.Rendered {
		r, err := spec.Render(spec.Container{Name: "web", Image: image}, nil, spec.Mode{Names: spec.Resolve,
			DNS: spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}}})
		if err != nil {
			t.Fatal(err)
		}
		return []spec.Rendered{r}
	}
	rec, save := open()
	if _, err := rec.Reconcile(context.Background(), web("img:1")); err != nil {
		t.Fatal(err)
	}
	save()
	return rt, open, web
}

// TestAgentBudgetSavedBeforeReplacement: reconciler.json holds a
// replacement's charge before the replacement's first podman call, so an
// agent killed there restarts with the hour's one replacement spent.
func TestAgentBudgetSavedBeforeReplacement(t *testing.T) {
	path := statedir.New(t.TempDir()).Reconciler()
	rt, open, web := budgetFixture(t, path)
	before, _ := rt.Container("web")

	// The agent dies at the replacement's first podman call (the stop):
	// what reconciler.json says then is what the next agent starts from.
	// Its pass never ends, so the save after the pass never runs.
	killed := errors.New("SIGKILL")
	var atStop []byte
	rt.Before(func(c memory.Call) error {
		if c.Method != "Stop" {
			return nil
		}
		atStop, _ = os.ReadFile(path)
		return killed
	})
	rec, _ := open()
	if _, err := rec.Reconcile(context.Background(), web("img:2")); !errors.Is(err, killed) {
		t.Fatalf("the killed pass: %v, want the kill", err)
	}
	rt.Before(nil)
	var st agent.ReconcileState
	if err := json.Unmarshal(atStop, &st); err != nil || len(st.BudgetUsed) != 1 {
		t.Fatalf("reconciler.json at the replacement's first podman call = %s (%v), want its charge", atStop, err)
	}

	rec, _ = open() // the restarted agent
	res, err := rec.Reconcile(context.Background(), web("img:2"))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := rt.Container("web"); res.Deferred != 1 || c.ID != before.ID {
		t.Errorf("after the restart: deferred %d, web %s (was %s); want web's replacement deferred by the budget spent before the kill",
			res.Deferred, c.ID, before.ID)
	}
}

// TestAgentBudgetUnsavedOnFullDisk: when the charge cannot be saved, the
// replacement waits and the pass fails naming the file and the full disk;
// once there is room again it goes ahead.
func TestAgentBudgetUnsavedOnFullDisk(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	path := statedir.New(dir).Reconciler()
	rt, open, web := budgetFixture(t, path)
	before, _ := rt.Container("web")
	rec, _ := open()
	release := fullfs.Fill(t, dir, 0)
	res, err := rec.Reconcile(context.Background(), web("img:2"))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Errorf("a pass whose charge cannot be saved = %v, want the full disk and %s named", err, path)
	}
	if c, _ := rt.Container("web"); res.Deferred != 1 || c.ID != before.ID || c.State != reconcile.StateRunning {
		t.Errorf("on a full disk: deferred %d, web %s %s; want the old web running, its replacement deferred", res.Deferred, c.ID, c.State)
	}
	if n := rt.Calls("Stop"); n != 0 {
		t.Errorf("%d stops on a full disk, want none", n)
	}
	release()
	res, err = rec.Reconcile(context.Background(), web("img:2"))
	if c, _ := rt.Container("web"); err != nil || res.Count(reconcile.Replace) != 1 || c.ID == before.ID {
		t.Errorf("with room again: %v, replaced %d; want web replaced", err, res.Count(reconcile.Replace))
	}
	var st agent.ReconcileState
	if data, _ := os.ReadFile(path); json.Unmarshal(data, &st) != nil || len(st.BudgetUsed) != 1 {
		t.Errorf("reconciler.json after the replacement = %s, want its charge", data)
	}
}
