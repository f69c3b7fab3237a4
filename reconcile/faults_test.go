package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// watcher checks, after every runtime call of a pass (memory.Runtime.Watch),
// what must hold at every step, not only at the end:
//   - the reconciler never makes a second container of one declared name
//     run: after a Create, Start or Rename, at most one of its containers
//     runs under NAME and NAME+AsideSuffix together;
//   - it never makes a volume, or a host path bind-mounted, mounted by
//     two running containers (a database twice on one data directory);
//   - it never calls anything but List and Inspect on a container it does
//     not own (foreign).
type watcher struct {
	declared []string
	foreign  map[string]string // ID -> name

	// mu guards the fields below.
	mu       sync.Mutex
	problems []string
}

func watch(rt *memory.Runtime, declared []string, foreign ...memory.Container) *watcher {
	w := &watcher{declared: declared, foreign: map[string]string{}}
	for _, c := range foreign {
		w.foreign[c.ID] = c.Name
	}
	rt.Watch(w.check)
	return w
}

func (w *watcher) check(call memory.Call, now []memory.Container) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if name, ok := w.foreign[call.ID]; ok && call.Method != "List" && call.Method != "Inspect" {
		w.problems = append(w.problems, fmt.Sprintf("%s called on %q, a container meshhost does not own", call.Method, name))
	}
	switch call.Method {
	case "Create", "Start", "Rename":
	default:
		return
	}
	for _, name := range w.declared {
		var running []string
		for _, c := range now {
			if _, theirs := w.foreign[c.ID]; !theirs && c.State == reconcile.StateRunning && (c.Name == name || c.Name == name+reconcile.AsideSuffix) {
				running = append(running, c.Name)
			}
		}
		if len(running) > 1 {
			w.problems = append(w.problems, fmt.Sprintf("after %s %s: %d containers of %q run: %v", call.Method, call.ID, len(running), name, running))
		}
	}
	users := map[string][]string{}
	for _, c := range now {
		if c.State != reconcile.StateRunning {
			continue
		}
		for _, m := range c.Settings.Mounts {
			switch m.Type {
			case spec.MountVolume:
				users["volume "+strconv.Quote(m.Source)] = append(users["volume "+strconv.Quote(m.Source)], c.Name)
			case spec.MountBind:
				p := "host path " + strconv.Quote(path.Clean(m.Source))
				users[p] = append(users[p], c.Name)
			}
		}
	}
	for what, names := range users {
		if len(names) > 1 {
			w.problems = append(w.problems, fmt.Sprintf("after %s %s: %s mounted by %d running containers: %v", call.Method, call.ID, what, len(names), names))
		}
	}
}

// report fails t with every problem seen, once each.
func (w *watcher) report(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range slices.Compact(w.problems) {
		t.Error(p)
	}
}

// converge runs clean passes, each by a fresh Reconciler (as after a
// restart), until a plan has no changes, and fails t unless that takes at
// most passes passes.
func converge(t *testing.T, rt *memory.Runtime, desired []spec.Rendered, passes int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		r := newReconciler(t, rt, nil)
		p, err := r.Plan(ctx, desired)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if len(p.Changes()) == 0 || (i == passes && onlyConflicts(p)) {
			break
		}
		if i == passes {
			t.Fatalf("not converged after %d passes; the next plan:\n%v", passes, p)
		}
		if res, err := r.Apply(ctx, p); err != nil {
			t.Logf("pass %d: %v (%v)", i+1, err, res.Count(reconcile.Resume))
		}
	}
}

func onlyConflicts(p *reconcile.Plan) bool {
	return p.Count(reconcile.Conflict) == len(p.Changes())
}

// TestRenameAsideReplyLost is issue 17's first bug: podman renames the old
// container aside but the reply is lost. The old container must not be
// started again under the aside name, and above all the new one must never
// run beside it on the same volume; the machine converges.
func TestRenameAsideReplyLost(t *testing.T) {
	rt, cs := replaceFixture(t)
	desired := renderAll(t, cs, nil, resolveMode)
	w := watch(rt, []string{"db", "app"})
	rt.Inject(memory.Fault{Method: "Rename", N: 1, After: true})
	res, err := newReconciler(t, rt, nil).Reconcile(context.Background(), desired)
	t.Logf("the pass with the lost reply: %v", err)
	if aside, ok := rt.Container("db" + reconcile.AsideSuffix); ok && aside.State == reconcile.StateRunning {
		t.Errorf("after the lost rename reply, the old container runs as %q", aside.Name)
	}
	if c, ok := rt.Container("db"); !ok || c.State != reconcile.StateRunning {
		t.Errorf("after the lost rename reply, nothing runs as db (%v)", res.Outcomes)
	}
	converge(t, rt, desired, 2)
	checkConverged(t, rt, desired)
	w.report(t)
}

