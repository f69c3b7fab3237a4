package podman

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// TestReplaceSurvivesAFailureAtEachStep injects a failure at each step of a
// replacement on real podman: alone (the reconciler rolls back by itself) or
// as a crash (every later call fails too, as if meshhost died there; a new
// Reconciler then finds the leftovers). Either way the next clean pass
// converges: one container under the name, running, matching the
// declaration, nothing left aside, and the volume's data intact.
func TestReplaceSurvivesAFailureAtEachStep(t *testing.T) {
	t.Parallel()
	// One harness (and one cleanup) for all cases; each case's containers
	// carry its own prefix, which its scoped runtime lists.
	rt, h := newRuntime(t, RunHealthchecks())
	for i, tc := range []struct {
		name  string
		fault fault
	}{
		{"stop old", fault{Method: "Stop", N: 1}},
		{"rename aside", fault{Method: "Rename", N: 1}},
		{"create new", fault{Method: "Create", N: 1}},
		{"start new", fault{Method: "Start", N: 1}},
		{"wait healthy", fault{Method: "Inspect", N: 1}},
		{"remove old", fault{Method: "Remove", N: 1}},
		{"crash: stop old", fault{Method: "Stop", N: 1, Crash: true}},
		{"crash: rename aside took effect", fault{Method: "Rename", N: 1, After: true, Crash: true}},
		{"crash: create new", fault{Method: "Create", N: 1, Crash: true}},
		{"crash: create new took effect", fault{Method: "Create", N: 1, After: true, Crash: true}},
		{"crash: start new", fault{Method: "Start", N: 1, Crash: true}},
		{"crash: wait healthy", fault{Method: "Inspect", N: 1, Crash: true}},
		{"crash: remove old", fault{Method: "Remove", N: 1, Crash: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := h.Sub(t)
			sub := fmt.Sprintf("s%d-", i)
			trt := scoped(rt, h.Name(sub))
			db := sleeper(sub + "db")
			db.StopSignal = "SIGINT"
			db.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: h.Name(sub + "pgdata"), Target: "/data"}}
			db.Healthcheck = &spec.Healthcheck{Test: []string{"sh", "-c", "test -d /data"}, Interval: time.Hour}
			db.Env = map[string]string{"PG": "16"}
			app := sleeper(sub + "app")
			app.DependsOn = []string{sub + "db"}
			desired := func() []spec.Rendered {
				return []spec.Rendered{render(t, h, db, nil, resolveMode), render(t, h, app, nil, resolveMode)}
			}
			mustReconcile(t, newReconciler(t, trt, nil), desired())
			before := byName(t, trt)
			dbName, appName := h.Name(sub+"db"), h.Name(sub+"app")
			h.Exec(before[dbName].ID, "sh", "-c", "echo precious > /data/f")

			db.Env["PG"] = "17"
			want := desired()
			trt.inject(tc.fault)
			res, err := newReconciler(t, trt, nil).Reconcile(ctx(t), want)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Reconcile with the fault = %v, want the injected failure", err)
			}
			if !tc.fault.Crash {
				checkAfterFailure(t, trt, tc.fault, dbName, before[dbName].ID, res)
			}

			trt.recover()
			r := newReconciler(t, trt, nil) // as after a restart
			res = mustReconcile(t, r, want)
			t.Logf("the pass after the failure: %v", outcomes(res))
			after := byName(t, trt)
			if len(after) != 2 {
				t.Errorf("after convergence: %v, want db and app only", slices.Collect(maps.Keys(after)))
			}
			got := after[dbName]
			if ok, _ := testKey.Matches(got.Labels[digest.LabelDigest], want[0]); !ok || got.State != reconcile.StateRunning {
				t.Errorf("db is %s %s with digest %s, want running the declaration", got.ID, got.State, got.Labels[digest.LabelDigest])
			}
			if data := h.Exec(got.ID, "sh", "-c", `echo "$PG"; cat /data/f`); data != "17\nprecious\n" {
				t.Errorf("db reads %q, want PG 17 and the volume's data", data)
			}
			if a := after[appName]; a.ID != before[appName].ID || a.State != reconcile.StateRunning {
				t.Errorf("app %s %s, want %s untouched and running", a.ID, a.State, before[appName].ID)
			}
			if p, err := r.Plan(ctx(t), want); err != nil || len(p.Changes()) != 0 {
				t.Errorf("not converged: Plan = %v, %v", p, err)
			}
		})
	}
}

