package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func TestUnmanagedUntouched(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	// Containers someone else made: one meshhost is not told about, one
	// holding a declared name with other settings.
	for _, c := range []spec.Container{container("legacy", "old:1"), container("web", "nginx:1")} {
		id, err := rt.Create(ctx, render(t, c, nil, resolveMode))
		if err != nil {
			t.Fatal(err)
		}
		rt.Start(ctx, id)
	}
	before := rt.Containers()
	setup := len(rt.Events())
	r := newReconciler(t, rt, nil)
	desired := renderAll(t, []spec.Container{container("web", "caddy:2"), container("api", "api:1")}, nil, resolveMode)
	for _, want := range [][]string{{"create api", "conflict web"}, {"conflict web"}} {
		p, err := r.Plan(ctx, desired)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, kinds(p)); diff != "" {
			t.Errorf("plan (-want +got):\n%s", diff)
		}
		if p.Unmanaged != 1 {
			t.Errorf("Unmanaged = %d, want 1", p.Unmanaged)
		}
		if got := reasonOf(p, "web"); !strings.Contains(got, "image: nginx:1 -> caddy:2") {
			t.Errorf("conflict reason = %q, want the differing image", got)
		}
		r.Apply(ctx, p)
	}
	for _, e := range rt.Events()[setup:] {
		for _, c := range before {
			if e.ID == c.ID {
				t.Errorf("unmanaged container %q touched: %+v", c.Name, e)
			}
		}
	}
	for _, c := range before {
		if got, _ := rt.Container(c.Name); got.ID != c.ID || got.State != reconcile.StateRunning {
			t.Errorf("unmanaged %q changed: %+v", c.Name, got)
		}
	}
}

func TestAdoption(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{
		ImageEnv:      map[string]map[string]string{"gitea:1": {"PATH": "/usr/bin", "GITEA_HOME": "/data"}},
		RuntimeLabels: map[string]string{"io.containers.autoupdate": "registry"},
	})
	gitea := spec.Container{Name: "gitea", Image: "gitea:1", Env: map[string]string{"MODE": "prod"}, Labels: map[string]string{"team": "core"}}
	// Created by hand (or by the old reconciler): no meshhost labels.
	id, _ := rt.Create(ctx, render(t, gitea, nil, resolveMode))
	rt.Start(ctx, id)
	// Created by a newer meshhost: a digest version this one does not know.
	newer := labelledAs(render(t, container("redis", "redis:7"), nil, resolveMode), "v9:sha256:0123", "v9:{}")
	newerID, _ := rt.Create(ctx, newer)
	rt.Start(ctx, newerID)
	// Also from the newer meshhost, and no longer matching.
	stale := labelledAs(render(t, container("cache", "memcached:1"), nil, resolveMode), "v9:sha256:4567", "v9:{}")
	staleID, _ := rt.Create(ctx, stale)
	rt.Start(ctx, staleID)

	r := newReconciler(t, rt, nil)
	gitea.Resources.MemoryBytes = 1 << 30 // in place: adoption updates it
	desired := renderAll(t, []spec.Container{gitea, container("redis", "redis:7"), container("cache", "memcached:2")}, nil, resolveMode)
	rt.ResetCalls()
	p, err := r.Plan(ctx, desired)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"replace cache", "adopt gitea", "adopt redis"}, kinds(p)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if n := rt.Calls("Inspect"); n != 3 {
		t.Errorf("planning inspected %d containers, want 3", n)
	}
	if _, err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := ids(rt)
	if got["gitea"] != id || got["redis"] != newerID || got["cache"] == staleID {
		t.Errorf("after adoption: %v; want gitea %s and redis %s kept, cache replaced", got, id, newerID)
	}
	if c, _ := rt.Container("gitea"); c.Settings.Resources.MemoryBytes != 1<<30 {
		t.Errorf("adopted gitea memory = %d, want updated", c.Settings.Resources.MemoryBytes)
	}

	// Adopted containers are judged from the adoption: no inspects, and a
	// later change replaces them like any managed container.
	rt.ResetCalls()
	if p, _ := r.Plan(ctx, desired); len(p.Changes()) != 0 || rt.Calls("Inspect") != 0 {
		t.Errorf("pass after adoption: %v with %d inspects; want no changes, no inspects", kinds(p), rt.Calls("Inspect"))
	}
	gitea.Image = "gitea:2"
	desired[0] = render(t, gitea, nil, resolveMode)
	p, _ = r.Plan(ctx, desired)
	if diff := cmp.Diff([]string{"replace gitea"}, kinds(p)); diff != "" {
		t.Errorf("plan after a change to an adopted container (-want +got):\n%s", diff)
	}
	// A restarted agent restores adoptions.
	r2 := newReconciler(t, rt, func(c *reconcile.Config) { c.Adoptions = r.Adoptions() })
	rt.ResetCalls()
	if p, _ := r2.Plan(ctx, desired); rt.Calls("Inspect") != 0 || len(p.Changes()) != 1 {
		t.Errorf("restored Reconciler: %v with %d inspects", kinds(p), rt.Calls("Inspect"))
	}
}