// TestRenameBackReplyLost: a failed replacement puts the old container
// back, and the rename back loses its reply too: the old container is
// started all the same, under its own name.
func TestRenameBackReplyLost(t *testing.T) {
	rt, cs := replaceFixture(t)
	oldID := ids(rt)["db"]
	desired := renderAll(t, cs, nil, resolveMode)
	w := watch(rt, []string{"db", "app"})
	rt.Inject(memory.Fault{Method: "Start", N: 1})               // the new container fails to start
	rt.Inject(memory.Fault{Method: "Rename", N: 2, After: true}) // renaming the old one back: reply lost
	if _, err := newReconciler(t, rt, nil).Reconcile(context.Background(), desired); err == nil {
		t.Fatal("Reconcile with a failed start: no error")
	}
	if c, _ := rt.Container("db"); c.ID != oldID || c.State != reconcile.StateRunning {
		t.Errorf("db = %s %s after the rollback, want the old %s running", c.ID, c.State, oldID)
	}
	converge(t, rt, desired, 2)
	checkConverged(t, rt, desired)
	w.report(t)
}

// TestRunningAsideAtRecovery: a replacement was interrupted with the old
// container aside, and it runs when the next pass begins (started by hand,
// or by an older meshhost after a lost rename reply), with or without the
// new container: recovery stops it before the new one starts.
func TestRunningAsideAtRecovery(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash memory.Fault
	}{
		{"nothing under the name", memory.Fault{Method: "Create", N: 1}},
		{"new one created", memory.Fault{Method: "Start", N: 1}},
		{"new one running", memory.Fault{Method: "Remove", N: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt, cs := replaceFixture(t)
			desired := renderAll(t, cs, nil, resolveMode)
			tc.crash.Crash = true
			rt.Inject(tc.crash)
			if _, err := newReconciler(t, rt, nil).Reconcile(ctx, desired); err == nil {
				t.Fatal("Reconcile with a crash: no error")
			}
			rt.Recover()
			aside, ok := rt.Container("db" + reconcile.AsideSuffix)
			if !ok {
				t.Fatal("nothing aside after the crash")
			}
			if err := rt.Start(ctx, aside.ID); err != nil { // by hand
				t.Fatal(err)
			}
			w := watch(rt, []string{"db", "app"})
			converge(t, rt, desired, 2)
			checkConverged(t, rt, desired)
			w.report(t)
		})
	}
}