// checkAfterFailure: a replacement that failed without a crash has put the
// old container back, running, unless only removing the old one failed; then
// the new one runs and the old one waits aside for the next pass.
func checkAfterFailure(t *testing.T, trt *testRuntime, f fault, name, oldID string, res *reconcile.Result) {
	t.Helper()
	m := byName(t, trt)
	cur, aside := m[name], m[name+reconcile.AsideSuffix]
	if f.Method == "Remove" {
		if cur.ID == oldID || cur.State != reconcile.StateRunning || aside.ID != oldID || aside.State == reconcile.StateRunning {
			t.Errorf("after removing the old one failed: %s is %s %s, aside %s %s; want the new one running, the old one stopped aside", name, cur.ID, cur.State, aside.ID, aside.State)
		}
		return
	}
	if cur.ID != oldID || cur.State != reconcile.StateRunning || aside.ID != "" {
		t.Errorf("after a failed replacement (%v): %s is %s %s, aside %q; want the old one back, running", outcomes(res), name, cur.ID, cur.State, aside.ID)
	}
}

// TestReconcileLeavesUnmanagedContainersAlone: a container this reconciler
// did not create (made by hand, or by a reconciler of another owner) is never
// stopped, replaced or removed, whether it holds a declared name (a
// conflict) or not.
func TestReconcileLeavesUnmanagedContainersAlone(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, nil)
	// Made by hand with the CLI: no meshhost labels.
	other := h.MustPodman("run", "-d", "--name", h.Name("hand-made"), "--label", "owner=ops", podmantest.Image, "sleep", "300")
	squatter := h.MustPodman("run", "-d", "--name", h.Name("web"), podmantest.Image, "sleep", "300")
	// Made by another reconciler (another owner) on the same podman.
	theirs := mustReconcile(t, newReconciler(t, scoped(rt, h.Name("theirs-")), nil),
		[]spec.Rendered{render(t, h, sleeper("theirs-db"), nil, resolveMode)}).Outcomes[0].NewID
	desired := []spec.Rendered{render(t, h, sleeper("web"), nil, resolveMode), render(t, h, sleeper("api"), nil, resolveMode)}
	for pass := 1; pass <= 2; pass++ {
		res, err := r.Reconcile(ctx(t), desired)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		kinds := map[string]reconcile.Kind{}
		for _, o := range res.Outcomes {
			kinds[strings.TrimPrefix(o.Name, h.Prefix())] = o.Kind
		}
		if kinds["web"] != reconcile.Conflict || kinds["hand-made"] != "" || kinds["theirs-db"] != "" {
			t.Errorf("pass %d: %v; want a conflict for web, nothing for hand-made and theirs-db", pass, outcomes(res))
		}
		m := byName(t, trt)
		for name, id := range map[string]string{"hand-made": other, "web": squatter, "theirs-db": theirs} {
			if o := m[h.Name(name)]; o.ID != id || o.State != reconcile.StateRunning {
				t.Errorf("pass %d: %s is %s %s; want %s untouched and running", pass, name, o.ID, o.State, id)
			}
		}
	}
	for _, c := range trt.log() {
		if c.Method != "List" && c.Method != "Inspect" && (c.ID == other || c.ID == squatter || c.ID == theirs) {
			t.Errorf("the reconciler called %s on an unmanaged container", c.Method)
		}
	}
}

// TestIncidentRosterChange replays the incident on real podman: in copy mode
// adding one name to the roster replaces every container; in resolve mode it
// replaces none (container IDs before and after).
func TestIncidentRosterChange(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, nil)
	roster := testRoster(t)
	grown := *roster
	grown.Generation++
	grown.Names = maps.Clone(roster.Names)
	grown.Names["searxng.ace.mesh.internal"] = []netip.Addr{netip.MustParseAddr("100.64.0.23")}

	services := []spec.Container{sleeper("postgres"), sleeper("registry"), sleeper("caddy"), sleeper("gitea")}
	for _, tc := range []struct {
		mode         spec.Mode
		wantReplaced int
	}{
		{spec.Mode{Names: spec.Copy}, len(services)},
		{resolveMode, 0},
	} {
		t.Run(string(tc.mode.Names), func(t *testing.T) {
			desired := func(ro *spec.Roster) []spec.Rendered {
				var out []spec.Rendered
				for _, c := range services {
					out = append(out, render(t, h, c, ro, tc.mode))
				}
				return out
			}
			mustReconcile(t, r, desired(roster)) // creates, or switches mode: replaces
			before := byName(t, trt)
			res := mustReconcile(t, r, desired(&grown))
			after := byName(t, trt)
			replaced := 0
			for name, o := range before {
				if after[name].ID != o.ID {
					replaced++
				}
			}
			if replaced != tc.wantReplaced || res.Count(reconcile.Replace) != tc.wantReplaced {
				t.Errorf("%s mode, one name added: %d of %d containers have new IDs (plan: %v); want %d",
					tc.mode.Names, replaced, len(before), outcomes(res), tc.wantReplaced)
			}
			for _, o := range res.Outcomes {
				if o.Kind == reconcile.Replace && !strings.Contains(o.Reason, "searxng.ace.mesh.internal") {
					t.Errorf("replacement reason %q does not name the added name", o.Reason)
				}
			}
		})
	}
}

