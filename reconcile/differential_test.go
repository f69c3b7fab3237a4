package reconcile_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// randomContainer draws a container with a few of every kind of field, so
// that changes hit replaced, updated-in-place and order-only fields.
func randomContainer(rng *rand.Rand, name string, others []string) spec.Container {
	c := spec.Container{Name: name, Image: fmt.Sprintf("registry.internal/%s:%d", name, rng.IntN(3))}
	if rng.IntN(2) == 0 {
		c.Env = map[string]string{"A": fmt.Sprint(rng.IntN(3))}
	}
	if rng.IntN(3) == 0 {
		c.Ports = []spec.Port{{HostPort: uint16(20000 + rng.IntN(3)), ContainerPort: 80}}
	}
	if rng.IntN(3) == 0 {
		c.Resources = spec.Resources{PidsLimit: int64(100 * rng.IntN(3))}
	}
	if rng.IntN(4) == 0 {
		c.Healthcheck = &spec.Healthcheck{Test: []string{"true"}, Interval: time.Duration(1+rng.IntN(2)) * time.Second}
	}
	if rng.IntN(3) == 0 {
		c.StopTimeout = time.Duration(5+rng.IntN(3)) * time.Second
	}
	for _, o := range others {
		if rng.IntN(6) == 0 {
			c.DependsOn = append(c.DependsOn, o)
		}
	}
	return c
}

// TestPlanFastPathDifferential: over random declarations and runtimes that
// drift (containers stopped, removed, replaced by hand, left aside, made
// by hand as declared), a Reconciler planning pass after pass on its fast
// path (records and order remembered, renderings given again unchanged, a
// container whose record is its declaration's kept without more) decides
// exactly what the full path decides (every record encoded, every
// container judged), action by action.
func TestPlanFastPathDifferential(t *testing.T) {
	ctx := context.Background()
	kinds := map[reconcile.Kind]int{}
	defer func() {
		t.Logf("actions decided: %v", kinds)
		// The drift must reach every kind of decision, or the test proves little.
		for _, k := range []reconcile.Kind{reconcile.Keep, reconcile.Adopt, reconcile.Create, reconcile.Start, reconcile.Replace, reconcile.Update, reconcile.Remove, reconcile.Conflict, reconcile.Resume, reconcile.Rollback} {
			if kinds[k] == 0 {
				t.Errorf("no %s decided in any step", k)
			}
		}
	}()
	for seed := range uint64(25) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			rt := memory.New(memory.Options{})
			r := newReconciler(t, rt, func(c *reconcile.Config) { c.Owner = "ace" })
			names := []string{}
			for i := range 5 + rng.IntN(20) {
				names = append(names, fmt.Sprintf("c%02d", i))
			}
			// A container depends only on containers of a lower rank (no
			// cycle), ranked unlike their names: the plan's order is not
			// the names', and changes when dependencies do.
			rank := rng.Perm(len(names))
			lower := func(n string) []string {
				r := rank[slices.Index(names, n)]
				return slices.DeleteFunc(slices.Clone(names), func(o string) bool { return rank[slices.Index(names, o)] >= r })
			}
			cs := map[string]spec.Container{}
			for _, n := range names {
				cs[n] = randomContainer(rng, n, lower(n))
			}
			modes := map[string]spec.Mode{}
			rost := roster(1, "a.internal", "b.internal")
			rendered := map[string]spec.Rendered{} // the last rendering of each, given again while unchanged
			for step := range 40 {
				// The declaration moves: some containers change, come, go.
				for range rng.IntN(4) {
					switch n := names[rng.IntN(len(names))]; rng.IntN(7) {
					case 0:
						delete(cs, n)
					case 2:
						// One name goes, another comes: as many names, not the same.
						if _, ok := cs[n]; ok {
							for _, m := range names {
								if _, ok := cs[m]; !ok {
									delete(cs, n)
									cs[m] = randomContainer(rng, m, lower(m))
									break
								}
							}
						}
					case 1:
						if c, ok := cs[n]; ok {
							c.Resources.PidsLimit += 100 // updated in place
							cs[n] = c
						}
					default:
						cs[n] = randomContainer(rng, n, lower(n))
					}
				}
				if rng.IntN(5) == 0 {
					rost = roster(rost.Generation+1, "a.internal", fmt.Sprintf("n%d.internal", step))
				}
				var desired []spec.Rendered
				for _, n := range slices.Sorted(mapKeys(cs)) {
					if _, ok := modes[n]; !ok || rng.IntN(10) == 0 {
						modes[n] = resolveMode
						if rng.IntN(2) == 0 {
							modes[n] = spec.Mode{Names: spec.Copy}
						}
					}
					// The dependencies a declaration keeps are those still declared.
					c := cs[n]
					c.DependsOn = slices.DeleteFunc(slices.Clone(c.DependsOn), func(d string) bool { _, ok := cs[d]; return !ok })
					fresh := render(t, c, rost, modes[n])
					if old, ok := rendered[n]; ok && old.Equal(&fresh) && rng.IntN(4) != 0 {
						fresh = old // the same rendering again, as the agent's pass gives it
					}
					rendered[n] = fresh
					desired = append(desired, fresh)
				}
				// The runtime drifts.
				live := rt.Containers()
				if len(live) > 0 && rng.IntN(3) == 0 {
					c := live[rng.IntN(len(live))]
					switch rng.IntN(3) {
					case 0:
						rt.Stop(ctx, c.ID, time.Second)
					case 1:
						rt.Remove(ctx, c.ID)
					case 2:
						if rt.Rename(ctx, c.ID, c.Name+reconcile.AsideSuffix) == nil && rng.IntN(2) == 0 {
							rt.Stop(ctx, c.ID, time.Second) // an interrupted replacement
						}
					}
				}
				if rng.IntN(8) == 0 { // someone else's container under a declared name
					n := names[rng.IntN(len(names))]
					rt.Create(ctx, spec.Rendered{Container: spec.Container{Name: n, Image: "hand/made:1"}})
				}
				if d := desired[rng.IntN(len(desired))]; rng.IntN(8) == 0 { // one made by hand as declared: adopted
					if id, err := rt.Create(ctx, d); err == nil {
						rt.Start(ctx, id)
					}
				}

				observed, err := rt.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				fast, err := r.PlanObserved(ctx, desired, observed)
				if err != nil {
					t.Fatalf("step %d: fast path: %v", step, err)
				}
				reconcile.FullPath(r, true)
				full, err := r.PlanObserved(ctx, desired, observed)
				reconcile.FullPath(r, false)
				if err != nil {
					t.Fatalf("step %d: full path: %v", step, err)
				}
				for _, a := range fast.Actions {
					kinds[a.Kind]++
				}
				if diff := cmp.Diff(actions(full), actions(fast)); diff != "" {
					t.Fatalf("step %d: the fast path decides differently (-full +fast):\n%s", step, diff)
				}
				// Apply it (either: they are the same), so the machine follows.
				if _, err := r.Apply(ctx, fast); err != nil {
					t.Logf("step %d: apply: %v", step, err) // a hand-made container in the way: a conflict
				}
			}
		})
	}
}

