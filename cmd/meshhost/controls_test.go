package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// controlsFixture is an agent on the in-memory runtime, in-process, with a
// journal, its push endpoint on a unix socket, and --hold-above 2; cli runs
// meshhost commands against its state directory and runtime.
type controlsFixture struct {
	t      *testing.T
	state  string
	rt     *memory.Runtime
	agent  *agent.Agent
	source *declsource.Source
	push   string
	logs   *syncbuf.Buffer      // every component's log
	reg    *prometheus.Registry // every component's metrics
}

func newControlsFixture(t *testing.T) *controlsFixture {
	t.Helper()
	state := t.TempDir()
	dir := statedir.New(state)
	logs, reg := &syncbuf.Buffer{}, prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := resolver.New(resolver.Config{StatePath: dir.Roster(), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}, Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace", Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rt := memory.New(memory.Options{})
	hashKey, err := dir.LoadHashKey() // as the agent: plan and explain read the same
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace", Budget: reconcile.Budget{Max: 100, Window: time.Minute}, Logger: logger, Registerer: reg,
		Frozen: func() bool { f, _ := agent.Frozen(dir); return f != nil }, HashKey: hashKey})
	if err != nil {
		t.Fatal(err)
	}
	jnl, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	source := declsource.New(declsource.Config{Machine: "ace", Logger: logger, Registerer: reg})
	a, err := agent.New(agent.Config{Runtime: rt, Reconciler: rec, Resolver: srv, Gate: gate, Source: source, State: dir, Journal: jnl, HoldAbove: 2,
		Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	push := filepath.Join(state, "push.sock")
	l, err := declsource.Listen("unix:"+push, declsource.Access{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: source.Handler()}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return &controlsFixture{t: t, state: state, rt: rt, agent: a, source: source, push: push, logs: logs, reg: reg}
}

// cli runs `meshhost args... --state STATE` and returns its exit code and
// output.
func (f *controlsFixture) cli(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
		openRuntime: func(context.Context, string) (reconcile.Runtime, bool, error) { return f.rt, true, nil }}
	code := run(context.Background(), env, append(args, "--state", f.state))
	return code, stdout.String(), stderr.String()
}

func (f *controlsFixture) offer(doc []byte) {
	f.t.Helper()
	if _, err := f.source.Offer(doc, "test"); err != nil {
		f.t.Fatal(err)
	}
}

func (f *controlsFixture) pass() *agent.Report {
	f.t.Helper()
	rep, err := f.agent.Pass(context.Background())
	if err != nil {
		f.t.Fatalf("Pass: %v", err)
	}
	return rep
}

func (f *controlsFixture) images() string {
	var out []string
	for _, c := range f.rt.Containers() {
		out = append(out, c.Name+"="+c.Settings.Image)
	}
	return strings.Join(out, " ")
}

// controlsDecl is a copy-mode declaration of db, web and cache running
// image, with a roster of its generation.
func controlsDecl(gen int, image string) []byte {
	return []byte(fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "off",
	  "roster": {"generation": %d, "zones": ["internal"], "names": {"a.internal": ["10.9.0.1"]}},
	  "containers": [{"name": "db", "image": %q}, {"name": "web", "image": %q}, {"name": "cache", "image": %q}]}`, gen, gen, image, image, image))
}

// TestHoldThroughTheCommands: a declaration held for its blast radius is
// shown the same by meshhost plan (computed by the same pipeline), the
// agent's report and meshhost status; meshhost approve releases it.
func TestHoldThroughTheCommands(t *testing.T) {
	f := newControlsFixture(t)
	f.offer(controlsDecl(1, "busybox:1"))
	f.pass()
	next := controlsDecl(2, "busybox:2")
	file := filepath.Join(t.TempDir(), "next.json")
	if err := os.WriteFile(file, next, 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := f.cli("plan", "--declaration", file, "--hold-above", "2", "--output", "json")
	if code != 2 {
		t.Fatalf("plan = exit %d: %s%s", code, out, errOut)
	}
	var planned struct {
		Held *struct {
			Generation   uint64
			HoldAbove    int `json:"hold_above"`
			Replacements []struct{ Container, Reason string }
		} `json:"held"`
	}
	if err := json.Unmarshal([]byte(out), &planned); err != nil || planned.Held == nil || len(planned.Held.Replacements) != 3 || planned.Held.Generation != 2 {
		t.Fatalf("plan --output json = %s (%v), want declaration 2 held for 3 replacements", out, err)
	}
	if _, text, _ := f.cli("plan", "--declaration", file, "--hold-above", "2"); !strings.Contains(text, "declaration 2 held: it would replace 3 containers, more than --hold-above 2") {
		t.Errorf("plan's text does not show the hold:\n%s", text)
	}

	f.offer(next)
	rep := f.pass()
	if !rep.Held.Held() || f.images() != "cache=busybox:1 db=busybox:1 web=busybox:1" {
		t.Fatalf("the agent: held %+v, containers %s; want held and nothing replaced", rep.Held, f.images())
	}
	// Without --hold-above, plan judges by the agent's, from status.json.
	if _, text, _ := f.cli("plan"); !strings.Contains(text, "declaration 2 held") {
		t.Errorf("plan with the agent's --hold-above does not show the hold:\n%s", text)
	}
	code, out, _ = f.cli("status", "--output", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Held.Held() || st.HoldAbove != 2 || st.Generation != 2 {
		t.Errorf("status --output json = %d %s, want declaration 2 held, hold_above 2", code, out)
	}
	if _, text, _ := f.cli("status"); !strings.Contains(text, "HELD: declaration 2 held") || !strings.Contains(text, "replace web: image: busybox:1 -> busybox:2") {
		t.Errorf("status does not show the hold and what it replaces:\n%s", text)
	}

	if code, out, errOut := f.cli("approve", "2"); code != 0 || !strings.Contains(out, "declaration 2 approved") {
		t.Fatalf("approve 2 = %d %s%s", code, out, errOut)
	}
	rep = f.pass()
	if rep.Held == nil || !rep.Held.Approved || f.images() != "cache=busybox:2 db=busybox:2 web=busybox:2" {
		t.Errorf("after approve: hold %+v, containers %s; want approved and applied", rep.Held, f.images())
	}
}

// TestFreezeAndRollbackThroughTheCommands: meshhost freeze stops every
// change (the roster still goes in force), unfreeze lets it go; meshhost
// rollback re-issues a journaled declaration as a new generation, which the
// agent applies through the same plan.
func TestFreezeAndRollbackThroughTheCommands(t *testing.T) {
	f := newControlsFixture(t)
	f.offer(controlsDecl(1, "busybox:1"))
	f.pass()
	if code, out, errOut := f.cli("freeze", "--reason", "incident 42"); code != 0 {
		t.Fatalf("freeze = %d %s%s", code, out, errOut)
	}
	f.offer([]byte(strings.Replace(string(controlsDecl(2, "busybox:1")), `{"name": "web", "image": "busybox:1"}`, `{"name": "web", "image": "busybox:2"}`, 1)))
	if rep := f.pass(); !rep.Frozen || rep.RosterGeneration != 2 {
		t.Fatalf("frozen pass: frozen %v, roster %d; want frozen with roster 2 in force", rep.Frozen, rep.RosterGeneration)
	}
	if got := f.images(); got != "cache=busybox:1 db=busybox:1 web=busybox:1" {
		t.Errorf("frozen, the containers changed: %s", got)
	}
	if _, text, _ := f.cli("status"); !strings.Contains(text, "FROZEN since") || !strings.Contains(text, "incident 42") {
		t.Errorf("status does not show the freeze:\n%s", text)
	}
	if _, text, _ := f.cli("plan"); !strings.Contains(text, "the machine is frozen") {
		t.Errorf("plan does not say the machine is frozen:\n%s", text)
	}
	if code, _, _ := f.cli("unfreeze"); code != 0 {
		t.Fatal("unfreeze failed")
	}
	f.pass()
	if got := f.images(); got != "cache=busybox:1 db=busybox:1 web=busybox:2" {
		t.Fatalf("unfrozen, containers %s; want web on busybox:2", got)
	}

	// Roll back to declaration 1: generation 3, web back on busybox:1,
	// roster 2 kept.
	code, out, errOut := f.cli("rollback", "1", "--push", "unix:"+f.push)
	if code != 0 || !strings.Contains(out, "declaration 3 pushed") {
		t.Fatalf("rollback 1 = %d %s%s", code, out, errOut)
	}
	rep := f.pass()
	if rep.Generation != 3 || rep.RosterGeneration != 2 || f.images() != "cache=busybox:1 db=busybox:1 web=busybox:1" {
		t.Errorf("after rollback: declaration %d roster %d containers %s; want 3, 2, web on busybox:1", rep.Generation, rep.RosterGeneration, f.images())
	}
	if code, _, errOut := f.cli("rollback", "9", "--push", "unix:"+f.push); code != 1 || !strings.Contains(errOut, "not in the journal") {
		t.Errorf("rollback 9 = %d %s, want an error: not in the journal", code, errOut)
	}
}

// TestControlsRefuseAMissingStateDir: a typo in --state is an error, not a
// new state directory the agent never reads.
func TestControlsRefuseAMissingStateDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{{"status"}, {"approve", "3"}, {"freeze"}, {"unfreeze"}, {"rollback", "2"}} {
		var stdout, stderr bytes.Buffer
		env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
		code := run(context.Background(), env, append(args, "--state", missing))
		if code != 1 || !strings.Contains(stderr.String(), "does not exist") {
			t.Errorf("meshhost %v --state %s = %d %s, want 1: does not exist", args, missing, code, stderr.String())
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("meshhost %v made the state directory", args)
		}
	}
}

// TestApproveOnlyTheHeld: meshhost approve GEN refuses (exit 1, a JSON
// error with --output json) any generation but the one held, saying what
// is held, and records nothing: approving a generation not held yet once
// let its push skip the hold unseen.
func TestApproveOnlyTheHeld(t *testing.T) {
	f := newControlsFixture(t)
	approved := func() uint64 { return agent.ApprovedDeclaration(statedir.New(f.state)) }
	steps := []struct {
		name   string
		before func()
		gen    string
		code   int
		error  string // with --output json; "" for none
	}{
		{name: "no status yet", gen: "1", code: 1,
			error: "declaration 1 is not held: the agent has written no status in " + f.state + " yet, so nothing is (meshhost status)"},
		{name: "nothing held", before: func() { f.offer(controlsDecl(1, "busybox:1")); f.pass() }, gen: "1", code: 1,
			error: "declaration 1 is not held: nothing is (declaration 1 is in force; meshhost status)"},
		{name: "a future generation", gen: "2", code: 1,
			error: "declaration 2 is not held: nothing is (declaration 1 is in force; meshhost status)"},
		{name: "another generation than the one held", before: func() { f.offer(controlsDecl(2, "busybox:2")); f.pass() }, gen: "3", code: 1,
			error: "declaration 3 is not held: the declaration held is 2 (meshhost status shows what it would change)"},
		{name: "the one held", gen: "2", code: 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			was := approved()
			code, out, errOut := f.cli("approve", st.gen, "--output", "json")
			if code != st.code {
				t.Fatalf("approve %s = exit %d, want %d\n%s%s", st.gen, code, st.code, out, errOut)
			}
			if st.code == 0 {
				if got := approved(); fmt.Sprint(got) != st.gen {
					t.Errorf("approved after approve %s = %d", st.gen, got)
				}
				return
			}
			var got struct{ Error string }
			if err := json.Unmarshal([]byte(out), &got); err != nil || got.Error != st.error {
				t.Errorf("approve %s --output json = %s (%v), want the error %q", st.gen, out, err, st.error)
			}
			if now := approved(); now != was {
				t.Errorf("a refused approve %s recorded approval %d (was %d)", st.gen, now, was)
			}
		})
	}
	// The refused pre-approval of 2 did not let 2 skip the hold, and the
	// approval of the one held lets it go ahead.
	if rep := f.pass(); rep.Held == nil || !rep.Held.Approved || f.images() != "cache=busybox:2 db=busybox:2 web=busybox:2" {
		t.Errorf("after approve 2: hold %+v, containers %s; want approved and applied", rep.Held, f.images())
	}
}

// TestHoldOfRemovalsThroughTheCommands: a declaration removing every
// container is held, and meshhost status and plan say what it would
// remove.
func TestHoldOfRemovalsThroughTheCommands(t *testing.T) {
	f := newControlsFixture(t)
	f.offer(controlsDecl(1, "busybox:1"))
	f.pass()
	f.offer([]byte(`{"schema": 1, "machine": "ace", "generation": 2, "mesh_names": "off",
	  "roster": {"generation": 2, "zones": ["internal"], "names": {"a.internal": ["10.9.0.1"]}}, "containers": []}`))
	if rep := f.pass(); !rep.Held.Held() || f.images() != "cache=busybox:1 db=busybox:1 web=busybox:1" {
		t.Fatalf("the agent: held %+v, containers %s; want held and nothing removed", rep.Held, f.images())
	}
	held := "declaration 2 held: it would remove 3 containers, more than --hold-above 2"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"status"}, []string{"HELD: " + held, "  remove db: no longer declared", "  remove web: no longer declared"}},
		{[]string{"plan"}, []string{held}},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			_, out, errOut := f.cli(tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("meshhost %v does not say %q:\n%s%s", tc.args, w, out, errOut)
				}
			}
		})
	}
}

// TestMigratePauseResumeSay: migrate pause and resume say what they did
// (they printed nothing, and nothing with --output json either).
func TestMigratePauseResumeSay(t *testing.T) {
	f := newControlsFixture(t)
	for _, tc := range []struct{ sub, want string }{
		{"pause", "migration paused: no container changes its name mode"},
		{"pause", "migration paused"}, // again: still paused, no fault
		{"resume", "migration resumed"},
	} {
		t.Run(tc.sub, func(t *testing.T) {
			if code, out, errOut := f.cli("migrate", tc.sub); code != 0 || !strings.HasPrefix(out, tc.want) {
				t.Errorf("migrate %s = exit %d, %q%s; want 0 and %q", tc.sub, code, out, errOut, tc.want)
			}
		})
	}
}
