package podman

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// watched is a testRuntime that checks, after every call that can make a
// container run or change its name, that at most one container of the
// watched name runs (under the name or aside), and that can run a hook
// before Create, as an operator acting mid-replacement would.
type watched struct {
	*testRuntime
	name         string
	beforeCreate func()

	// mu guards problems.
	mu       sync.Mutex
	problems []string
}

func (w *watched) check(after string) {
	list, err := w.rt.List(context.Background())
	if err != nil {
		w.fail("after %s: listing: %v", after, err)
		return
	}
	var running []string
	for _, o := range list {
		if (o.Name == w.name || o.Name == w.name+reconcile.AsideSuffix) && o.State == reconcile.StateRunning {
			running = append(running, o.Name)
		}
	}
	if len(running) > 1 {
		w.fail("after %s: %v run together on one volume", after, running)
	}
}

func (w *watched) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

func (w *watched) report(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Error(p)
	}
}

// reconciler returns a Reconciler over w, as newReconciler does over a
// testRuntime.
func (w *watched) reconciler(t testing.TB) *reconcile.Reconciler {
	t.Helper()
	r, err := reconcile.New(reconcile.Config{
		Runtime: w, Owner: w.prefix,
		Budget:     reconcile.Budget{Max: 1000, Window: time.Minute},
		HealthPoll: 100 * time.Millisecond, HealthTimeout: 30 * time.Second,
		HashKey: testKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (w *watched) Create(ctx context.Context, s spec.Rendered) (string, error) {
	if w.beforeCreate != nil {
		w.beforeCreate()
	}
	id, err := w.testRuntime.Create(ctx, s)
	w.check("Create " + s.Name)
	return id, err
}

func (w *watched) Start(ctx context.Context, id string) error {
	err := w.testRuntime.Start(ctx, id)
	w.check("Start " + id[:min(12, len(id))])
	return err
}

func (w *watched) Rename(ctx context.Context, id, name string) error {
	err := w.testRuntime.Rename(ctx, id, name)
	w.check("Rename to " + name)
	return err
}

// TestAsideNeverRunsBesideItsReplacement is issue 17's first bug on real
// podman: a database replaced while its old container, set aside, runs
// again: because the rename's reply was lost (the reconciler used to start
// it again, under the aside name), because an operator started it by hand
// in the middle of the replacement, or after a crash left it aside. The old
// and the new container never run together on the volume, the data stays,
// and the machine converges.
func TestAsideNeverRunsBesideItsReplacement(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t, RunHealthchecks())
	for i, tc := range []struct {
		name string
		// fault is injected into the replacing pass.
		fault *fault
		// byHandMidway starts the aside by hand just before the new
		// container is created.
		byHandMidway bool
		// byHandAfter starts the aside by hand after the faulted pass.
		byHandAfter bool
	}{
		{name: "rename reply lost", fault: &fault{Method: "Rename", N: 1, After: true}},
		{name: "started by hand mid-replacement", byHandMidway: true},
		{name: "started by hand after a crash", fault: &fault{Method: "Create", N: 1, Crash: true}, byHandAfter: true},
		{name: "rename reply lost, then a crash", fault: &fault{Method: "Rename", N: 1, After: true, Crash: true}, byHandAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := h.Sub(t)
			sub := fmt.Sprintf("a%d-", i)
			db := sleeper(sub + "db")
			db.StopSignal = "SIGINT"
			db.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: h.Name(sub + "pgdata"), Target: "/data"}}
			db.Env = map[string]string{"PG": "16"}
			name := h.Name(sub + "db")
			w := &watched{testRuntime: scoped(rt, h.Name(sub)), name: name}
			mustReconcile(t, w.reconciler(t), []spec.Rendered{render(t, h, db, nil, resolveMode)})
			h.Exec(byName(t, w)[name].ID, "sh", "-c", "echo precious > /data/f")

			db.Env["PG"] = "17"
			want := []spec.Rendered{render(t, h, db, nil, resolveMode)}
			if tc.byHandMidway {
				var once sync.Once
				w.beforeCreate = func() {
					once.Do(func() { h.MustPodman("start", name+reconcile.AsideSuffix) })
				}
			}
			if tc.fault != nil {
				w.inject(*tc.fault)
			}
			res, err := w.reconciler(t).Reconcile(ctx(t), want)
			t.Logf("the replacing pass: %v, %v", outcomes(res), err)
			w.recover()
			w.beforeCreate = nil
			if tc.byHandAfter {
				h.MustPodman("start", name+reconcile.AsideSuffix)
			}
			converged := false
			for pass := 1; pass <= 3 && !converged; pass++ {
				r := w.reconciler(t) // as after a restart
				p, err := r.Plan(ctx(t), want)
				if err != nil {
					t.Fatal(err)
				}
				if converged = len(p.Changes()) == 0; !converged {
					res, err := r.Apply(ctx(t), p)
					t.Logf("clean pass %d: %v, %v", pass, outcomes(res), err)
				}
			}
			if !converged {
				t.Error("not converged after 3 clean passes")
			}
			after := byName(t, w)
			if len(after) != 1 {
				t.Errorf("after convergence: %d containers, want db alone", len(after))
			}
			got := after[name]
			if ok, _ := testKey.Matches(got.Labels[digest.LabelDigest], want[0]); !ok || got.State != reconcile.StateRunning {
				t.Errorf("db is %s %s, want running the declaration", got.ID, got.State)
			}
			if data := h.Exec(got.ID, "sh", "-c", `echo "$PG"; cat /data/f`); data != "17\nprecious\n" {
				t.Errorf("db reads %q, want PG 17 and the volume's data", data)
			}
			w.report(t)
		})
	}
}