// actions is what a plan decides, in order, comparable.
func actions(p *reconcile.Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, fmt.Sprintf("%s %s id=%s running=%v stop=%v aside=%s/%v deps=%v changes=%v reason=%q",
			a.Kind, a.Name, a.ID, a.Running, a.StopTimeout, a.AsideID, a.AsideStopTimeout, a.DependsOn, a.Changes, a.Reason))
	}
	return append(out, fmt.Sprintf("unmanaged %d", p.Unmanaged))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var _ = netip.Addr{}

// TestPlanFastPathConcurrent: plans made at the same time by one
// Reconciler, of declarations that differ (each plan leaves its memo for
// the next, whichever that is), each decide what the full path decides.
// Under -race it also proves that plans share nothing they write.
func TestPlanFastPathConcurrent(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, nil)
	cs := make([]spec.Container, 50)
	for i := range cs {
		cs[i] = container(fmt.Sprintf("c%02d", i), "registry.internal/c:1")
		if i > 0 && i%7 == 0 {
			cs[i].DependsOn = []string{fmt.Sprintf("c%02d", i-1)}
		}
	}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	// Three declarations: one changed image, one name fewer, one name more.
	variants := [][]spec.Rendered{renderAll(t, cs, nil, resolveMode), renderAll(t, cs[1:], nil, resolveMode), renderAll(t, append(slices.Clone(cs), container("new", "registry.internal/new:1")), nil, resolveMode)}
	variants[0][20].Image = "registry.internal/c:2"
	full := newReconciler(t, rt, nil)
	reconcile.FullPath(full, true)
	want := make([][]string, len(variants))
	for i, v := range variants {
		p, err := full.Plan(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = actions(p)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 30 {
				i := (g + k) % len(variants)
				p, err := r.Plan(ctx, variants[i])
				if err != nil {
					t.Error(err)
					return
				}
				if diff := cmp.Diff(want[i], actions(p)); diff != "" {
					t.Errorf("goroutine %d, plan %d of variant %d decides differently (-full +fast):\n%s", g, k, i, diff)
					return
				}
			}
		})
	}
	wg.Wait()
}
