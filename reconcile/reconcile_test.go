package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, nil)
	base := []spec.Container{container("gitea", "gitea:1"), container("redis", "redis:7"), container("web", "caddy:2")}

	steps := []struct {
		name       string
		edit       func([]spec.Container) []spec.Container
		want       []string
		wantReason map[string]string
		sameID     []string // names whose container must survive the step
	}{
		{
			name: "create",
			edit: func(cs []spec.Container) []spec.Container { return cs },
			want: []string{"create gitea", "create redis", "create web"},
		},
		{
			name:   "no change",
			edit:   func(cs []spec.Container) []spec.Container { return cs },
			sameID: []string{"gitea", "redis", "web"},
		},
		{
			name: "update in place",
			edit: func(cs []spec.Container) []spec.Container {
				cs[1].Resources.MemoryBytes = 256 << 20
				return cs
			},
			want:       []string{"update redis"},
			wantReason: map[string]string{"redis": "resources"},
			sameID:     []string{"gitea", "redis", "web"},
		},
		{
			name: "replace",
			edit: func(cs []spec.Container) []spec.Container {
				cs[0].Image = "gitea:2"
				return cs
			},
			want:       []string{"replace gitea"},
			wantReason: map[string]string{"gitea": "image: gitea:1 -> gitea:2"},
			sameID:     []string{"redis", "web"},
		},
		{
			name:   "remove",
			edit:   func(cs []spec.Container) []spec.Container { return cs[:2] },
			want:   []string{"remove web"},
			sameID: []string{"gitea", "redis"},
		},
	}
	cs := base
	for _, step := range steps {
		cs = step.edit(cs)
		desired := renderAll(t, cs, nil, resolveMode)
		before := ids(rt)
		p, err := r.Plan(ctx, desired)
		if err != nil {
			t.Fatalf("%s: Plan: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, kinds(p)); diff != "" {
			t.Errorf("%s: plan (-want +got):\n%s", step.name, diff)
		}
		for name, want := range step.wantReason {
			if got := reasonOf(p, name); !strings.Contains(got, want) {
				t.Errorf("%s: reason for %q = %q, want it to contain %q", step.name, name, got, want)
			}
		}
		if _, err := r.Apply(ctx, p); err != nil {
			t.Fatalf("%s: Apply: %v", step.name, err)
		}
		after := ids(rt)
		for _, name := range step.sameID {
			if before[name] != after[name] {
				t.Errorf("%s: container %q was replaced (%s -> %s)", step.name, name, before[name], after[name])
			}
		}
		checkConverged(t, rt, desired)
		if len(after) != len(desired) {
			t.Errorf("%s: %d containers, want %d", step.name, len(after), len(desired))
		}
		if again, _ := r.Plan(ctx, desired); len(again.Changes()) != 0 {
			t.Errorf("%s: second plan = %v, want no changes", step.name, kinds(again))
		}
	}
	if c, _ := rt.Container("redis"); c.Settings.Resources.MemoryBytes != 256<<20 {
		t.Errorf("redis memory = %d, want %d", c.Settings.Resources.MemoryBytes, 256<<20)
	}
}

func TestNoopPassCostsOneList(t *testing.T) {
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, nil)
	var cs []spec.Container
	for i := range 200 {
		c := container("svc"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "img:1")
		c.Resources.PidsLimit = 100
		cs = append(cs, c)
	}
	desired := renderAll(t, cs, roster(1, "a.internal", "b.internal"), spec.Mode{Names: spec.Copy})
	mustReconcile(t, r, desired)

	// A fresh Reconciler, as after a restart, must not need more.
	for _, r := range []*reconcile.Reconciler{r, newReconciler(t, rt, nil)} {
		rt.ResetCalls()
		res := mustReconcile(t, r, desired)
		if got, want := rt.CallCounts(), map[string]int{"List": 1}; !cmp.Equal(want, got) {
			t.Errorf("no-op pass over %d containers made calls %v, want %v", len(desired), got, want)
		}
		if n := res.Count(reconcile.Keep); n != len(desired) {
			t.Errorf("kept %d, want %d", n, len(desired))
		}
	}
}