// BenchmarkNoopPass is a pass over 50 running containers that match their
// declaration, against real podman: one List call, whatever the count.
//
//	MESHHOST_PODMAN_SOCKET=... go test -tags ... -run '^$' -bench NoopPass ./reconcile/podman/
func BenchmarkNoopPass(b *testing.B) {
	rt, h := newRuntime(b)
	trt := scoped(rt, h.Prefix())
	r := newReconciler(b, trt, func(c *reconcile.Config) { c.Concurrency = 8 })
	var desired []spec.Rendered
	for i := range 50 {
		c := sleeper("svc" + string(rune('a'+i/10)) + string(rune('0'+i%10)))
		c.Resources.PidsLimit = 100
		desired = append(desired, render(b, h, c, testRoster(b), spec.Mode{Names: spec.Copy}))
	}
	mustReconcile(b, r, desired)
	b.Run("pass", func(b *testing.B) {
		before := rt.Calls()
		b.ReportAllocs()
		for b.Loop() {
			res := mustReconcile(b, r, desired)
			if n := res.Count(reconcile.Keep); n != len(desired) {
				b.Fatalf("kept %d of %d", n, len(desired))
			}
		}
		b.StopTimer()
		after := rt.Calls()
		calls := int64(0)
		for m, n := range after {
			calls += n - before[m]
			if m != "List" && n != before[m] {
				b.Errorf("a no-op pass called %s %d times", m, n-before[m])
			}
		}
		b.ReportMetric(float64(calls)/float64(b.N), "apicalls/op")
	})
	// What the pass costs podman: its one List call alone.
	b.Run("list", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rt.List(ctx(b)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAdoptHandMadeContainer: a container made by hand with the podman CLI,
// with the declared settings, is adopted from Inspect's report rather than
// replaced.
func TestAdoptHandMadeContainer(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	trt := scoped(rt, h.Prefix())
	c := sleeper("legacy")
	c.Env = map[string]string{"A": "1"}
	c.StopSignal = "SIGINT"
	// Podman 5 grants no MKNOD by default, so it reports no drop of it:
	// the container still matches (see reconcile.Inspected.Capabilities).
	c.CapDrop = []string{"CHOWN", "MKNOD"}
	c.CapAdd = []string{"NET_ADMIN"}
	want := render(t, h, c, testRoster(t), spec.Mode{Names: spec.Copy})
	args := []string{"run", "-d", "--name", want.Name, "--stop-signal", "SIGINT", "-e", "A=1",
		"--cap-drop", "CHOWN,MKNOD", "--cap-add", "NET_ADMIN"}
	for _, e := range want.Hosts {
		args = append(args, "--add-host", e.Name+":"+e.Addr.String())
	}
	id := h.MustPodman(append(append(args, podmantest.Image), want.Command...)...)
	p, err := newReconciler(t, trt, nil).Plan(ctx(t), []spec.Rendered{want})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Actions[0]
	if a.Kind != reconcile.Adopt || a.ID != id {
		t.Errorf("plan for a hand-made container with the declared settings: %v; want adopt %s", a, id)
	}
	// And one holding a capability its declaration drops is not adopted.
	held := sleeper("held")
	held.CapDrop = []string{"CHOWN"}
	want = render(t, h, held, testRoster(t), spec.Mode{Names: spec.Copy})
	args = []string{"run", "-d", "--name", want.Name}
	for _, e := range want.Hosts {
		args = append(args, "--add-host", e.Name+":"+e.Addr.String())
	}
	h.MustPodman(append(append(args, podmantest.Image), want.Command...)...)
	if p, err = newReconciler(t, trt, nil).Plan(ctx(t), []spec.Rendered{want}); err != nil {
		t.Fatal(err)
	}
	if a := p.Actions[0]; a.Kind != reconcile.Conflict || !strings.Contains(a.Reason, "cap_drop") {
		t.Errorf("plan for a hand-made container holding CHOWN, declared without: %v; want a conflict naming cap_drop", a)
	}
}
