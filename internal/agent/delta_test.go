package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// deltaDoc is decltest.Delta(gen, from, to) setting set (name -> address)
// and removing remove.
func deltaDoc(gen, from, to uint64, set map[string]string, remove ...string) []byte {
	return decltest.Delta(gen, from, to).SetMap(set).Remove(remove...).JSON()
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

var cmpRoster = []cmp.Option{cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmpopts.EquateEmpty()}

// TestDeltaPush: a declaration delta puts its names in force (and takes
// removed ones out) without replacing a container; the declaration saved
// is the whole one plus a log of deltas, and reads back as the Source's;
// the journal records each delta's diff, and roster diff composes them; a
// restarted agent goes on from there with the next delta.
func TestDeltaPush(t *testing.T) {
	jdir := t.TempDir()
	j, err := journal.Open(jdir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Journal = j })
	f.push(t, declaration(1, spec.FlagOn, 5, 100))
	before := ids(f.rt)
	declBefore, _ := readFile(statedir.New(f.state).Declaration())

	rep := f.push(t, deltaDoc(2, 1, 2, map[string]string{"new.internal": "10.99.0.1", "svc3.node3.internal": "10.99.0.3"}, "svc7.node7.internal"))
	if rep.RosterGeneration != 2 {
		t.Fatalf("roster in force %d after the delta, want 2", rep.RosterGeneration)
	}
	rep = f.push(t, deltaDoc(3, 2, 3, map[string]string{"newer.internal": "10.99.0.2"}))
	served := f.srv.Roster()
	want, _ := f.source.Roster()
	if diff := cmp.Diff(want, served, cmpRoster...); diff != "" {
		t.Fatalf("the resolver serves (-declared +served):\n%s", diff)
	}
	if served.Generation != 3 || !slices.Equal(served.Names["svc3.node3.internal"], []netip.Addr{netip.MustParseAddr("10.99.0.3")}) || served.Names["svc7.node7.internal"] != nil {
		t.Fatalf("served roster %d: svc3 %v svc7 %v", served.Generation, served.Names["svc3.node3.internal"], served.Names["svc7.node7.internal"])
	}
	if n := replaced(before, ids(f.rt)); n != 0 {
		t.Errorf("roster deltas replaced %d containers, want 0", n)
	}
	if after, _ := readFile(statedir.New(f.state).Declaration()); after != declBefore {
		t.Error("a delta rewrote declaration.json; want it appended to the declaration's log")
	}
	sv, err := LoadSaved(statedir.New(f.state))
	if err != nil || sv.broken {
		t.Fatalf("LoadSaved = %+v, %v", sv, err)
	}
	saved := sv.Declaration
	cur, _ := f.source.Current()
	if diff := cmp.Diff(cur, saved, cmpRoster...); diff != "" {
		t.Fatalf("LoadDeclaration (-in force +saved):\n%s", diff)
	}

	// The journal: each delta's diff, and roster diff across them.
	decls, _ := j.Declarations()
	var got []string
	for _, d := range decls {
		got = append(got, journal.Entry{Declaration: &d}.String()[21:])
	}
	wantLog := []string{
		"declaration 1: roster 1, 5 containers, mesh_names on; names +100 -0 ~0",
		"declaration 2: roster 2, 5 containers, mesh_names on; names +1 -1 ~1",
		"declaration 3: roster 3, 5 containers, mesh_names on; names +1 -0 ~0",
	}
	if diff := cmp.Diff(wantLog, got); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
	d, err := j.RosterDiff(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.String(); s != "+ new.internal 10.99.0.1\n+ newer.internal 10.99.0.2\n- svc7.node7.internal 10.64.0.7\n~ svc3.node3.internal 10.64.0.3 -> 10.99.0.3\n" {
		t.Errorf("roster diff 1 3 =\n%s", s)
	}

	// A restart: the saved declaration, the resolver's saved roster, and
	// the next delta applies on top of them.
	f.srv.Close()
	srv, err := resolver.New(resolver.Config{StatePath: statedir.New(f.state).Roster(), Upstreams: f.srvUpstreams()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	source := declsource.New(declsource.Config{Machine: "ace", Initial: saved})
	a, err := New(Config{Runtime: f.rt, Reconciler: f.agent.cfg.Reconciler, Resolver: srv, Gate: f.agent.cfg.Gate, Source: source,
		Networks: oneBridge{}, State: statedir.New(f.state), Saved: sv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := source.Offer(deltaDoc(4, 3, 4, nil, "newer.internal"), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := srv.Roster(); r.Generation != 4 || r.Names["newer.internal"] != nil || len(r.Names) != 100 {
		t.Errorf("after a restart and a delta: roster %d, %d names", r.Generation, len(r.Names))
	}
	if after, _ := readFile(statedir.New(f.state).Declaration()); after != declBefore {
		t.Error("the first delta after a restart rewrote declaration.json; want it appended to the log")
	}
	saved, _ = LoadDeclaration(statedir.New(f.state))
	cur, _ = source.Current()
	if diff := cmp.Diff(cur, saved, cmpRoster...); diff != "" {
		t.Fatalf("after the restart, LoadDeclaration (-in force +saved):\n%s", diff)
	}
}

func (f *fixture) srvUpstreams() []netip.AddrPort {
	return []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}
}

// TestDeltaRefused: a delta from another roster generation than the one in
// force, one removing a name the roster does not have, and one before any
// declaration are refused, and change nothing.
func TestDeltaRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // offered before any declaration; otherwise after declaration 1 (roster 1, 10 names)
		doc   decltest.Doc
		want  decltest.Verdict
	}{
		{"before_any_declaration", true, decltest.Delta(1, 0, 1).Set("a.internal", "10.0.0.1"), decltest.Refused(declsource.ErrDeltaBase, "")},
		{"from_another_generation", false, decltest.Delta(2, 5, 6).Set("a.internal", "10.0.0.1"),
			decltest.Refused(declsource.ErrDeltaBase, "roster_delta.from: 5, but the roster in force is generation 1")},
		{"declaration_generation_in_force", false, decltest.Delta(1, 1, 2).Set("a.internal", "10.0.0.1"),
			decltest.Refused(declsource.ErrConflict, "generation: 1 is in force with roster generation 1, not 2")},
		{"removes_absent_name", false, decltest.Delta(2, 1, 2).Remove("nope.internal"),
			decltest.Refused(nil, `roster_delta.remove[0]: "nope.internal" is not in roster generation 1`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			if !tc.first {
				f.push(t, declaration(1, spec.FlagOn, 2, 10))
			}
			decltest.Offer(t, f.source, tc.doc, tc.want)
			if tc.first {
				if h, ok := f.source.Head(); ok {
					t.Errorf("after a refused first delta, a declaration is in force: %+v", h)
				}
				return
			}
			if h, _ := f.source.Head(); h.Declaration.Generation != 1 || h.Declaration.Roster.Generation != 1 || h.Names != 10 {
				t.Errorf("after a refused delta: %+v", h)
			}
		})
	}
}

// TestRosterHeld: a roster that drops more names than the guard allows
// is held (the resolver goes on serving the one before, and a WARN line
// says so: waiting for meshhost roster accept is no error), whole or as a
// delta; rosters after it pile onto it; accepting the generation puts the
// newest declared in force.
func TestRosterHeld(t *testing.T) {
	var drop []string
	for i := range 10 {
		drop = append(drop, decltest.SvcName(i))
	}
	for _, tc := range []struct {
		pushCase
		more   []decltest.Doc // pushed after it, still held
		accept uint64
	}{
		{pushCase: pushCase{name: "Shrink", before: []decltest.Doc{decl(1, spec.FlagOn, 2, 100)}, push: decl(2, spec.FlagOn, 2, 40),
			wantRoster: 1, wantRosterHeld: "drops 60 of 100 names"}, accept: 2},
		{pushCase: pushCase{name: "Delta", before: []decltest.Doc{decl(1, spec.FlagOn, 2, 20)}, push: decltest.Delta(2, 1, 2).Remove(drop...),
			wantRoster: 1, wantRosterHeld: "drops 10 of 20 names"},
			more: []decltest.Doc{decltest.Delta(3, 2, 3).Set("late.internal", "10.9.9.9")}, accept: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			f := newFixture(t, true, func(c *Config) { c.Logger = newTextLogger(logs) })
			runPush(t, f, tc.pushCase)
			if l := logLine(logs.String(), "msg=\"roster held\""); !strings.Contains(l, "level=WARN") {
				t.Errorf("the held roster's line: %q, want level=WARN\n%s", l, logs)
			}
			for _, d := range tc.more {
				if rep := f.push(t, d.JSON()); rep.RosterHeld == "" || f.srv.Roster().Generation != 1 {
					t.Fatalf("%s on top of a held roster: held %q, serving %d; want still held", d.JSON(), rep.RosterHeld, f.srv.Roster().Generation)
				}
			}
			if err := AcceptRoster(statedir.New(f.state), tc.accept); err != nil {
				t.Fatal(err)
			}
			rep := f.pass(t)
			want, _ := f.source.Roster()
			if diff := cmp.Diff(want, f.srv.Roster(), cmpRoster...); rep.RosterHeld != "" || diff != "" || f.srv.Roster().Generation != tc.accept {
				t.Errorf("after roster accept %d: held %q, serving %d, served (-declared +served):\n%s", tc.accept, rep.RosterHeld, f.srv.Roster().Generation, diff)
			}
		})
	}
}

// TestRosterDifferential: whatever sequence of whole declarations, deltas,
// older rosters and shrinks (held, then accepted) arrives, and however
// passes interleave with it, the resolver serves exactly the roster a
// whole-roster agent would: the newest declared one the guard lets
// through, and never an older one.
func TestRosterDifferential(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			f := newFixture(t, true)
			names := map[string]string{}
			for i := range 30 {
				names[fmt.Sprintf("n%d.internal", i)] = fmt.Sprintf("10.0.0.%d", i)
			}
			whole := func(gen, rosterGen uint64) []byte {
				var ns []string
				for _, n := range slices.Sorted(mapKeys(names)) {
					ns = append(ns, fmt.Sprintf("%q: [%q]", n, names[n]))
				}
				return fmt.Appendf(nil, `{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "on",
				  "roster": {"generation": %d, "zones": ["internal"], "names": {%s}}, "containers": [{"name": "app", "image": "busybox"}]}`,
					gen, rosterGen, strings.Join(ns, ", "))
			}
			if _, err := f.source.Offer(whole(1, 1), "test"); err != nil {
				t.Fatal(err)
			}
			expect := map[string]string{} // what the resolver must serve
			gen, rosterGen, served := uint64(1), uint64(1), uint64(0)
			declared := func() map[string]string { return copyNames(names) }
			for step := range 60 {
				if rng.IntN(2) == 0 {
					if _, err := f.agent.Pass(context.Background()); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					h, _ := f.source.Head()
					d := h.Declaration.Roster.Generation
					// The whole-roster rule: newer and not held, or one of
					// the generations held accepted (refused otherwise).
					if d > served {
						held := len(expect) >= 8 && float64(countDropped(expect, names)) > 0.25*float64(len(expect))
						if acc := AcceptedRoster(statedir.New(f.state)); !held || (served < acc && acc <= d) {
							served, expect = d, declared()
						}
					}
					got := map[string]string{}
					for n, a := range f.srv.Roster().Names {
						got[n] = a[0].String()
					}
					if f.srv.Roster().Generation != served {
						t.Fatalf("step %d: serving generation %d, want %d", step, f.srv.Roster().Generation, served)
					}
					if diff := cmp.Diff(expect, got); diff != "" {
						t.Fatalf("step %d: served (-want +got):\n%s", step, diff)
					}
					continue
				}
				gen++
				switch k := rng.IntN(10); {
				case k < 6: // a delta
					set, remove := map[string]string{}, []string(nil)
					before := copyNames(names)
					for range 1 + rng.IntN(3) {
						n := fmt.Sprintf("n%d.internal", rng.IntN(40))
						if _, touched := set[n]; touched || slices.Contains(remove, n) {
							continue
						}
						if _, ok := before[n]; ok && rng.IntN(2) == 0 {
							remove = append(remove, n)
							delete(names, n)
						} else {
							set[n] = fmt.Sprintf("10.1.%d.%d", step, rng.IntN(250))
							names[n] = set[n]
						}
					}
					if _, err := f.source.Offer(deltaDoc(gen, rosterGen, rosterGen+1, set, remove...), "test"); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					rosterGen++
				case k < 8: // a whole declaration, maybe dropping many names
					if rng.IntN(3) == 0 {
						for n := range names {
							if rng.IntN(2) == 0 {
								delete(names, n)
							}
						}
					}
					names[fmt.Sprintf("w%d.internal", step)] = "10.2.0.1"
					rosterGen++
					if _, err := f.source.Offer(whole(gen, rosterGen), "test"); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				case k < 9: // accept whatever is declared (refused unless held)
					_ = AcceptRoster(statedir.New(f.state), rosterGen)
					gen--
				default: // a whole declaration with an older roster: refused, nothing changes
					_, err := f.source.Offer(whole(gen, 1), "test")
					switch {
					case rosterGen > 1 && !errors.Is(err, declsource.ErrConflict):
						t.Fatalf("step %d: a declaration with roster 1 after roster %d: %v, want it refused (409)", step, rosterGen, err)
					case rosterGen > 1:
						gen-- // not taken
					case err != nil: // roster 1 is the one in force: the same names
						t.Fatalf("step %d: %v", step, err)
					}
				}
			}
		})
	}
}

