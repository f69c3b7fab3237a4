package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func replaceFixture(t *testing.T) (*memory.Runtime, []spec.Container) {
	rt := memory.New(memory.Options{HealthDelay: time.Millisecond})
	cs := []spec.Container{
		{Name: "db", Image: "postgres:16", StopSignal: "SIGINT", StopTimeout: 2 * time.Minute,
			Healthcheck: &spec.Healthcheck{Test: []string{"pg_isready"}},
			Mounts:      []spec.Mount{{Type: spec.MountVolume, Source: "pgdata", Target: "/data"}}},
		{Name: "app", Image: "app:1", DependsOn: []string{"db"}},
	}
	mustReconcile(t, newReconciler(t, rt, nil), renderAll(t, cs, nil, resolveMode))
	cs[0].Image = "postgres:17"
	return rt, cs
}

// TestCrashDuringReplace crashes the process at each step of a replacement
// (every runtime call from that one on fails), then runs a fresh
// Reconciler: it must converge with nothing lost and nothing replaced
// twice.
func TestCrashDuringReplace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault memory.Fault
		// wantNext is the kind of the next pass's action for db.
		wantNext reconcile.Kind
	}{
		{"stop", memory.Fault{Method: "Stop", N: 1}, reconcile.Replace},
		{"stop took effect", memory.Fault{Method: "Stop", N: 1, After: true}, reconcile.Replace},
		{"rename aside", memory.Fault{Method: "Rename", N: 1}, reconcile.Replace},
		{"rename aside took effect", memory.Fault{Method: "Rename", N: 1, After: true}, reconcile.Resume},
		{"create", memory.Fault{Method: "Create", N: 1}, reconcile.Resume},
		{"create took effect", memory.Fault{Method: "Create", N: 1, After: true}, reconcile.Resume},
		{"start new", memory.Fault{Method: "Start", N: 1}, reconcile.Resume},
		{"health", memory.Fault{Method: "Inspect", N: 1}, reconcile.Resume},
		{"remove old", memory.Fault{Method: "Remove", N: 1}, reconcile.Resume},
		{"remove old took effect", memory.Fault{Method: "Remove", N: 1, After: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, cs := replaceFixture(t)
			desired := renderAll(t, cs, nil, resolveMode)
			volumes := rt.Volumes()
			appID := ids(rt)["app"]
			tc.fault.Crash = true
			rt.Inject(tc.fault)
			if _, err := newReconciler(t, rt, nil).Reconcile(context.Background(), desired); err == nil {
				t.Fatal("Reconcile with a crash: no error")
			}
			rt.Recover()
			newExists := false
			for _, c := range rt.Containers() {
				newExists = newExists || c.Settings.Image == "postgres:17"
			}
			creates := rt.Calls("Create")

			r := newReconciler(t, rt, nil)
			p, err := r.Plan(context.Background(), desired)
			if err != nil {
				t.Fatalf("Plan after crash: %v", err)
			}
			var got reconcile.Kind
			for _, a := range p.Changes() {
				if a.Name == "db" {
					got = a.Kind
				}
			}
			if got != tc.wantNext {
				t.Errorf("after the crash, plan for db = %q, want %q (plan:\n%v)", got, tc.wantNext, p)
			}
			if _, err := r.Apply(context.Background(), p); err != nil {
				t.Fatalf("Apply after crash: %v", err)
			}
			checkConverged(t, rt, desired)
			if n := len(rt.Containers()); n != 2 {
				t.Errorf("%d containers, want 2: %v", n, ids(rt))
			}
			if diff := cmp.Diff(volumes, rt.Volumes()); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
			if ids(rt)["app"] != appID {
				t.Error("app was replaced")
			}
			wantCreates := 1
			if newExists {
				wantCreates = 0 // never create a second new container
			}
			if got := rt.Calls("Create") - creates; got != wantCreates {
				t.Errorf("the pass after the crash created %d containers, want %d", got, wantCreates)
			}
			if again, _ := r.Plan(context.Background(), desired); len(again.Changes()) != 0 {
				t.Errorf("not converged: %v", again)
			}
		})
	}
}