func TestStopUsesContainerSignalAndTimeout(t *testing.T) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, nil)
	pg := spec.Container{Name: "postgres", Image: "postgres:16", StopSignal: "SIGINT", StopTimeout: 120 * time.Second,
		Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "pgdata", Target: "/var/lib/postgresql/data"}}}
	web := container("web", "caddy:2")
	mustReconcile(t, r, renderAll(t, []spec.Container{pg, web}, nil, resolveMode))

	pg.Image = "postgres:17"
	mustReconcile(t, r, renderAll(t, []spec.Container{pg, web}, nil, resolveMode)) // replace
	mustReconcile(t, r, renderAll(t, []spec.Container{pg}, nil, resolveMode))      // remove web
	var got []memory.Stop
	for _, s := range rt.Stops() {
		got = append(got, memory.Stop{Name: s.Name, Signal: s.Signal, Timeout: s.Timeout})
	}
	want := []memory.Stop{
		{Name: "postgres", Signal: "SIGINT", Timeout: 120 * time.Second},
		{Name: "web", Signal: "SIGTERM", Timeout: 10 * time.Second},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stops (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pgdata"}, rt.Volumes()); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	_ = ctx
}

func TestDependencyOrder(t *testing.T) {
	const delay = 30 * time.Millisecond
	rt := memory.New(memory.Options{HealthDelay: delay})
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.Concurrency = 8 })
	hc := &spec.Healthcheck{Test: []string{"pg_isready"}}
	cs := []spec.Container{
		{Name: "web", Image: "caddy:2", DependsOn: []string{"app"}},
		{Name: "app", Image: "app:1", DependsOn: []string{"db", "cache"}, Healthcheck: hc},
		{Name: "db", Image: "postgres:16", Healthcheck: hc},
		{Name: "cache", Image: "redis:7"},
		{Name: "other", Image: "x:1"},
	}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))

	started := map[string]time.Time{}
	obs, _ := rt.List(context.Background())
	for _, o := range obs {
		started[o.Name] = o.StartedAt
	}
	for _, c := range cs {
		for _, dep := range c.DependsOn {
			gap := started[c.Name].Sub(started[dep])
			if gap <= 0 {
				t.Errorf("%q started before its dependency %q", c.Name, dep)
			}
			if dc, _ := rt.Container(dep); dc.Settings.Healthcheck != nil && gap < delay {
				t.Errorf("%q started %v after %q, before it could be healthy (%v)", c.Name, gap, dep, delay)
			}
		}
	}

	// Replacing the dependency gates its dependants again.
	cs[2].Image = "postgres:17"
	cs[1].Image = "app:2"
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	seq := map[string]uint64{}
	for _, c := range rt.Containers() {
		seq[c.Name] = c.StartSeq
	}
	if seq["app"] < seq["db"] {
		t.Errorf("app (seq %d) started before db (seq %d)", seq["app"], seq["db"])
	}

	// Removing everything goes dependants first.
	rt2 := rt.Events()
	mustReconcile(t, r, nil)
	var removed []string
	for _, e := range rt.Events()[len(rt2):] {
		if e.Method == "Remove" {
			removed = append(removed, e.Name)
		}
	}
	pos := map[string]int{}
	for i, n := range removed {
		pos[n] = i
	}
	for _, pair := range [][2]string{{"web", "app"}, {"app", "db"}, {"app", "cache"}} {
		if pos[pair[0]] > pos[pair[1]] {
			t.Errorf("removed %q before its dependant %q: order %v", pair[1], pair[0], removed)
		}
	}
	if len(removed) != len(cs) {
		t.Errorf("removed %v, want all %d", removed, len(cs))
	}
}

func TestDependantOfFailedDependencyNotStarted(t *testing.T) {
	rt := memory.New(memory.Options{HealthDelay: time.Hour})
	r := newReconciler(t, rt, func(c *reconcile.Config) { c.HealthTimeout = 20 * time.Millisecond })
	cs := []spec.Container{
		{Name: "db", Image: "postgres:16", Healthcheck: &spec.Healthcheck{Test: []string{"true"}}},
		{Name: "app", Image: "app:1", DependsOn: []string{"db"}},
	}
	res, err := r.Reconcile(context.Background(), renderAll(t, cs, nil, resolveMode))
	if err == nil {
		t.Fatal("Reconcile with a never-healthy dependency: no error")
	}
	if !strings.Contains(err.Error(), `creating "db"`) || !strings.Contains(err.Error(), `dependency "db" failed`) {
		t.Errorf("error = %v; want it to name db's failure and app's skip", err)
	}
	if _, ok := rt.Container("app"); ok {
		t.Error("app was created although its dependency never became healthy")
	}
	_ = res
}