func labelledAs(r spec.Rendered, digestLabel, record string) spec.Rendered {
	r.Labels = map[string]string{reconcile.LabelManaged: "true", digest.LabelDigest: digestLabel, digest.LabelRecord: record}
	return r
}

// TestOlderRecordStillMatches: a container whose record label differs in
// form from what this meshhost writes, but whose digest (judged by its own
// version) still matches, is kept: changing meshhost never replaces a
// container by itself.
func TestOlderRecordStillMatches(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	d := render(t, container("gitea", "gitea:1"), nil, resolveMode)
	// The same settings, written as another meshhost might have: spaced JSON.
	record := strings.Replace(testKey.Record(d), `":"`, `": "`, -1)
	if record == testKey.Record(d) {
		t.Fatal("test is broken: record unchanged")
	}
	id, _ := rt.Create(ctx, labelledAs(d, digest.Of(d), record))
	rt.Start(ctx, id)
	r := newReconciler(t, rt, nil)
	rt.ResetCalls()
	p, err := r.Plan(ctx, []spec.Rendered{d})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes()) != 0 || rt.Calls("Inspect") != 0 {
		t.Errorf("plan = %v with %d inspects, want keep without inspecting", kinds(p), rt.Calls("Inspect"))
	}
}

// TestIncident replays the incident: one routed name added to the roster.
// In copy mode every container carries the roster, so every one is
// replaced (and the budget is what stops the storm); in resolve mode none is.
func TestIncident(t *testing.T) {
	var cs []spec.Container
	for _, n := range []string{"postgres", "registry", "edge", "mail", "identity", "gitea", "redis", "vault"} {
		cs = append(cs, container(n, n+":1"))
	}
	before := roster(7, "gitea.novox.internal", "vault.hub.internal")
	after := roster(8, "gitea.novox.internal", "vault.hub.internal")
	after.Names["searxng.zurag.be"] = before.Names["gitea.novox.internal"][:0:0]
	after.Names["searxng.zurag.be"] = append(after.Names["searxng.zurag.be"], mustAddr("100.64.0.9"))

	for _, tc := range []struct {
		mode         spec.Mode
		wantReplaced int
	}{
		{spec.Mode{Names: spec.Copy}, len(cs)},
		{resolveMode, 0},
	} {
		t.Run(string(tc.mode.Names), func(t *testing.T) {
			ctx := context.Background()
			rt := memory.New(memory.Options{})
			r := newReconciler(t, rt, nil)
			mustReconcile(t, r, renderAll(t, cs, before, tc.mode))
			idsBefore := ids(rt)
			p, err := r.Plan(ctx, renderAll(t, cs, after, tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Count(reconcile.Replace); got != tc.wantReplaced {
				t.Errorf("plan replaces %d, want %d", got, tc.wantReplaced)
			}
			for _, a := range p.Changes() {
				if want := "hosts: +searxng.zurag.be=100.64.0.9"; a.Reason != want {
					t.Errorf("%s: reason %q, want %q", a.Name, a.Reason, want)
				}
			}
			if _, err := r.Apply(ctx, p); err != nil {
				t.Fatal(err)
			}
			changed := 0
			for name, id := range ids(rt) {
				if idsBefore[name] != id {
					changed++
				}
			}
			if changed != tc.wantReplaced {
				t.Errorf("%d container IDs changed, want %d", changed, tc.wantReplaced)
			}
		})
	}

	// With the default budget, the copy-mode storm is three containers a
	// minute, the rest deferred.
	rt := memory.New(memory.Options{})
	clock := newClock()
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Budget, c.Now = reconcile.DefaultBudget, clock.Now })
	mustReconcile(t, r, renderAll(t, cs, before, spec.Mode{Names: spec.Copy}))
	res := mustReconcile(t, r, renderAll(t, cs, after, spec.Mode{Names: spec.Copy}))
	if res.Count(reconcile.Replace) != 3 || res.Deferred != len(cs)-3 {
		t.Errorf("default budget: replaced %d, deferred %d; want 3, %d", res.Count(reconcile.Replace), res.Deferred, len(cs)-3)
	}
}

