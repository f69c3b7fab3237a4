package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// outcome is what becomes of one runtime call.
type outcome int

const (
	fails       outcome = iota // fails without effect
	replyLost                  // takes effect, but reports a failure
	crashes                    // fails, and so does every later call (the process died)
	crashesLost                // takes effect, then the process dies
	cutShort                   // the runtime's process dies half-way through it (a Remove only), and stays down until the next pass
)

var outcomes = []outcome{fails, replyLost, crashes, crashesLost}

// outcomesOf is every outcome a call of method can have: a Remove can also
// be cut short half-way, leaving its container being removed (podman's
// state when its API service died in the middle of a removal).
func outcomesOf(method string) []outcome {
	if method == "Remove" {
		return append(slices.Clip(outcomes), cutShort)
	}
	return outcomes
}

func (o outcome) String() string {
	return [...]string{"fails", "reply lost", "crashes", "takes effect, then crashes", "cut short"}[o]
}

// injection is one fault: the n-th call of method in the pass gets out.
type injection struct {
	method string
	n      int
	out    outcome
}

func (in injection) String() string { return fmt.Sprintf("%s #%d %s", in.method, in.n, in.out) }

func (in injection) fault() memory.Fault {
	return memory.Fault{Method: in.method, N: in.n, After: in.out == replyLost || in.out == crashesLost,
		Crash: in.out == crashes || in.out == crashesLost || in.out == cutShort, Cut: in.out == cutShort}
}

// call is one call of the faulted pass: its method and its number among
// the pass's calls of that method.
type call struct {
	method string
	n      int
}

// matrixScenario is a starting state: what runs, and what is declared.
type matrixScenario struct {
	name string
	// setup makes the state on rt and returns the declaration to apply.
	setup func(t *testing.T, rt *memory.Runtime) []spec.Rendered
}

// matrixDB is the database whose replacement the matrix drives: a volume
// and a host path bind-mounted, its own stop signal and timeout, a
// healthcheck.
func matrixDB(image string) spec.Container {
	return spec.Container{Name: "db", Image: image, StopSignal: "SIGINT", StopTimeout: 2 * time.Minute,
		Healthcheck: &spec.Healthcheck{Test: []string{"pg_isready"}},
		Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "pgdata", Target: "/data"},
			{Type: spec.MountBind, Source: "/srv/pg/wal", Target: "/wal"}}}
}

// matrixDeclared renders db at image, app depending on it, and web (whose
// aside name a foreign container holds).
func matrixDeclared(t *testing.T, image string) []spec.Rendered {
	return renderAll(t, []spec.Container{matrixDB(image),
		{Name: "app", Image: "app:1", DependsOn: []string{"db"}}, container("web", "web:1")}, nil, resolveMode)
}

// interrupted leaves a replacement of db (16 to 17) interrupted by a crash
// at the first call of method, and starts the old container, aside, by
// hand when startAside is set.
func interrupted(method string, startAside bool) func(t *testing.T, rt *memory.Runtime) {
	return interruptedBy(memory.Fault{Method: method, N: 1, Crash: true}, startAside)
}

// interruptedBy is interrupted, by the fault f.
func interruptedBy(f memory.Fault, startAside bool) func(t *testing.T, rt *memory.Runtime) {
	return func(t *testing.T, rt *memory.Runtime) {
		rt.Inject(f)
		if _, err := newReconciler(t, rt, nil).Reconcile(context.Background(), matrixDeclared(t, "postgres:17")); err == nil {
			t.Fatal("setup: a pass with a crash succeeded")
		}
		rt.Recover()
		aside, ok := rt.Container("db" + reconcile.AsideSuffix)
		if !ok {
			t.Fatal("setup: nothing aside after the crash")
		}
		if startAside {
			if err := rt.Start(context.Background(), aside.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var matrixScenarios = []matrixScenario{
	{"replace", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: nothing under the name", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Create", false)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: new one created", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Start", false)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: new one running", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Remove", false)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: old one running aside", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Create", true)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: old one running aside, new one created", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Start", true)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"resume: both running", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Remove", true)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	// podman's API service died half-way through removing the old
	// container: it is left being removed, for good.
	{"resume: the old one's removal cut short", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interruptedBy(memory.Fault{Method: "Remove", N: 1, Crash: true, Cut: true}, false)(t, rt)
		return matrixDeclared(t, "postgres:17")
	}},
	{"the old one's removal cut short, the old one declared again", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interruptedBy(memory.Fault{Method: "Remove", N: 1, Crash: true, Cut: true}, false)(t, rt)
		return matrixDeclared(t, "postgres:16")
	}},
	{"the old one's removal cut short, the new one no longer declared", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interruptedBy(memory.Fault{Method: "Remove", N: 1, Crash: true, Cut: true}, false)(t, rt)
		return matrixDeclared(t, "postgres:18")
	}},
	{"rollback: the old one is declared again", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Create", false)(t, rt)
		return matrixDeclared(t, "postgres:16")
	}},
	{"rollback: the old one, running aside, is declared again", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Create", true)(t, rt)
		return matrixDeclared(t, "postgres:16")
	}},
	{"rollback: new one created, no longer declared", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Start", false)(t, rt)
		return matrixDeclared(t, "postgres:18")
	}},
	{"rollback: new one running, no longer declared", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Remove", false)(t, rt)
		return matrixDeclared(t, "postgres:18")
	}},
	{"rollback: both running, the new one no longer declared", func(t *testing.T, rt *memory.Runtime) []spec.Rendered {
		interrupted("Remove", true)(t, rt)
		return matrixDeclared(t, "postgres:18")
	}},
}

