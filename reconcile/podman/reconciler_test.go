package podman

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// The reconciler against real podman (issue 3, point 8). Every test scopes
// the reconciler to its own containers (testRuntime), so tests running at
// once on the same podman never touch each other's.

var resolveMode = spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
	Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"mesh.internal"}, Options: []string{"ndots:1"},
}}

// TestReconcileLifecycle: create, keep, update in place, replace with its
// reason, remove; the volume outlives it all.
func TestReconcileLifecycle(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t, RunHealthchecks())
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, nil)
	c := sleeper("app")
	c.Env = map[string]string{"VERSION": "1"}
	c.Resources = spec.Resources{PidsLimit: 100}
	c.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: h.Name("data"), Target: "/data"}}
	desired := func() []spec.Rendered { return []spec.Rendered{render(t, h, c, nil, resolveMode)} }
	name := h.Name("app")

	res := mustReconcile(t, r, desired())
	if res.Count(reconcile.Create) != 1 {
		t.Fatalf("first pass: %v, want one create", outcomes(res))
	}
	id := res.Outcomes[0].NewID
	h.Exec(id, "sh", "-c", "echo precious > /data/f")

	if res := mustReconcile(t, r, desired()); res.Count(reconcile.Keep) != 1 {
		t.Errorf("second pass: %v, want keep", outcomes(res))
	}

	c.Resources.PidsLimit = 200
	res = mustReconcile(t, r, desired())
	if res.Count(reconcile.Update) != 1 || !strings.Contains(res.Outcomes[0].Reason, "resources") {
		t.Errorf("resources changed: %v, want an update naming resources", outcomes(res))
	}
	if o := byName(t, trt)[name]; o.ID != id || o.State != reconcile.StateRunning {
		t.Errorf("after the update: %s %s, want %s still running", o.ID, o.State, id)
	}
	if got := cgroupLimits(t, h, id).PidsLimit; got != 200 {
		t.Errorf("after the update the pids limit is %d, want 200", got)
	}
	if res := mustReconcile(t, r, desired()); res.Count(reconcile.Keep) != 1 {
		t.Errorf("pass after the update: %v, want keep", outcomes(res))
	}

	c.Env["VERSION"] = "2"
	res = mustReconcile(t, r, desired())
	o := res.Outcomes[0]
	if res.Count(reconcile.Replace) != 1 || len(o.Changes) != 1 || o.Changes[0].Field != "env" || !strings.Contains(o.Reason, "VERSION") {
		t.Errorf("env changed: %v, want one replace naming env VERSION", outcomes(res))
	}
	if _, err := rt.Inspect(ctx(t), id); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("after the replacement, Inspect(old) = %v, want ErrNotFound", err)
	}
	newID := o.NewID
	if got := h.Exec(newID, "sh", "-c", `echo "$VERSION"; cat /data/f`); got != "2\nprecious\n" {
		t.Errorf("the replacement sees %q, want VERSION 2 and the volume's file", got)
	}
	if m := byName(t, trt); len(m) != 1 || m[name].ID != newID || m[name].State != reconcile.StateRunning {
		t.Errorf("after the replacement: %v, want only %s running", m, newID)
	}

	res = mustReconcile(t, r, nil)
	if res.Count(reconcile.Remove) != 1 {
		t.Errorf("no longer declared: %v, want remove", outcomes(res))
	}
	if m := byName(t, trt); len(m) != 0 {
		t.Errorf("after the removal: %v, want none", m)
	}
	if _, err := h.Podman("volume", "exists", h.Name("data")); err != nil {
		t.Errorf("the removal took the volume: %v", err)
	}
}