// TestFailedReplaceRollsBack injects one failure per step, without a crash:
// the replacement must put the old container back, running, and say which
// step failed.
func TestFailedReplaceRollsBack(t *testing.T) {
	for _, tc := range []struct {
		fault   memory.Fault
		wantErr string
	}{
		{memory.Fault{Method: "Stop", N: 1}, `replacing "db": stopping old container`},
		{memory.Fault{Method: "Rename", N: 1}, `replacing "db": renaming old container aside`},
		{memory.Fault{Method: "Create", N: 1}, `replacing "db": creating new container`},
		{memory.Fault{Method: "Start", N: 1}, `replacing "db": starting new container`},
	} {
		t.Run(tc.fault.Method, func(t *testing.T) {
			rt, cs := replaceFixture(t)
			oldID := ids(rt)["db"]
			rt.Inject(tc.fault)
			_, err := newReconciler(t, rt, nil).Reconcile(context.Background(), renderAll(t, cs, nil, resolveMode))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, memory.ErrInjected) {
				t.Fatalf("error = %v, want %q wrapping ErrInjected", err, tc.wantErr)
			}
			c, ok := rt.Container("db")
			if !ok || c.ID != oldID || c.State != reconcile.StateRunning {
				t.Errorf("after a failed replacement db = %+v, want the old container %s running", c, oldID)
			}
			if n := len(rt.Containers()); n != 2 {
				t.Errorf("%d containers, want 2", n)
			}
		})
	}
}

func TestUnhealthyReplacementRollsBack(t *testing.T) {
	rt, cs := replaceFixture(t)
	oldID := ids(rt)["db"]
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.HealthTimeout = 50 * time.Millisecond })
	rt.SetUnhealthy("db", true)
	_, err := r.Reconcile(context.Background(), renderAll(t, cs, nil, resolveMode))
	if err == nil || !strings.Contains(err.Error(), `replacing "db": new container: waiting until healthy`) {
		t.Fatalf("error = %v", err)
	}
	if c, _ := rt.Container("db"); c.ID != oldID || c.State != reconcile.StateRunning {
		t.Errorf("db = %s %s, want the old %s running", c.ID, c.State, oldID)
	}
}

func TestBudget(t *testing.T) {
	clock := newClock()
	rt := memory.New(memory.Options{})
	budget := reconcile.Budget{Max: 2, Window: time.Minute}
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget, c.Now = budget, clock.Now })
	var cs []spec.Container
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		cs = append(cs, container(n, "img:1"))
	}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode)) // creates are free
	for i := range cs {
		cs[i].Image = "img:2"
	}
	desired := renderAll(t, cs, nil, resolveMode)

	for _, step := range []struct {
		advance            time.Duration
		fresh              bool // a new Reconciler, restored from BudgetUsed
		replaced, deferred int
	}{
		{0, false, 2, 3},
		{30 * time.Second, false, 0, 3},
		{30 * time.Second, true, 2, 1}, // the window has passed
		{10 * time.Second, true, 0, 1},
		{time.Minute, false, 1, 0},
	} {
		clock.Advance(step.advance)
		if step.fresh {
			used := r.BudgetUsed()
			r = newReconciler(t, rt, func(c *reconcile.Config) { c.Budget, c.Now, c.BudgetUsed = budget, clock.Now, used })
		}
		res := mustReconcile(t, r, desired)
		if got := res.Count(reconcile.Replace); got != step.replaced || res.Deferred != step.deferred {
			t.Errorf("at %v: replaced %d, deferred %d; want %d, %d", clock.Now(), got, res.Deferred, step.replaced, step.deferred)
		}
	}
	checkConverged(t, rt, desired)
}

func TestDeferredStoppedContainerIsStarted(t *testing.T) {
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget = reconcile.Budget{Max: 0, Window: time.Minute} })
	cs := []spec.Container{container("a", "img:1")}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	rt.Exited("a")
	cs[0].Image = "img:2"
	res := mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	if res.Deferred != 1 {
		t.Errorf("deferred = %d, want 1", res.Deferred)
	}
	if c, _ := rt.Container("a"); c.State != reconcile.StateRunning || c.Settings.Image != "img:1" {
		t.Errorf("a = %s %s, want the old image running", c.State, c.Settings.Image)
	}
}