// TestForeignAsideUntouched is issue 17's second bug on real podman: a
// container made by hand and named like the aside of a managed container
// is never stopped, renamed, started or removed, whether the managed
// container is current or needs replacing (then the replacement is a
// conflict, and the managed container keeps running as it is).
func TestForeignAsideUntouched(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	for i, image := range []string{"current", "needs replacing"} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			h := h.Sub(t)
			sub := fmt.Sprintf("f%d-", i)
			trt := scoped(rt, h.Name(sub))
			web := sleeper(sub + "web")
			web.Env = map[string]string{"V": "1"}
			name := h.Name(sub + "web")
			mustReconcile(t, newReconciler(t, trt, nil), []spec.Rendered{render(t, h, web, nil, resolveMode)})
			managed := byName(t, trt)[name].ID
			foreign := h.MustPodman("run", "-d", "--name", name+reconcile.AsideSuffix, "--label", podmantest.Label+"="+h.Prefix(),
				podmantest.Image, "sh", "-c", "trap 'exit 0' TERM INT; sleep 300 & wait")
			if i == 1 {
				web.Env["V"] = "2"
			}
			want := []spec.Rendered{render(t, h, web, nil, resolveMode)}
			wantKind := map[int]reconcile.Kind{0: reconcile.Keep, 1: reconcile.Conflict}[i]
			for pass := 1; pass <= 2; pass++ {
				p, err := newReconciler(t, trt, nil).Plan(ctx(t), want)
				if err != nil {
					t.Fatal(err)
				}
				if a := p.Actions[0]; a.Name != name || a.Kind != wantKind {
					t.Errorf("pass %d: plan %v, want %s %s", pass, p.Actions, wantKind, name)
				}
				if p.Unmanaged != 1 {
					t.Errorf("pass %d: Unmanaged = %d, want 1 (the foreign container)", pass, p.Unmanaged)
				}
				if _, err := newReconciler(t, trt, nil).Apply(ctx(t), p); err != nil {
					t.Errorf("pass %d: %v", pass, err)
				}
			}
			m := byName(t, trt)
			if f := m[name+reconcile.AsideSuffix]; f.ID != foreign || f.State != reconcile.StateRunning {
				t.Errorf("the foreign container is %s %s, want %s untouched and running", f.ID, f.State, foreign)
			}
			if c := m[name]; c.ID != managed || c.State != reconcile.StateRunning {
				t.Errorf("web is %s %s, want %s running as it is", c.ID, c.State, managed)
			}
			for _, c := range trt.log() {
				if c.ID == foreign && c.Method != "List" && c.Method != "Inspect" {
					t.Errorf("the reconciler called %s on the foreign container", c.Method)
				}
			}
		})
	}
}