// TestAdoptWithoutInPlaceUpdates is issue 17's sixth bug (first half): on a
// runtime that does not keep in-place updates across restarts, adopting a
// container whose resources differ must not `podman update` it and record
// the new limits as in force (they vanish at its next start). It is adopted
// as it runs, and the next pass replaces it, within the budget, naming the
// resources.
func TestAdoptWithoutInPlaceUpdates(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	gitea := container("gitea", "gitea:1")
	id, _ := rt.Create(ctx, render(t, gitea, nil, resolveMode)) // by hand: no labels
	rt.Start(ctx, id)
	gitea.Resources.MemoryBytes = 1 << 30
	desired := renderAll(t, []spec.Container{gitea}, nil, resolveMode)
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.NoInPlaceUpdates = true })
	rt.ResetCalls()
	res := mustReconcile(t, r, desired)
	if n := rt.Calls("Update"); n != 0 {
		t.Errorf("adoption called Update %d times on a runtime without durable in-place updates", n)
	}
	if res.Count(reconcile.Adopt) != 1 {
		t.Errorf("first pass: %v, want gitea adopted", res.Outcomes)
	}
	p, err := r.Plan(ctx, desired)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(p); !slices.Equal(got, []string{"replace gitea"}) || !strings.Contains(reasonOf(p, "gitea"), "resources") {
		t.Errorf("the pass after adoption plans %v (%q), want gitea replaced for its resources", got, reasonOf(p, "gitea"))
	}
	// A restart (adoptions restored) sees the same.
	r2 := newReconciler(t, rt, func(c *reconcile.Config) { c.NoInPlaceUpdates, c.Adoptions = true, r.Adoptions() })
	if p, _ := r2.Plan(ctx, desired); !slices.Equal(kinds(p), []string{"replace gitea"}) {
		t.Errorf("after a restart the plan is %v, want gitea replaced", kinds(p))
	}
	mustReconcile(t, r, desired)
	if c, _ := rt.Container("gitea"); c.ID == id || c.Settings.Resources.MemoryBytes != 1<<30 {
		t.Errorf("gitea = %s with memory %d, want a new container created with the limit", c.ID, c.Settings.Resources.MemoryBytes)
	}
	if p, _ := r.Plan(ctx, desired); len(p.Changes()) != 0 {
		t.Errorf("not converged: %v", p)
	}
}