// TestBudgetSavedBeforeReplacementBegins: the charge of a replacement is
// handed to Config.BudgetCharged before the runtime sees any action of the
// pass, so a process killed at the replacement's first step restarts with
// the charge, and a budget of one an hour holds the next replacement.
func TestBudgetSavedBeforeReplacementBegins(t *testing.T) {
	clock := newClock()
	budget := reconcile.Budget{Max: 1, Window: time.Hour}
	rt := memory.New(memory.Options{})
	cs := []spec.Container{container("a", "img:1"), container("b", "img:1")}
	mustReconcile(t, newReconciler(t, rt, nil), renderAll(t, cs, nil, resolveMode))
	before := ids(rt)
	cs[0].Image = "img:2"
	desired := renderAll(t, cs, nil, resolveMode)

	var saved []time.Time
	var atSave map[string]int // the runtime's calls when the charge was saved
	withHook := func(c *reconcile.Config) {
		c.Budget, c.Now = budget, clock.Now
		c.BudgetCharged = func(used []time.Time) error {
			saved, atSave = used, rt.CallCounts()
			return nil
		}
	}
	r := newReconciler(t, rt, withHook)
	p, err := r.Plan(context.Background(), desired)
	if err != nil {
		t.Fatal(err)
	}
	rt.ResetCalls()
	// The process dies at the replacement's first runtime call.
	rt.Inject(memory.Fault{Method: "Stop", N: 1, Crash: true})
	if _, err := r.Apply(context.Background(), p); err == nil {
		t.Fatal("Apply with a crash at the first stop: no error")
	}
	rt.Recover()
	if diff := cmp.Diff([]time.Time{clock.Now()}, saved); diff != "" {
		t.Fatalf("budget saved (-want +got):\n%s", diff)
	}
	if len(atSave) != 0 {
		t.Errorf("runtime calls before the charge was saved: %v, want none", atSave)
	}

	// The restarted process restores what was saved: the hour's one
	// replacement is spent.
	clock.Advance(time.Minute)
	r = newReconciler(t, rt, func(c *reconcile.Config) { withHook(c); c.BudgetUsed = saved })
	res := mustReconcile(t, r, desired)
	if res.Deferred != 1 || res.Count(reconcile.Replace) != 0 {
		t.Errorf("after a restart: replaced %d, deferred %d; want 0, 1 (the killed pass's charge holds)", res.Count(reconcile.Replace), res.Deferred)
	}
	if got := ids(rt); got["a"] != before["a"] {
		t.Errorf("a replaced again within the hour after a restart: %s -> %s", before["a"], got["a"])
	}
}

// TestBudgetChargeNotSaved: a charge that cannot be saved defers the
// replacement, refunds the budget and fails the pass, and nothing else of
// the pass waits; the next pass whose save succeeds replaces.
func TestBudgetChargeNotSaved(t *testing.T) {
	rt := memory.New(memory.Options{})
	cs := []spec.Container{container("a", "img:1"), container("b", "img:1")}
	mustReconcile(t, newReconciler(t, rt, nil), renderAll(t, cs, nil, resolveMode))
	before := ids(rt)
	rt.Exited("b")
	cs[0].Image, cs[1].Image = "img:2", "img:2"
	cs = append(cs, container("c", "img:1"))
	desired := renderAll(t, cs, nil, resolveMode)

	saveErr := errors.New("no space left on device")
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.BudgetCharged = func([]time.Time) error { return saveErr }
	})
	res, err := r.Reconcile(context.Background(), desired)
	if !errors.Is(err, saveErr) || !errors.Is(res.ChargeErr, saveErr) || !strings.Contains(err.Error(), "saving the replacement budget") {
		t.Fatalf("Reconcile with an unsavable charge = %v (ChargeErr %v), want the save's error", err, res.ChargeErr)
	}
	if res.Deferred != 2 || res.Count(reconcile.Replace) != 0 {
		t.Errorf("replaced %d, deferred %d; want 0, 2", res.Count(reconcile.Replace), res.Deferred)
	}
	if n := rt.Calls("Stop") + rt.Calls("Rename") + rt.Calls("Remove"); n != 0 {
		t.Errorf("%d stop, rename or remove calls for replacements that were not charged", n)
	}
	if used := r.BudgetUsed(); len(used) != 0 {
		t.Errorf("BudgetUsed = %v, want the unsaved charges refunded", used)
	}
	for _, name := range []string{"a", "b"} {
		if c, _ := rt.Container(name); c.ID != before[name] || c.State != reconcile.StateRunning {
			t.Errorf("%s = %s %s, want the old %s running", name, c.ID, c.State, before[name])
		}
	}
	if c, ok := rt.Container("c"); !ok || c.State != reconcile.StateRunning {
		t.Errorf("c was not created: a create is not charged and does not wait")
	}

	r = newReconciler(t, rt, func(c *reconcile.Config) {
		c.BudgetCharged = func([]time.Time) error { return nil }
	})
	if res := mustReconcile(t, r, desired); res.Count(reconcile.Replace) != 2 || res.ChargeErr != nil {
		t.Errorf("once the save succeeds: replaced %d (ChargeErr %v), want 2", res.Count(reconcile.Replace), res.ChargeErr)
	}
	checkConverged(t, rt, desired)
}