func copyNames(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func countDropped(prev, next map[string]string) int {
	n := 0
	for k := range prev {
		if _, ok := next[k]; !ok {
			n++
		}
	}
	return n
}

// TestRosterLoopDoesNotWaitForAPass: while a pass waits on the runtime (a
// replacement can take minutes), a pushed delta is put in force by Run's
// roster loop at once.
func TestRosterLoopDoesNotWaitForAPass(t *testing.T) {
	f := newFixture(t, true)
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.rt.Before(func(c memory.Call) error {
		if c.Method == "List" {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- f.agent.Run(ctx) }()
	defer func() {
		cancel()
		close(release)
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-entered: // Run's first pass holds the agent, waiting on the runtime
	case <-time.After(30 * time.Second):
		t.Fatal("the pass never reached the runtime")
	}
	if _, err := f.source.Offer(deltaDoc(2, 1, 2, map[string]string{"quick.internal": "10.7.7.7"}), "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f.srv.Roster().Generation != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the delta was not put in force while a pass waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := f.srv.Roster().Names["quick.internal"]; len(got) != 1 {
		t.Errorf("quick.internal = %v", got)
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// TestRosterLoopWithCopyMode: in copy mode passes render the roster in
// force while Run's roster loop changes it in place as deltas arrive; the
// roster lock keeps them apart (-race checks), and every container ends
// rendered with the last roster.
func TestRosterLoopWithCopyMode(t *testing.T) {
	f := newFixture(t, false) // no probe: copy mode
	f.push(t, declaration(1, spec.FlagOn, 3, 20))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- f.agent.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()
	for i := range 20 {
		if _, err := f.source.Offer(deltaDoc(uint64(i+2), uint64(i+1), uint64(i+2), map[string]string{fmt.Sprintf("d%d.internal", i): "10.5.5.5"}), "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep := f.agent.LastReport()
		if rep != nil && rep.RosterGeneration == 21 && rep.Generation == 21 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last roster never reached a pass: %+v", rep)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The pass that saw generation 21 rendered the copies with it.
	for _, c := range f.rt.Containers() {
		r, err := f.rt.Inspect(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.Settings.Hosts, func(h spec.HostEntry) bool { return h.Name == "d19.internal" }) {
			t.Errorf("%s has no hosts entry for d19.internal", c.Name)
		}
	}
}

// TestRosterDeltaAlone: a roster that moves without its declaration (a
// NATS roster commit, PutRosterDelta) reaches the resolver as a delta and
// never fails the save (the declaration's log keys deltas by declaration
// generation, so declaration.json is not rewritten for it); the next
// declaration delta after it is saved whole, so what is saved reads back
// as the declaration in force.
func TestRosterDeltaAlone(t *testing.T) {
	f := newFixture(t, true)
	f.push(t, declaration(1, spec.FlagOn, 2, 20))
	declBefore, _ := readFile(statedir.New(f.state).Declaration())
	for i, d := range []*spec.RosterDelta{
		decltest.Delta(1, 1, 2).Set("new.internal", "10.99.0.1").Value(),
		decltest.Delta(1, 2, 3).Remove(decltest.SvcName(3)).Value(),
	} {
		if err := f.source.PutRosterDelta("ace", 1, d, "nats"); err != nil {
			t.Fatalf("PutRosterDelta #%d: %v", i, err)
		}
		if err := f.agent.rosterNow(); err != nil {
			t.Fatalf("rosterNow after roster delta #%d: %v", i, err)
		}
	}
	if _, err := f.agent.Pass(context.Background()); err != nil {
		t.Fatalf("Pass after roster deltas: %v", err)
	}
	served := f.srv.Roster()
	want, _ := f.source.Roster()
	if diff := cmp.Diff(want, served, cmpRoster...); diff != "" || served.Generation != 3 {
		t.Fatalf("the resolver serves roster %d (-declared +served):\n%s", served.Generation, diff)
	}
	if after, _ := readFile(statedir.New(f.state).Declaration()); after != declBefore {
		t.Error("a roster delta rewrote declaration.json")
	}
	if sv, err := LoadSaved(statedir.New(f.state)); err != nil || sv.broken || sv.Declaration.Generation != 1 {
		t.Fatalf("LoadSaved after roster deltas = %+v, %v", sv, err)
	}

	// The next declaration, as a delta from the roster in force: saved
	// whole, since the log does not follow on from the roster saved.
	f.push(t, deltaDoc(2, 3, 4, map[string]string{"newer.internal": "10.99.0.2"}))
	sv, err := LoadSaved(statedir.New(f.state))
	if err != nil || sv.broken {
		t.Fatalf("LoadSaved = %+v, %v", sv, err)
	}
	cur, _ := f.source.Current()
	if diff := cmp.Diff(cur, sv.Declaration, cmpRoster...); diff != "" {
		t.Fatalf("LoadSaved (-in force +saved):\n%s", diff)
	}
	// And deltas after it append again.
	declAfter, _ := readFile(statedir.New(f.state).Declaration())
	f.push(t, deltaDoc(3, 4, 5, map[string]string{"newest.internal": "10.99.0.3"}))
	if after, _ := readFile(statedir.New(f.state).Declaration()); after != declAfter {
		t.Error("a declaration delta after the whole save rewrote declaration.json; want it appended")
	}
	sv, _ = LoadSaved(statedir.New(f.state))
	cur, _ = f.source.Current()
	if diff := cmp.Diff(cur, sv.Declaration, cmpRoster...); diff != "" {
		t.Fatalf("LoadSaved after the next delta (-in force +saved):\n%s", diff)
	}
}