// TestAdoptionsOfAnOlderMeshhost: adoptions saved by a meshhost before
// AdoptionVersion 1 (Config.Adoptions restored after an upgrade). That
// meshhost, on a runtime without durable in-place updates (podman before
// 5.1), updated an adopted container in place and recorded the declared
// limits as in force; the limits vanished at the container's next start,
// and the saved adoption kept every later pass from noticing. With
// NoInPlaceUpdates such an adoption is not trusted: the container is
// inspected and judged again, adopted with the limits it has and replaced
// within the budget, naming the resources. Without NoInPlaceUpdates (an
// update survives restarts there) an old adoption is trusted as before,
// and nothing is inspected or replaced.
func TestAdoptionsOfAnOlderMeshhost(t *testing.T) {
	const limit = 512 << 20
	type step struct {
		kinds   []string // the plan's changes
		inspect int      // Inspect calls planning it
	}
	for _, tc := range []struct {
		name       string
		noInPlace  bool
		version    int   // the saved adoptions' Version
		has        int64 // the memory limit the containers run with
		passes     []step
		wantLimit  int64 // at the end
		replaced   bool  // containers replaced by the end
		wantReason string
	}{
		{
			name: "no in-place updates, the limit vanished", noInPlace: true, version: 0, has: 0,
			passes: []step{
				{[]string{"adopt gitea", "adopt redis"}, 2},
				// A budget of one replacement: the other waits.
				{[]string{"replace gitea", "replace redis"}, 0},
				{[]string{"replace redis"}, 0},
				{nil, 0},
			},
			wantLimit: limit, replaced: true, wantReason: "resources",
		},
		{
			name: "no in-place updates, the limit is in force", noInPlace: true, version: 0, has: limit,
			passes:    []step{{[]string{"adopt gitea", "adopt redis"}, 2}, {nil, 0}},
			wantLimit: limit,
		},
		{
			name: "no in-place updates, adopted by this version", noInPlace: true, version: reconcile.AdoptionVersion, has: limit,
			passes:    []step{{nil, 0}},
			wantLimit: limit,
		},
		{
			// Never here: the record is trusted, whatever the container has.
			name: "in-place updates", noInPlace: false, version: 0, has: 0,
			passes:    []step{{nil, 0}, {nil, 0}},
			wantLimit: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := memory.New(memory.Options{})
			clk := newClock()
			var desired []spec.Rendered
			var saved []reconcile.Adoption
			before := map[string]string{}
			for _, name := range []string{"gitea", "redis"} {
				c := container(name, name+":1")
				c.Resources.MemoryBytes = tc.has
				// Made by hand (no labels), running as the update left it.
				id, err := rt.Create(ctx, render(t, c, nil, resolveMode))
				if err != nil {
					t.Fatal(err)
				}
				rt.Start(ctx, id)
				before[name] = id
				c.Resources.MemoryBytes = limit
				d := render(t, c, nil, resolveMode)
				desired = append(desired, d)
				// What that meshhost saved: the declared limits, as in force.
				saved = append(saved, reconcile.Adoption{ID: id, Name: name, Digest: digest.Of(d), Record: testKey.Record(d), Version: tc.version})
			}
			r := newReconciler(t, rt, func(cfg *reconcile.Config) {
				cfg.NoInPlaceUpdates, cfg.Adoptions = tc.noInPlace, saved
				cfg.Budget, cfg.Now = reconcile.Budget{Max: 1, Window: time.Minute}, clk.Now
			})
			for i, want := range tc.passes {
				rt.ResetCalls()
				p, err := r.Plan(ctx, desired)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, step{kinds(p), rt.Calls("Inspect")}, cmp.AllowUnexported(step{})); diff != "" {
					t.Errorf("pass %d: plan (-want +got):\n%s", i+1, diff)
				}
				for _, a := range p.Changes() {
					if a.Kind == reconcile.Replace && !strings.Contains(a.Reason, tc.wantReason) {
						t.Errorf("pass %d: replace %s because %q, want it to name %q", i+1, a.Name, a.Reason, tc.wantReason)
					}
				}
				if _, err := r.Apply(ctx, p); err != nil {
					t.Fatal(err)
				}
				if n := rt.Calls("Update"); tc.noInPlace && n != 0 {
					t.Errorf("pass %d: %d in-place updates on a runtime that does not keep them", i+1, n)
				}
				clk.Advance(time.Minute)
			}
			for name, id := range before {
				c, _ := rt.Container(name)
				if c.Settings.Resources.MemoryBytes != tc.wantLimit {
					t.Errorf("%s runs with a memory limit of %d, want %d", name, c.Settings.Resources.MemoryBytes, tc.wantLimit)
				}
				if got := c.ID != id; got != tc.replaced {
					t.Errorf("%s replaced = %v, want %v", name, got, tc.replaced)
				}
			}
			for _, a := range r.Adoptions() {
				if a.Version != reconcile.AdoptionVersion && tc.noInPlace {
					t.Errorf("adoption of %s kept at version %d, want %d once judged again", a.Name, a.Version, reconcile.AdoptionVersion)
				}
			}
		})
	}
}