// TestReplacementFaultMatrix drives every runtime call of a replacement, of
// every way to resume one and of every way to roll one back through each
// outcome (fails; takes effect but its reply is lost; the process dies
// there, before or after the call took effect), and then each later call of
// the same pass through each outcome again (two faults in one pass, as a
// restarting API service gives). After every single call it checks that at
// most one container of a declared name runs, that no volume or
// bind-mounted host path is mounted by two running containers, and that
// containers meshhost does not own (a
// running stranger, and one named like an aside of a declared and of an
// undeclared name) are never touched; after the faulted pass, that clean
// passes converge within three, with every volume kept.
func TestReplacementFaultMatrix(t *testing.T) {
	runs := 0
	for _, sc := range matrixScenarios {
		t.Run(sc.name, func(t *testing.T) {
			failures := 0
			var explore func(prefix []injection)
			explore = func(prefix []injection) {
				if failures >= 5 {
					return // enough to go on: the rest would repeat them
				}
				runs++
				calls, problems := runMatrix(t, sc, prefix)
				if len(problems) > 0 {
					failures++
					t.Errorf("faults [%s]:\n  %s", joinInjections(prefix), strings.Join(problems, "\n  "))
					return
				}
				if len(prefix) == 2 || len(prefix) == 1 && prefix[0].out >= crashes {
					return // two faults a pass; nothing runs after a crash
				}
				from := 0
				if len(prefix) == 1 {
					from = slices.Index(calls, call{prefix[0].method, prefix[0].n}) + 1
				}
				for _, c := range calls[from:] {
					for _, out := range outcomesOf(c.method) {
						explore(append(slices.Clip(prefix), injection{c.method, c.n, out}))
					}
				}
			}
			explore(nil)
		})
	}
	t.Logf("%d faulted passes over %d starting states", runs, len(matrixScenarios))
}

func joinInjections(ins []injection) string {
	s := make([]string, len(ins))
	for i, in := range ins {
		s[i] = in.String()
	}
	return strings.Join(s, "; ")
}

// runMatrix sets sc up, runs one pass with the faults in, then clean passes
// until it converges, and returns the faulted pass's calls and every
// problem seen.
func runMatrix(t *testing.T, sc matrixScenario, faults []injection) ([]call, []string) {
	t.Helper()
	ctx := context.Background()
	rt := memory.New(memory.Options{}) // healthy at once: the calls are deterministic
	mustReconcile(t, newReconciler(t, rt, nil), matrixDeclared(t, "postgres:16"))
	// Containers meshhost does not own: a stranger with its own volume, and
	// two named like the aside of a declared and of an undeclared name.
	var foreign []memory.Container
	for _, c := range []spec.Container{
		{Name: "legacy", Image: "legacy:1", Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "legacydata", Target: "/d"}}},
		container("web"+reconcile.AsideSuffix, "theirs:1"),
		container("ghost"+reconcile.AsideSuffix, "theirs:1"),
	} {
		id, err := rt.Create(ctx, render(t, c, nil, resolveMode))
		if err != nil {
			t.Fatal(err)
		}
		rt.Start(ctx, id)
		fc, _ := rt.Container(c.Name)
		foreign = append(foreign, fc)
	}
	desired := sc.setup(t, rt)
	volumes := rt.Volumes()

	w := watch(rt, []string{"db", "app", "web"}, foreign...)
	var calls []call
	seen := map[string]int{}
	rt.Watch(func(c memory.Call, now []memory.Container) {
		seen[c.Method]++
		calls = append(calls, call{c.Method, seen[c.Method]})
		w.check(c, now)
	})
	rt.ResetCalls()
	for _, in := range faults {
		rt.Inject(in.fault())
	}
	newReconciler(t, rt, nil).Reconcile(ctx, desired)
	rt.Recover()
	rt.Watch(w.check)

	// Clean passes, each by a fresh Reconciler as after a restart.
	var problems []string
	converged := false
	for pass := 1; pass <= 3 && !converged; pass++ {
		r := newReconciler(t, rt, nil)
		p, err := r.Plan(ctx, desired)
		if err != nil {
			problems = append(problems, fmt.Sprintf("clean pass %d: Plan: %v", pass, err))
			break
		}
		if converged = len(p.Changes()) == 0; !converged {
			r.Apply(ctx, p)
		}
	}
	if p, _ := newReconciler(t, rt, nil).Plan(ctx, desired); !converged && len(p.Changes()) != 0 {
		problems = append(problems, fmt.Sprintf("not converged after 3 clean passes; next plan: %s", strings.TrimSpace(p.String())))
	}
	for _, d := range desired {
		c, ok := rt.Container(d.Name)
		if !ok || c.State != reconcile.StateRunning || c.Settings.Image != d.Image {
			problems = append(problems, fmt.Sprintf("%s is %s %s, want %s running", d.Name, c.State, c.Settings.Image, d.Image))
		}
		if c, ok := rt.Container(d.Name + reconcile.AsideSuffix); ok && !slices.ContainsFunc(foreign, func(f memory.Container) bool { return f.ID == c.ID }) {
			problems = append(problems, fmt.Sprintf("%s left aside", c.Name))
		}
	}
	for _, f := range foreign {
		if c, ok := rt.Container(f.Name); !ok || c.ID != f.ID || c.State != reconcile.StateRunning {
			problems = append(problems, fmt.Sprintf("the foreign %s is %s %s, want %s untouched", f.Name, c.ID, c.State, f.ID))
		}
	}
	if diff := cmp.Diff(volumes, rt.Volumes()); diff != "" {
		problems = append(problems, "volumes (-want +got): "+diff)
	}
	w.mu.Lock()
	problems = append(problems, slices.Compact(w.problems)...)
	w.mu.Unlock()
	return calls, problems
}