// TestForeignAside is issue 17's second bug: a container meshhost does not
// own that happens to be named NAME.meshhost-old is not a replacement
// meshhost interrupted. It is never stopped, renamed, removed or started,
// whatever becomes of NAME; a replacement that would need its name waits as
// a conflict instead.
func TestForeignAside(t *testing.T) {
	owners := []struct {
		name   string
		labels map[string]string
	}{
		{"no labels", nil},
		{"another owner", map[string]string{reconcile.LabelManaged: "true", reconcile.LabelOwner: "other-machine"}},
		{"managed false", map[string]string{reconcile.LabelManaged: "false", reconcile.LabelOwner: "ace"}},
	}
	cases := []struct {
		name string
		// web is the declared web's image: "" not declared, web:1 current.
		web      string
		existing bool // a managed web (web:1) runs already
		want     reconcile.Kind
	}{
		{"current", "web:1", true, reconcile.Keep},
		{"needs replacing", "web:2", true, reconcile.Conflict},
		{"needs replacing, stopped", "web:2", true, reconcile.Start},
		{"not created yet", "web:1", false, reconcile.Create},
		{"not declared", "", true, reconcile.Remove},
		{"not declared, nothing else", "", false, ""},
	}
	for _, owner := range owners {
		for _, tc := range cases {
			t.Run(owner.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				rt := memory.New(memory.Options{})
				mod := func(c *reconcile.Config) { c.Owner = "ace" }
				if tc.existing {
					mustReconcile(t, newReconciler(t, rt, mod), renderAll(t, []spec.Container{container("web", "web:1")}, nil, resolveMode))
					if strings.HasSuffix(tc.name, "stopped") {
						rt.Exited("web")
					}
				}
				foreign := render(t, container("web"+reconcile.AsideSuffix, "theirs:1"), nil, resolveMode)
				foreign.Labels = owner.labels
				id, err := rt.Create(ctx, foreign)
				if err != nil {
					t.Fatal(err)
				}
				if err := rt.Start(ctx, id); err != nil {
					t.Fatal(err)
				}
				before, _ := rt.Container("web" + reconcile.AsideSuffix)
				webBefore, _ := rt.Container("web")
				var cs []spec.Container
				if tc.web != "" {
					cs = append(cs, container("web", tc.web))
				}
				desired := renderAll(t, cs, nil, resolveMode)
				w := watch(rt, []string{"web"}, before)
				for pass := 1; pass <= 2; pass++ {
					r := newReconciler(t, rt, mod)
					p, err := r.Plan(ctx, desired)
					if err != nil {
						t.Fatal(err)
					}
					var got reconcile.Kind
					for _, a := range p.Actions {
						if a.Name == "web" {
							got = a.Kind
						}
					}
					if pass == 1 && got != tc.want {
						t.Errorf("plan for web = %q, want %q:\n%v", got, tc.want, p)
					}
					if pass == 1 && (got == reconcile.Conflict || got == reconcile.Start) && !strings.Contains(reasonOf(p, "web"), "web"+reconcile.AsideSuffix) {
						t.Errorf("conflict reason %q does not name the container in the way", reasonOf(p, "web"))
					}
					if p.Unmanaged != 1 {
						t.Errorf("pass %d: Unmanaged = %d, want 1 (the foreign container)", pass, p.Unmanaged)
					}
					r.Apply(ctx, p)
				}
				after, ok := rt.Container("web" + reconcile.AsideSuffix)
				if !ok || after.ID != before.ID || after.State != reconcile.StateRunning {
					t.Errorf("the foreign container is %+v, want %s untouched and running", after, before.ID)
				}
				if tc.want == reconcile.Conflict || tc.want == reconcile.Start {
					if c, _ := rt.Container("web"); c.ID != webBefore.ID || c.State != reconcile.StateRunning {
						t.Errorf("web = %s %s, want the managed %s left running as it is", c.ID, c.State, webBefore.ID)
					}
				}
				if tc.want == reconcile.Create || tc.want == reconcile.Keep {
					if c, ok := rt.Container("web"); !ok || c.State != reconcile.StateRunning || c.Settings.Image != tc.web {
						t.Errorf("web = %+v, want %s running", c, tc.web)
					}
				}
				w.report(t)
			})
		}
	}
}

// TestActionPanicIsAnError: an action panics on its goroutine (a bug in a
// runtime adapter, say). The panic is that action's error, logged with its
// stack and counted; the process lives on, the pass's other actions
// happen, and the next pass converges.
func TestActionPanicIsAnError(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.Logger, c.Registerer = slog.New(slog.NewTextHandler(&logs, nil)), reg
	})
	desired := renderAll(t, []spec.Container{container("a", "img:1"), container("b", "img:1")}, nil, resolveMode)
	var once sync.Once
	rt.Before(func(c memory.Call) error {
		if c.Method == "Create" && c.Name == "a" {
			once.Do(func() { panic("adapter bug") })
		}
		return nil
	})
	res, err := r.Reconcile(ctx, desired)
	if err == nil || !strings.Contains(err.Error(), `create "a": panicked: adapter bug`) {
		t.Fatalf("Reconcile with a panicking action = %v, want the panic as a's error", err)
	}
	if res.Count(reconcile.Create) != 1 {
		t.Errorf("created %d, want b created all the same", res.Count(reconcile.Create))
	}
	if !strings.Contains(logs.String(), "recovered from a panic") || !strings.Contains(logs.String(), "faults_test.go") {
		t.Errorf("the log lacks the panic and its stack:\n%s", logs.String())
	}
	mfs, _ := reg.Gather()
	panics := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "meshhost_reconcile_panics_total" {
			panics = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if panics != 1 {
		t.Errorf("meshhost_reconcile_panics_total = %v, want 1", panics)
	}
	mustReconcile(t, r, desired)
	checkConverged(t, rt, desired)
}

