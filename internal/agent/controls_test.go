package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// declarationEnv is declaration() whose containers' env holds E=env.
func declarationEnv(gen uint64, flag spec.MeshNamesFlag, containers, names int, env string) []byte {
	return decl(gen, flag, containers, names).Env("E", env).JSON()
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// pendingHeld is meshhost_reconcile_replacements_pending{reason="held"},
// what the alert on a blast-radius hold reads.
func pendingHeld(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshhost_reconcile_replacements_pending" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reconcile.PendingHeld {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatal(`no meshhost_reconcile_replacements_pending{reason="held"}`)
	return 0
}

// holdFixture is an agent on the in-memory runtime holding declarations
// that replace more than 3 containers, with a budget of 2 replacements a
// window.
func holdFixture(t *testing.T) (*fixture, *prometheus.Registry, *syncbuf.Buffer) {
	reg := prometheus.NewRegistry()
	logs := &syncbuf.Buffer{}
	f := newFixture(t, true, func(c *Config) {
		c.HoldAbove, c.Registerer, c.Logger = 3, reg, newTextLogger(logs)
		rec, err := reconcile.New(reconcile.Config{Runtime: c.Runtime, Owner: "ace", Budget: reconcile.Budget{Max: 2, Window: time.Hour}, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		c.Reconciler = rec
	})
	return f, reg, logs
}

// TestBlastRadiusHold: a declaration whose plan replaces more than
// HoldAbove containers is not applied (the containers stay, the roster is
// served), and says so in the report, the metrics, status.json and one log
// line; a newer declaration is judged afresh; meshhost approve releases
// it, and the budget still paces it.
func TestBlastRadiusHold(t *testing.T) {
	f, reg, logs := holdFixture(t)
	ctx := context.Background()
	f.push(t, declarationEnv(1, spec.FlagOn, 6, 10, "a")) // six creates: none held
	before := ids(f.rt)

	// 2: every container's env changes: six replacements, more than 3.
	rep := f.push(t, declarationEnv(2, spec.FlagOn, 6, 11, "b"))
	if !rep.Held.Held() || rep.Held.Generation != 2 || len(rep.Held.Replacements) != 6 {
		t.Fatalf("report's hold = %+v, want declaration 2 held for 6 replacements", rep.Held)
	}
	if r := rep.Held.Replacements[0]; r.Container != "app0" || !strings.HasPrefix(r.Reason, "env: ~E (") {
		t.Errorf("first replacement = %+v, want app0 for its env", r)
	}
	if n := replaced(before, ids(f.rt)); n != 0 || len(ids(f.rt)) != 6 {
		t.Errorf("a held declaration replaced %d containers", n)
	}
	if got := f.srv.Roster().Generation; got != 2 {
		t.Errorf("the resolver serves roster %d, want 2: a hold holds containers, never names", got)
	}
	if _, err := f.agent.Pass(ctx); err != nil { // a second pass: still held, logged once
		t.Fatal(err)
	}
	if g, r, p := gauge(t, reg, "meshhost_agent_declaration_held"), gauge(t, reg, "meshhost_agent_held_replacements"), pendingHeld(t, reg); g != 1 || r != 6 || p != 6 {
		t.Errorf("held metrics = %v, %v, pending held %v; want 1, 6, 6", g, r, p)
	}
	if n := strings.Count(logs.String(), "declaration 2 held: it would replace 6 containers, more than --hold-above 3"); n != 1 {
		t.Errorf("the hold was logged %d times, want once:\n%s", n, logs)
	}
	if l := logLine(logs.String(), "declaration 2 held"); !strings.Contains(l, "level=WARN") {
		t.Errorf("the hold's line: %q, want level=WARN (waiting for an operator is no error)", l)
	}
	st, err := LoadStatus(statedir.New(f.state))
	if err != nil || st == nil || !st.Held.Held() || st.Held.Generation != 2 || st.HoldAbove != 3 {
		t.Errorf("status.json = %+v, %v; want declaration 2 held, hold_above 3", st, err)
	}

	// 3: a newer declaration replaces the held one and is judged afresh:
	// two containers change, within the hold, and are applied.
	rep = f.push(t, decl(3, spec.FlagOn, 6, 12).Env("E", "a").AppEnv("app0", "E", "c").AppEnv("app1", "E", "c").JSON())
	if rep.Held != nil {
		t.Fatalf("declaration 3 replaces 2 containers and is held: %+v", rep.Held)
	}
	if n := replaced(before, ids(f.rt)); n != 2 {
		t.Errorf("declaration 3 replaced %d containers, want 2", n)
	}
	if g, p := gauge(t, reg, "meshhost_agent_declaration_held"), pendingHeld(t, reg); g != 0 || p != 0 {
		t.Errorf("meshhost_agent_declaration_held = %v, pending held %v after the hold lifted", g, p)
	}

	// 4: six replacements again: held, until approved; then the budget
	// (2 a window, spent by declaration 3) paces it.
	before = ids(f.rt)
	if rep = f.push(t, declarationEnv(4, spec.FlagOn, 6, 13, "d")); !rep.Held.Held() {
		t.Fatalf("declaration 4 not held: %+v", rep.Held)
	}
	if err := ApproveDeclaration(statedir.New(f.state), 4); err != nil {
		t.Fatal(err)
	}
	rep, err = f.agent.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Held == nil || !rep.Held.Approved || rep.Result == nil {
		t.Fatalf("after approve 4: hold %+v, result %v; want approved and applied", rep.Held, rep.Result)
	}
	if n := replaced(before, ids(f.rt)); n != 0 || rep.Result.Deferred != 6 {
		t.Errorf("approved with the budget spent: %d replaced, %d deferred; want 0 and 6 (the budget paces an approved declaration)", n, rep.Result.Deferred)
	}
	if l := logLine(logs.String(), "held declaration approved by the operator"); !strings.Contains(l, "level=INFO") {
		t.Errorf("the approval's line: %q, want level=INFO (an operator's decision, carried out)\n%s", l, logs)
	}
}

// TestBlastRadiusHoldCounts: what a plan does to a container counts
// against HoldAbove whatever it is: a declaration that removes every
// container is held as one that replaces them (it was neither held nor
// paced), and says so in the report, the metrics and the log line, and
// approved, the budget paces its removals; switching the flag from off to
// on replaces every container once (copy to resolve mode): a blast radius
// like any other, held too.
func TestBlastRadiusHoldCounts(t *testing.T) {
	for _, tc := range []struct {
		pushCase
		then func(t *testing.T, f *fixture, reg *prometheus.Registry, logs *syncbuf.Buffer)
	}{
		{pushCase: pushCase{name: "Removals",
			before:   []decltest.Doc{decl(1, spec.FlagOn, 6, 10).Env("E", "a")},
			push:     decl(2, spec.FlagOn, 0, 10),
			wantHeld: &heldWant{removals: 6}, wantRoster: 2, wantContainers: 6,
		}, then: func(t *testing.T, f *fixture, reg *prometheus.Registry, logs *syncbuf.Buffer) {
			if g, r, m, p := gauge(t, reg, "meshhost_agent_declaration_held"), gauge(t, reg, "meshhost_agent_held_replacements"),
				gauge(t, reg, "meshhost_agent_held_removals"), pendingHeld(t, reg); g != 1 || r != 0 || m != 6 || p != 6 {
				t.Errorf("held metrics = held %v, replacements %v, removals %v, pending held %v; want 1, 0, 6, 6", g, r, m, p)
			}
			for _, want := range []string{"declaration 2 held: it would remove 6 containers, more than --hold-above 3", "removals=6", "removed=app5,app4,app3,app2,app1,app0"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the hold's log line does not say %q:\n%s", want, logs)
				}
			}
			if err := ApproveDeclaration(statedir.New(f.state), 2); err != nil {
				t.Fatal(err)
			}
			rep := f.pass(t)
			if rep.Result == nil || rep.Result.Count(reconcile.Remove) != 2 || rep.Result.Deferred != 4 || len(ids(f.rt)) != 4 {
				t.Errorf("approved, with a budget of 2: result %+v, %d containers left; want 2 removed, 4 deferred", rep.Result, len(ids(f.rt)))
			}
		}},
		{pushCase: pushCase{name: "TheMigrationSwitch",
			before:   []decltest.Doc{decl(1, spec.FlagOff, 5, 10).Env("E", "a")},
			push:     decl(2, spec.FlagOn, 5, 10).Env("E", "a"),
			wantHeld: &heldWant{replacements: 5, reason: []string{"dns", "hosts"}}, wantContainers: 5,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, reg, logs := holdFixture(t)
			runPush(t, f, tc.pushCase)
			if tc.then != nil {
				tc.then(t, f, reg, logs)
			}
		})
	}
}

// TestFreeze: while the machine is frozen no container is created,
// replaced or removed, and the resolver keeps serving every roster the
// machine receives; unfrozen, the declaration in force is applied.
func TestFreeze(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, true, func(c *Config) { c.Registerer = reg })
	f.push(t, declarationEnv(1, spec.FlagOn, 3, 10, "a"))
	before := ids(f.rt)
	dir := statedir.New(f.state)
	if err := SetFrozen(dir, &Freeze{Since: time.Now(), Reason: "incident 42"}); err != nil {
		t.Fatal(err)
	}
	// 2: app0's env changes, app2 goes, app3 comes, and the roster moves.
	rep := f.push(t, decl(2, spec.FlagOn, 4, 11).Env("E", "a").AppEnv("app0", "E", "z").Drop("app2").JSON())
	if !rep.Frozen || rep.Result != nil {
		t.Fatalf("frozen pass: frozen %v, result %v; want frozen and nothing applied", rep.Frozen, rep.Result)
	}
	if got := ids(f.rt); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("frozen, the containers changed: %v -> %v", before, got)
	}
	if got := f.srv.Roster(); got.Generation != 2 || len(got.Names) != 11 {
		t.Errorf("frozen, the resolver serves roster %d with %d names, want 2 with 11", got.Generation, len(got.Names))
	}
	if g := gauge(t, reg, "meshhost_agent_frozen"); g != 1 {
		t.Errorf("meshhost_agent_frozen = %v, want 1", g)
	}
	if err := SetFrozen(dir, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := f.agent.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := ids(f.rt)
	if _, ok := got["app3"]; !ok || len(got) != 3 || got["app0"] == before["app0"] || got["app1"] != before["app1"] {
		t.Errorf("unfrozen: containers %v (before %v); want app0 replaced, app2 removed, app3 created", got, before)
	}
	if rep.Frozen || gauge(t, reg, "meshhost_agent_frozen") != 0 {
		t.Errorf("unfrozen, the report or the metric still says frozen")
	}
}

func newTextLogger(w *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestRefusedCountedByNetwork: the agent names the runtime's networks to
// its resolver, embedded or a service of its own behind its control socket
// (as the package runs it), so the refused-clients counter of each network
// exists, at 0, from the first pass.
func TestRefusedCountedByNetwork(t *testing.T) {
	for _, service := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "resolver-service"}[service], func(t *testing.T) {
			reg := prometheus.NewRegistry()
			srv, err := resolver.New(resolver.Config{Registerer: reg, Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			f := newFixture(t, true, func(c *Config) {
				c.Resolver = srv
				if service {
					sock := filepath.Join(t.TempDir(), "resolver.sock")
					var svc controlService
					svc.serve(t, sock, srv)
					c.Resolver = control.NewClient(control.ClientConfig{Path: sock, Timeout: 5 * time.Second})
				}
			})
			f.push(t, declaration(1, spec.FlagOn, 1, 3))
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				if mf.GetName() == "meshhost_resolver_refused_total" {
					for _, m := range mf.GetMetric() {
						got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
			if v, ok := got["podman"]; !ok || v != 0 {
				t.Errorf("meshhost_resolver_refused_total = %v, want podman (the runtime's network) at 0", got)
			}
		})
	}
}

// TestLoadStatusReadsEveryVersion: status.json as every meshhost since
// version 1 wrote it reads (a version 1 file, from before the upgrade,
// with the generations it no longer has); a newer version, or a file
// that is not one, is refused naming the file.
func TestLoadStatusReadsEveryVersion(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       *Status // nil: refused
	}{
		{"version 1", `{"version":1,"hold_above":3,"generation":7,"roster_generation":9,"held":{"generation":7,"hold_above":3}}`,
			&Status{Version: 1, HoldAbove: 3, Held: &pass.Hold{Generation: 7, HoldAbove: 3}}},
		{"version 2", `{"version":2,"hold_above":5,"frozen":true}`, &Status{Version: 2, HoldAbove: 5, Frozen: true}},
		{"version 3", `{"version":3,"hold_above":5}`, nil},
		{"no version", `{"hold_above":5}`, nil},
		{"empty", ``, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := statedir.New(t.TempDir())
			if err := os.WriteFile(dir.Status(), []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := LoadStatus(dir)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), dir.Status()) {
					t.Errorf("LoadStatus = %+v, %v; want an error naming %s", st, err, dir.Status())
				}
				return
			}
			if err != nil || st == nil || st.Version != tc.want.Version || st.HoldAbove != tc.want.HoldAbove || st.Frozen != tc.want.Frozen ||
				(st.Held == nil) != (tc.want.Held == nil) || st.Held != nil && st.Held.Generation != tc.want.Held.Generation {
				t.Errorf("LoadStatus = %+v, %v; want %+v", st, err, tc.want)
			}
		})
	}
}

// logLine returns the first line of logs holding s, or "".
func logLine(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
