package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
)

// planDeclaration is a copy-mode declaration of three containers; web's
// env is role, and the roster holds names of n.internal.
func planDeclaration(gen uint64, role string, names int) []byte {
	var ns []string
	for i := range names {
		ns = append(ns, fmt.Sprintf(`"n%d.internal": ["10.9.0.%d"]`, i, i+1))
	}
	return []byte(fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "off",
	  "roster": {"generation": %d, "zones": ["internal"], "names": {%s}},
	  "containers": [{"name": "db", "image": "busybox"},
	                 {"name": "web", "image": "busybox", "env": {"ROLE": %q}, "depends_on": ["db"]},
	                 {"name": "cache", "image": "busybox"}]}`, gen, gen, strings.Join(ns, ","), role))
}

// TestPlanAgreesWithTheAgent pushes a declaration whose roster the guard
// holds (it drops half the names) and which changes one container's env,
// and checks that `meshhost plan` announces exactly what the agent's next
// pass then does, action for action: one replacement, of web, for its env.
// Rendering with the declared roster, as plan once did, announces every
// container replaced for its hosts in copy mode.
//
// It runs with the resolver in the agent's process, and as a service of
// its own fed over its control socket (meshhost-resolver, as the package
// runs it), whose roster is saved in its own state directory, not the
// agent's: plan reads the roster in force where the agent said its
// resolver is.
func TestPlanAgreesWithTheAgent(t *testing.T) {
	for _, setup := range []string{"embedded", "resolver-service"} {
		t.Run(setup, func(t *testing.T) { testPlanAgreesWithTheAgent(t, setup == "resolver-service") })
	}
}

// planResolver returns the resolver an agent on the state directory dir
// feeds: in its process, saving its roster in dir; or, as a service,
// meshhost-resolver's, saving its roster elsewhere, reached through its
// control socket.
func planResolver(t *testing.T, dir statedir.Dir, service bool) agent.Resolver {
	t.Helper()
	statePath := dir.Roster()
	if service {
		statePath = filepath.Join(t.TempDir(), "roster.json") // /var/lib/meshhost-resolver
	}
	srv, err := resolver.New(resolver.Config{StatePath: statePath, Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if !service {
		return srv
	}
	cs, err := control.NewServer(control.Config{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "mh-plan-") // short: a socket's path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "resolver.sock")
	l, err := control.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	go cs.Serve(l)
	t.Cleanup(func() { cs.Shutdown(context.Background()) })
	return control.NewClient(control.ClientConfig{Path: sock})
}

func testPlanAgreesWithTheAgent(t *testing.T, service bool) {
	state := t.TempDir()
	a, source, _, rt := planAgent(t, state, service)
	ctx := context.Background()
	if _, err := source.Offer(planDeclaration(1, "web", 12), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}

	next := planDeclaration(2, "frontend", 6) // drops 6 of 12 names: held
	var planned struct {
		Actions []actionJSON `json:"actions"`
		Roster  rosterJSON   `json:"roster"`
	}
	planJSON(t, rt, state, next, &planned)
	if planned.Roster.InForce != 1 || !strings.Contains(planned.Roster.Held, "drops 6 of 12 names") {
		t.Errorf("plan's roster = %+v, want generation 1 in force and generation 2 held", planned.Roster)
	}

	if _, err := source.Offer(next, "test"); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RosterHeld == "" {
		t.Fatal("the agent applied the roster the guard should hold")
	}
	type step struct{ Kind, Container, Reason string }
	var did, announced []step
	for _, o := range rep.Result.Outcomes {
		if o.Kind != reconcile.Keep {
			did = append(did, step{string(o.Kind), o.Name, o.Reason})
		}
	}
	for _, p := range planned.Actions {
		announced = append(announced, step{p.Kind, p.Container, p.Reason})
	}
	if diff := cmp.Diff(did, announced); diff != "" {
		t.Errorf("meshhost plan and the agent's pass differ (-agent +plan):\n%s", diff)
	}
	key, err := statedir.New(state).LoadHashKey()
	if err != nil {
		t.Fatal(err)
	}
	want := []step{{"replace", "web", "env: ~ROLE (" + key.ValueHash("web") + "→" + key.ValueHash("frontend") + ")"}}
	if diff := cmp.Diff(want, did); diff != "" {
		t.Errorf("the pass did (-want +got):\n%s", diff)
	}

	// explain renders the same way: web's only change is its env.
	file := filepath.Join(t.TempDir(), "next.json")
	if err := os.WriteFile(file, next, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
		openRuntime: func(context.Context, string) (reconcile.Runtime, bool, error) { return rt, false, nil }}
	if code := run(ctx, env, []string{"explain", "web", "--declaration", file, "--state", state}); code != 0 {
		t.Fatalf("meshhost explain web = exit %d\n%s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "web: keep") {
		t.Errorf("meshhost explain web after the pass = %q, want keep", out)
	}
}

// TestPlanOfADelta: `meshhost plan --declaration` takes a declaration
// delta too, as what the declaration the agent saved would become, and
// announces what the agent's pass then does with the same delta pushed
// (copy mode: every container replaced for its hosts); the journal's
// roster diff and history then name the change.
func TestPlanOfADelta(t *testing.T) {
	state := t.TempDir()
	a, source, _, rt := planAgent(t, state, false)
	ctx := context.Background()
	if _, err := source.Offer(planDeclaration(1, "web", 12), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	delta := []byte(`{"schema": 1, "machine": "ace", "generation": 2,
	  "roster_delta": {"from": 1, "generation": 2, "set": {"cache.internal": ["10.9.1.1"]}, "remove": ["n3.internal"]}}`)
	var planned struct {
		Actions []actionJSON `json:"actions"`
	}
	planJSON(t, rt, state, delta, &planned)
	if _, err := source.Offer(delta, "test"); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type step struct{ Kind, Container, Reason string }
	var did, announced []step
	for _, o := range rep.Result.Outcomes {
		if o.Kind != reconcile.Keep {
			did = append(did, step{string(o.Kind), o.Name, o.Reason})
		}
	}
	for _, p := range planned.Actions {
		announced = append(announced, step{p.Kind, p.Container, p.Reason})
	}
	if diff := cmp.Diff(did, announced); diff != "" || len(did) != 3 {
		t.Errorf("meshhost plan of the delta and the agent's pass differ (-agent +plan):\n%s\n(the pass did %v)", diff, did)
	}
	if !strings.Contains(fmt.Sprint(did), "hosts: +cache.internal=10.9.1.1 -n3.internal=10.9.0.4") {
		t.Errorf("replacements %v do not name the hosts changed", did)
	}

	var stdout, stderr bytes.Buffer
	env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := run(ctx, env, []string{"roster", "diff", "1", "2", "--state", state}); code != 0 {
		t.Fatalf("roster diff 1 2 = exit %d\n%s", code, stderr.String())
	}
	if got, want := stdout.String(), "+ cache.internal 10.9.1.1\n- n3.internal 10.9.0.4\n"; got != want {
		t.Errorf("roster diff 1 2 =\n%s\nwant\n%s", got, want)
	}
	stdout.Reset()
	if code := run(ctx, env, []string{"history", "--state", state}); code != 0 {
		t.Fatalf("history = exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "declaration 2: roster 2, 3 containers, mesh_names off; names +1 -1 ~0") {
		t.Errorf("history:\n%s", stdout.String())
	}
}

// TestPlanRefusesWithoutTheRosterInForce: plan renders with the roster the
// agent's resolver serves, or not at all. With nothing saying where that
// resolver is, or a resolver service that does not answer, it says so and
// plans nothing, rather than plan against no roster (which announces every
// copy-mode container replaced for its hosts); --resolver says where.
func TestPlanRefusesWithoutTheRosterInForce(t *testing.T) {
	state := t.TempDir()
	dir := statedir.New(state)
	file := filepath.Join(t.TempDir(), "decl.json")
	if err := os.WriteFile(file, planDeclaration(1, "web", 3), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := memory.New(memory.Options{})
	plan := func(extra ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
			openRuntime: func(context.Context, string) (reconcile.Runtime, bool, error) { return rt, false, nil }}
		code := run(context.Background(), env, append([]string{"plan", "--declaration", file, "--state", state}, extra...))
		return code, stdout.String() + stderr.String()
	}
	for _, tc := range []struct {
		name   string
		record string // STATE/resolver; "": none
		flags  []string
		code   int
		want   string
	}{
		{name: "no record", code: exitError, want: dir.Resolver() + " does not say where the agent's resolver is"},
		{name: "service down", record: "unix:" + filepath.Join(state, "gone.sock"), code: exitError,
			want: "no plan without the roster in force: reading the roster from the resolver service (--resolver unix:" + filepath.Join(state, "gone.sock") + "): the resolver's control socket does not answer"},
		{name: "unreadable record", record: "tcp:127.0.0.1:1", code: exitError, want: `--resolver "tcp:127.0.0.1:1": want embedded or unix:PATH`},
		{name: "flag", flags: []string{"--resolver", "embedded"}, code: exitChanges, want: "create   db"},
		{name: "flag over record", record: "unix:" + filepath.Join(state, "gone.sock"), flags: []string{"--resolver", "embedded"}, code: exitChanges, want: "create   db"},
		{name: "embedded, nothing served yet", record: "embedded", code: exitChanges, want: "create   db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(dir.Resolver())
			if tc.record != "" {
				if err := os.WriteFile(dir.Resolver(), []byte(tc.record+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out := plan(tc.flags...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("meshhost plan %v = exit %d, want %d and %q:\n%s", tc.flags, code, tc.code, tc.want, out)
			}
		})
	}
}

// planAgent is an agent of machine ace on the in-memory runtime with its
// state in state, its resolver embedded or a service of its own
// (planResolver), as plan finds it, and its journal in the state
// directory, as the agent keeps it; with its declaration source, gate and
// runtime.
func planAgent(t *testing.T, state string, service bool) (*agent.Agent, *declsource.Source, *migrations.Gate, *memory.Runtime) {
	t.Helper()
	dir := statedir.New(state)
	res := planResolver(t, dir, service)
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	rt := memory.New(memory.Options{})
	hashKey, err := dir.LoadHashKey() // as the agent: plan reads the same
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace", Budget: reconcile.Budget{Max: 100, Window: time.Minute}, HashKey: hashKey})
	if err != nil {
		t.Fatal(err)
	}
	jnl, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	source := declsource.New(declsource.Config{Machine: "ace"})
	a, err := agent.New(agent.Config{Runtime: rt, Reconciler: rec, Resolver: res, Gate: gate, Source: source, State: dir, Journal: jnl})
	if err != nil {
		t.Fatal(err)
	}
	return a, source, gate, rt
}

// planJSON runs `meshhost plan --output json` of the declaration doc on
// the state directory state and the runtime rt, wants exit 2 (changes),
// and reads its output into out.
func planJSON(t *testing.T, rt reconcile.Runtime, state string, doc []byte, out any) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "declaration.json")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
		openRuntime: func(context.Context, string) (reconcile.Runtime, bool, error) { return rt, false, nil }}
	if code := run(context.Background(), env, []string{"plan", "--declaration", file, "--state", state, "--output", "json"}); code != 2 {
		t.Fatalf("meshhost plan = exit %d, want 2 (changes)\n%s%s", code, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("plan output: %v\n%s", err, stdout.String())
	}
}