// TestReconcileDependencyOrder reads the order from podman's own start
// times: a dependency starts, and is healthy when it has a healthcheck,
// before its dependants; removals stop dependants first.
func TestReconcileDependencyOrder(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t, RunHealthchecks())
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, nil)
	db := sleeper("db")
	db.Healthcheck = &spec.Healthcheck{Test: []string{"sh", "-c", "test -f /tmp/ready"}, Interval: time.Hour, Retries: 100}
	// Ready a second after it starts: a dependant started before that would
	// show in the start times.
	db.Command = []string{"sh", "-c", "trap 'exit 0' TERM INT; sleep 1; touch /tmp/ready; sleep 300 & wait"}
	app := sleeper("app")
	app.DependsOn = []string{"db"}
	web := sleeper("web")
	web.DependsOn = []string{"app"}
	worker := sleeper("worker")
	worker.DependsOn = []string{"db"}
	var desired []spec.Rendered
	for _, c := range []spec.Container{web, worker, app, db} { // declaration order means nothing
		desired = append(desired, render(t, h, c, nil, resolveMode))
	}
	mustReconcile(t, r, desired)

	started, ids := map[string]time.Time{}, map[string]string{}
	for name, o := range byName(t, trt) {
		in, err := rt.Inspect(ctx(t), o.ID)
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(name, h.Prefix())
		started[name], ids[name] = in.StartedAt, o.ID
	}
	for _, e := range []struct {
		dep, dependant string
		// db is healthy a second after it starts: its `sleep 1` may begin
		// a little before podman records StartedAt, hence 900 ms.
		after time.Duration
	}{{"db", "app", 900 * time.Millisecond}, {"db", "worker", 900 * time.Millisecond}, {"app", "web", 0}} {
		dep, dependant := started[e.dep], started[e.dependant]
		if dep.IsZero() || !dependant.After(dep.Add(e.after)) {
			t.Errorf("%s started at %v, %s at %v: want %s more than %v later",
				e.dep, dep.Format(time.StampMicro), e.dependant, dependant.Format(time.StampMicro), e.dependant, e.after)
		}
	}

	mustReconcile(t, r, nil)
	stopped := map[string]call{} // by container ID
	for _, c := range trt.log() {
		if c.Method == "Stop" {
			stopped[c.ID] = c
		}
	}
	for _, e := range [][2]string{{"web", "app"}, {"app", "db"}, {"worker", "db"}} {
		first, then := stopped[ids[e[0]]], stopped[ids[e[1]]]
		if first.End.IsZero() || then.Start.IsZero() || then.Start.Before(first.End) {
			t.Errorf("removal: %s stopped %v to %v, %s %v to %v; want %s stopped first",
				e[0], first.Start.Format(time.StampMicro), first.End.Format(time.StampMicro),
				e[1], then.Start.Format(time.StampMicro), then.End.Format(time.StampMicro), e[0])
		}
	}
	if m := byName(t, trt); len(m) != 0 {
		t.Errorf("after removing everything: %v left", m)
	}
}

// outcomes lists a pass's outcomes for a message.
func outcomes(res *reconcile.Result) []string {
	var out []string
	for _, o := range res.Outcomes {
		s := o.Action.String()
		if o.Err != nil {
			s += " (error: " + o.Err.Error() + ")"
		}
		out = append(out, s)
	}
	return out
}

// TestResourceChangeWherePodmanKeepsUpdates is the agent's choice between
// updating in place and replacing, on the podman at hand: where podman
// keeps updates across restarts (KeepsUpdates: 5.1 and later) a resource
// change updates the running container, and its limits survive a stop and
// start; where it does not (Debian's 4.3), the change replaces the
// container, whose new limits are then its own.
func TestResourceChangeWherePodmanKeepsUpdates(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	keeps, err := rt.KeepsUpdates(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if v := podmantest.Version(t); keeps != v.AtLeast(5, 1) {
		t.Errorf("podman %s: KeepsUpdates = %v, want %v (podman 5.1 made updates persistent)", v, keeps, v.AtLeast(5, 1))
	}
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, func(c *reconcile.Config) { c.NoInPlaceUpdates = !keeps })
	c := sleeper("svc")
	c.Resources = spec.Resources{MemoryBytes: 64 << 20, MilliCPUs: 500, PidsLimit: 100}
	desired := func() []spec.Rendered { return []spec.Rendered{render(t, h, c, nil, resolveMode)} }
	res := mustReconcile(t, r, desired())
	id := res.Outcomes[0].NewID

	c.Resources = spec.Resources{MemoryBytes: 128 << 20, MilliCPUs: 250, PidsLimit: 64}
	res = mustReconcile(t, r, desired())
	o := res.Outcomes[0]
	want, newID := reconcile.Replace, o.NewID
	if keeps {
		want, newID = reconcile.Update, id
	}
	if o.Kind != want || !strings.Contains(o.Reason, "resources") {
		t.Fatalf("resources changed, KeepsUpdates %v: %v, want %s naming resources", keeps, outcomes(res), want)
	}
	if got := cgroupLimits(t, h, newID); got != c.Resources {
		t.Errorf("after the %s the limits are %+v, want %+v", want, got, c.Resources)
	}
	// A stop and a start (a reboot, a restart policy) keep the new limits.
	if err := rt.Stop(ctx(t), newID, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx(t), newID); err != nil {
		t.Fatal(err)
	}
	if got := cgroupLimits(t, h, newID); got != c.Resources {
		t.Errorf("after the %s and a restart the limits are %+v, want %+v", want, got, c.Resources)
	}
	if in, err := rt.Inspect(ctx(t), newID); err != nil || in.Settings.Resources != c.Resources {
		t.Errorf("after the %s and a restart Inspect reports %+v, %v; want %+v", want, in.Settings.Resources, err, c.Resources)
	}
	if res := mustReconcile(t, r, desired()); res.Count(reconcile.Keep) != 1 {
		t.Errorf("pass after the restart: %v, want keep", outcomes(res))
	}
}
