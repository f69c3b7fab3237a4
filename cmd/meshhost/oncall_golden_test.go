package main

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
)

// newOncallFixture is newControlsFixture with a budget of budget
// replacements an hour, and no push endpoint.
func newOncallFixture(t *testing.T, budget int) *controlsFixture {
	t.Helper()
	state := t.TempDir()
	dir := statedir.New(state)
	logs, reg := &syncbuf.Buffer{}, prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(logs, nil))
	srv, err := resolver.New(resolver.Config{StatePath: dir.Roster(), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	nets := []migrations.Network{{Name: "podman", Driver: "bridge", Subnets: []migrations.Subnet{{
		Prefix: netip.MustParsePrefix("10.88.0.0/16"), Gateway: netip.MustParseAddr("10.88.0.1")}}}}
	if _, err := gate.Observe(nets); err != nil {
		t.Fatal(err)
	}
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace", Budget: reconcile.Budget{Max: budget, Window: time.Hour}, Logger: logger,
		Frozen: func() bool { f, _ := agent.Frozen(dir); return f != nil }})
	if err != nil {
		t.Fatal(err)
	}
	jnl, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	source := declsource.New(declsource.Config{Machine: "ace", Logger: logger})
	a, err := agent.New(agent.Config{Runtime: rt, Reconciler: rec, Resolver: srv, Gate: gate, Source: source, State: dir, Journal: jnl, HoldAbove: 2,
		Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &controlsFixture{t: t, state: state, rt: rt, agent: a, source: source, logs: logs, reg: reg}
}

// oncallNormalize makes text output comparable across runs: times,
// durations and the state directory's path replaced by placeholders.
func oncallNormalize(out, state string) string {
	out = strings.ReplaceAll(out, state, "<state>")
	out = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`).ReplaceAllString(out, "<time>")
	return regexp.MustCompile(` in [0-9.]+[µnm]?s`).ReplaceAllString(out, " in <d>")
}

// TestGoldenOncall reads status and history, text and JSON, through a
// rollout as on-call meets it: applied; held for its blast radius; approved
// while frozen; frozen; unfrozen and paced by the budget (some replacements
// deferred) while the roster guard holds a roster; and compares each with
// testdata/golden/oncall-NAME (go test -run TestGoldenOncall -update
// rewrites them). Each hold shows the command that releases it, the last
// pass its number, result and deferred actions, the history what each pass
// did apart from what it deferred, and the holds and releases as entries.
func TestGoldenOncall(t *testing.T) {
	f := newOncallFixture(t, 2)
	dir := statedir.New(f.state)
	f.offer(controlsDecl(1, "busybox:1"))
	f.pass() // 1: three creates
	steps := []struct {
		name string
		args []string
		then func()
	}{
		{name: "status-applied.txt", args: []string{"status"}, then: func() { f.offer(controlsDecl(2, "busybox:2")); f.pass() }}, // 2: held
		{name: "status-held.txt", args: []string{"status"}, then: func() {
			if err := agent.SetFrozen(dir, &agent.Freeze{Reason: "incident 7"}); err != nil {
				t.Fatal(err)
			}
			if err := agent.ApproveDeclaration(dir, 2); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "status-approved-frozen.txt", args: []string{"status"}, then: func() { f.pass() }}, // 3: frozen
		{name: "status-frozen.txt", args: []string{"status"}, then: func() {
			if err := agent.SetFrozen(dir, nil); err != nil {
				t.Fatal(err)
			}
			f.pass() // 4: unfrozen, approved: two replacements, one deferred
			if err := os.WriteFile(dir.RosterHeld(), []byte(`{"served":2,"newest":3}`+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "status-deferred.txt", args: []string{"status"}},
		{name: "status-deferred.json", args: []string{"status", "--output", "json"}},
		{name: "history.txt", args: []string{"history"}},
	}
	for _, st := range steps {
		code, out, errOut := f.cli(st.args...)
		if code != 0 {
			t.Errorf("meshhost %v = exit %d\n%s%s", st.args, code, out, errOut)
		}
		got := oncallNormalize(out, f.state)
		if strings.HasSuffix(st.name, ".json") {
			got = goldenNormalize(t, out, f.state)
		}
		path := filepath.Join("testdata", "golden", "oncall-"+st.name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if want, err := os.ReadFile(path); err != nil {
			t.Errorf("%s: %v (run go test -run TestGoldenOncall -update)", st.name, err)
		} else if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("meshhost %v (-want +got):\n%s", st.args, diff)
		}
		if st.then != nil {
			st.then()
		}
	}
}
