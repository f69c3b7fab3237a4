package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestBudgetPacesRemovals: the budget paces removals as it paces
// replacements, from the same tokens (a push that removed every container
// removed them all at once: a running service removed is at least as
// disruptive as one replaced); a removal deferred leaves its container
// running as it is. Finishing a removal cut short (nothing runs in it) is
// never charged.
func TestBudgetPacesRemovals(t *testing.T) {
	names := func(rt *memory.Runtime) string {
		var out []string
		for _, c := range rt.Containers() {
			out = append(out, c.Name+"="+string(c.State))
		}
		return strings.Join(out, " ")
	}
	t.Run("removals alone", func(t *testing.T) {
		clock := newClock()
		rt := memory.New(memory.Options{})
		budget := reconcile.Budget{Max: 2, Window: time.Minute}
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget, c.Now = budget, clock.Now })
		var cs []spec.Container
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			cs = append(cs, container(n, "img:1"))
		}
		mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
		for _, step := range []struct {
			advance          time.Duration
			removed, pending int
			left             string
		}{
			{0, 2, 3, "a=running b=running c=running"},
			{30 * time.Second, 0, 3, "a=running b=running c=running"},
			{30 * time.Second, 2, 1, "a=running"},
			{time.Minute, 1, 0, ""},
		} {
			clock.Advance(step.advance)
			res := mustReconcile(t, r, nil)
			if got := res.Count(reconcile.Remove); got != step.removed || res.Deferred != step.pending {
				t.Errorf("at %v: removed %d, deferred %d; want %d, %d", clock.Now(), got, res.Deferred, step.removed, step.pending)
			}
			if got := names(rt); got != step.left {
				t.Errorf("at %v: containers %q, want %q (the deferred ones running as they were)", clock.Now(), got, step.left)
			}
		}
	})
	t.Run("with replacements", func(t *testing.T) {
		rt := memory.New(memory.Options{})
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget = reconcile.Budget{Max: 3, Window: time.Hour} })
		cs := []spec.Container{container("a", "img:1"), container("b", "img:1"), container("c", "img:1"), container("d", "img:1")}
		mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
		keep := []spec.Container{container("a", "img:2"), container("b", "img:2")} // c and d go
		res := mustReconcile(t, r, renderAll(t, keep, nil, resolveMode))
		// Removals come first in a plan: both, then one of two replacements.
		if res.Count(reconcile.Remove) != 2 || res.Count(reconcile.Replace) != 1 || res.Deferred != 1 {
			t.Errorf("removed %d, replaced %d, deferred %d; want 2, 1, 1 (three tokens for both kinds)", res.Count(reconcile.Remove), res.Count(reconcile.Replace), res.Deferred)
		}
	})
	t.Run("a removal cut short is finished whatever the budget", func(t *testing.T) {
		rt := memory.New(memory.Options{})
		mustReconcile(t, newReconciler(t, rt, nil), renderAll(t, []spec.Container{container("a", "img:1")}, nil, resolveMode))
		rt.Inject(memory.Fault{Method: "Remove", N: 1, Cut: true})
		if _, err := newReconciler(t, rt, nil).Reconcile(context.Background(), nil); err == nil {
			t.Fatal("a Remove cut short: no error")
		}
		if got := names(rt); got != "a=removing" {
			t.Fatalf("after the cut: %q, want a=removing", got)
		}
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget = reconcile.Budget{Max: 0, Window: time.Hour} })
		if res := mustReconcile(t, r, nil); res.Deferred != 0 || names(rt) != "" {
			t.Errorf("with no budget: deferred %d, containers %q; want the removal finished", res.Deferred, names(rt))
		}
	})
}