// TestRemovalCutShort: podman's API service dies in the middle of a
// removal, and the container stays "removing" for good: podman refuses to
// start, stop, rename or inspect it, and only removes it. The next pass
// finishes the removal of a managed one, without any other call on it,
// whatever its name, and leaves an unmanaged one alone without inspecting
// it. (An agent that took such an old container for a live one rolled the
// replacement back onto it, removing the new container that ran, and then
// failed every pass for ever.)
func TestRemovalCutShort(t *testing.T) {
	ctx := context.Background()
	cut := memory.Fault{Method: "Remove", N: 1, Crash: true, Cut: true}
	// calls lists the calls made on container id, but List.
	calls := func(rt *memory.Runtime, id string) *[]string {
		var got []string
		rt.Watch(func(c memory.Call, _ []memory.Container) {
			if c.ID == id {
				got = append(got, c.Method)
			}
		})
		return &got
	}
	t.Run("the old container of a replacement", func(t *testing.T) {
		rt, cs := replaceFixture(t)
		desired := renderAll(t, cs, nil, resolveMode)
		rt.Inject(cut)
		if _, err := newReconciler(t, rt, nil).Reconcile(ctx, desired); err == nil {
			t.Fatal("a pass whose removal was cut short succeeded")
		}
		rt.Recover()
		old, ok := rt.Container("db" + reconcile.AsideSuffix)
		if !ok || old.State != reconcile.StateRemoving {
			t.Fatalf("setup: the old container is %+v, want it being removed", old)
		}
		replacement, _ := rt.Container("db")
		r := newReconciler(t, rt, nil)
		p, err := r.Plan(ctx, desired)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"remove db" + reconcile.AsideSuffix}, kinds(p)); diff != "" {
			t.Fatalf("plan (-want +got):\n%s\n%v", diff, p)
		}
		if why := reasonOf(p, "db"+reconcile.AsideSuffix); !strings.Contains(why, "cut short") {
			t.Errorf("the removal's reason %q does not say it finishes one cut short", why)
		}
		got := calls(rt, old.ID)
		if _, err := r.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"Remove"}, *got); diff != "" {
			t.Errorf("calls on the old container (-want +got):\n%s", diff)
		}
		checkConverged(t, rt, desired)
		if now, _ := rt.Container("db"); now.ID != replacement.ID {
			t.Errorf("db is %.12s, want the replacement %.12s kept", now.ID, replacement.ID)
		}
	})
	t.Run("a container no longer declared", func(t *testing.T) {
		rt, cs := replaceFixture(t)
		cs[0].Image = "postgres:16" // db as it runs
		desired := renderAll(t, cs[:1], nil, resolveMode)
		app, _ := rt.Container("app")
		rt.Inject(cut)
		if _, err := newReconciler(t, rt, nil).Reconcile(ctx, desired); err == nil {
			t.Fatal("a pass whose removal was cut short succeeded")
		}
		rt.Recover()
		got := calls(rt, app.ID)
		converge(t, rt, desired, 1)
		if diff := cmp.Diff([]string{"Remove"}, *got); diff != "" {
			t.Errorf("calls on app after the cut (-want +got):\n%s", diff)
		}
		if c, ok := rt.Container("app"); ok {
			t.Errorf("app is still there: %+v", c)
		}
	})
	t.Run("a declared container", func(t *testing.T) {
		rt, cs := replaceFixture(t)
		cs[0].Image = "postgres:16"
		desired := renderAll(t, cs, nil, resolveMode)
		db, _ := rt.Container("db")
		if err := rt.Stop(ctx, db.ID, time.Second); err != nil { // an operator's podman rm
			t.Fatal(err)
		}
		rt.Inject(cut)
		if err := rt.Remove(ctx, db.ID); err == nil {
			t.Fatal("a removal cut short succeeded")
		}
		rt.Recover()
		p, err := newReconciler(t, rt, nil).Plan(ctx, desired)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"remove db", "create db"}, kinds(p)); diff != "" {
			t.Errorf("plan (-want +got):\n%s\n%v", diff, p)
		}
		converge(t, rt, desired, 1)
		checkConverged(t, rt, desired)
	})
	t.Run("a container meshhost does not manage", func(t *testing.T) {
		rt, cs := replaceFixture(t)
		cs[0].Image = "postgres:16"
		web := container("web", "web:1")
		id, err := rt.Create(ctx, render(t, web, nil, resolveMode)) // no meshhost labels
		if err != nil {
			t.Fatal(err)
		}
		rt.Inject(cut)
		if err := rt.Remove(ctx, id); err == nil {
			t.Fatal("a removal cut short succeeded")
		}
		rt.Recover()
		desired := renderAll(t, append(cs, web), nil, resolveMode)
		got := calls(rt, id)
		res, _ := newReconciler(t, rt, nil).Reconcile(ctx, desired)
		if a := res.Outcomes[len(res.Outcomes)-1]; a.Name != "web" || a.Kind != reconcile.Conflict {
			t.Errorf("web's action: %v, want a conflict", a.Action)
		}
		if len(*got) > 0 {
			t.Errorf("calls on the unmanaged container: %v, want none", *got)
		}
		if c, _ := rt.Container("web"); c.ID != id || c.State != reconcile.StateRemoving {
			t.Errorf("the unmanaged container is %+v, want it left as it was", c)
		}
	})
}
