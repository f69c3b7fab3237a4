package agent

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// truthDecl is a declaration of n containers whose env is env, flag off.
func truthDecl(gen uint64, n int, env string) []byte {
	var cs []string
	for i := range n {
		cs = append(cs, fmt.Sprintf(`{"name": "app%d", "image": "busybox", "env": {"E": %q}}`, i, env))
	}
	return []byte(fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "off",
	  "roster": {"generation": %d, "zones": ["internal"], "names": {}},
	  "containers": [%s]}`, gen, gen, strings.Join(cs, ",")))
}

// truthFixture is an agent with a journal, logging text to the buffer
// returned, with a budget of budget replacements an hour and a hold above
// holdAbove (0: none).
func truthFixture(t *testing.T, j *journal.Journal, budget, holdAbove int) (*fixture, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	f := newFixture(t, true, func(c *Config) {
		c.Journal, c.HoldAbove = j, holdAbove
		c.Logger = truthLogger(t, logs)
		rec, err := reconcile.New(reconcile.Config{Runtime: c.Runtime, Owner: "ace", Budget: reconcile.Budget{Max: budget, Window: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		c.Reconciler = rec
	})
	return f, logs
}

// truthLogger is the agent's own logger (pass= from the context), as
// text into w.
func truthLogger(t *testing.T, w *syncbuf.Buffer) *slog.Logger {
	t.Helper()
	l, err := logging.New(w, logging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func openTruthJournal(t *testing.T, dir string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// historyLines is the journal's history as `meshhost history` prints it,
// without times and durations.
func historyLines(t *testing.T, j *journal.Journal) []string {
	t.Helper()
	entries, err := j.History()
	if err != nil {
		t.Fatal(err)
	}
	ts := regexp.MustCompile(`^\S+ `)
	dur := regexp.MustCompile(` in [0-9.]+[µnm]?s`)
	var out []string
	for _, e := range entries {
		out = append(out, dur.ReplaceAllString(ts.ReplaceAllString(e.String(), ""), " in <d>"))
	}
	return out
}

// logPasses returns the pass= of every log line whose message is msg.
func logPasses(logs string, msg string) []string {
	re := regexp.MustCompile(`msg="?` + regexp.QuoteMeta(msg) + `"?.* pass=(\d+)`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(logs, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestPassNumberIsOneEverywhere: the pass number of a pass's log lines
// (pass=) is its number in the journal and the history, and a restarted
// agent numbers on from the journal: passes that recorded nothing (only
// kept containers) take a number too, and no number is given twice.
func TestPassNumberIsOneEverywhere(t *testing.T) {
	ctx := context.Background()
	jdir := t.TempDir()
	j := openTruthJournal(t, jdir)
	f, logs := truthFixture(t, j, 100, 0)
	f.push(t, truthDecl(1, 2, "a"))              // pass 1: two creates
	if _, err := f.agent.Pass(ctx); err != nil { // pass 2: keeps, not journalled
		t.Fatal(err)
	}
	f.push(t, truthDecl(2, 2, "b")) // pass 3: two replacements
	passes, err := j.Passes()
	if err != nil {
		t.Fatal(err)
	}
	var seqs []string
	for _, p := range passes {
		seqs = append(seqs, fmt.Sprint(p.Seq))
	}
	if got := logPasses(logs.String(), "declaration applied"); !cmp.Equal(seqs, got) || len(got) != 2 {
		t.Errorf("journal's pass numbers %v, the log's pass= of each declaration applied %v: want the same two", seqs, got)
	}

	// A restart: the next pass is 4, in the log and the journal.
	logs2 := &syncbuf.Buffer{}
	a2, err := New(func() Config { c := f.agent.cfg; c.Logger = truthLogger(t, logs2); c.Registerer = nil; return c }())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.source.Offer(truthDecl(3, 2, "c"), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	passes, _ = j.Passes()
	if last := passes[len(passes)-1].Seq; last != 4 || !strings.Contains(logs2.String(), "pass=4") {
		t.Errorf("after a restart: journal's last pass %d, log:\n%s\nwant pass 4 in both", last, logs2)
	}
	if got := testutil.ToFloat64(a2.metrics.passNumber); got != 4 {
		t.Errorf("meshhost_agent_pass_number = %v, want 4", got)
	}
}

// TestHistoryAndLogsTellWhatAPassDid: a pass whose every action the
// budget deferred did nothing: the history says "did nothing" and names
// what was deferred, and the log never says "declaration applied" for it
// (it says "in force in part"); each history line is compared whole.
func TestHistoryAndLogsTellWhatAPassDid(t *testing.T) {
	j := openTruthJournal(t, t.TempDir())
	f, logs := truthFixture(t, j, 2, 0)
	f.push(t, truthDecl(1, 3, "a")) // 1: three creates
	f.push(t, truthDecl(2, 3, "b")) // 2: two replacements, one deferred
	f.push(t, truthDecl(3, 3, "c")) // 3: budget spent: all three deferred
	if got := logPasses(logs.String(), "declaration applied"); !cmp.Equal(got, []string{"1"}) {
		t.Errorf(`"declaration applied" logged for passes %v; want pass 1 alone (2 and 3 left replacements deferred)`, got)
	}
	if got := logPasses(logs.String(), "declaration in force in part: later passes apply the rest"); !cmp.Equal(got, []string{"2", "3"}) {
		t.Errorf(`"declaration in force in part" logged for passes %v; want 2 and 3`, got)
	}
	want := []string{
		"pass 1: did 3 create in <d>",
		"declaration 1: roster 1, 3 containers, mesh_names off",
		"pass 2: did 2 replace in <d>; deferred by the budget: 1 replace",
		"declaration 2: roster 2, 3 containers, mesh_names off",
		"pass 3: did nothing in <d>; deferred by the budget: 3 replace",
		"declaration 3: roster 3, 3 containers, mesh_names off",
	}
	if diff := cmp.Diff(want, historyLines(t, j)); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// TestHistoryShowsHoldsAndReleases: a held declaration and a freeze are
// journalled as held when they begin (once, however many passes they
// last), with the command that releases each, and their release as its
// own entry.
func TestHistoryShowsHoldsAndReleases(t *testing.T) {
	ctx := context.Background()
	j := openTruthJournal(t, t.TempDir())
	f, _ := truthFixture(t, j, 100, 1)
	dir := statedir.New(f.state)
	pass := func() {
		t.Helper()
		if _, err := f.agent.Pass(ctx); err != nil {
			t.Fatalf("Pass: %v", err)
		}
	}
	f.push(t, truthDecl(1, 2, "a")) // 1: two creates
	f.push(t, truthDecl(2, 2, "b")) // 2: two replacements, more than 1: held
	pass()                          // 3: still held: nothing journalled
	if err := ApproveDeclaration(dir, 2); err != nil {
		t.Fatal(err)
	}
	pass() // 4: released, applied
	if err := SetFrozen(dir, &Freeze{Reason: "golden"}); err != nil {
		t.Fatal(err)
	}
	pass() // 5: frozen
	pass() // 6: still frozen: nothing journalled
	if err := SetFrozen(dir, nil); err != nil {
		t.Fatal(err)
	}
	pass() // 7: unfrozen
	want := []string{
		"pass 1: did 2 create in <d>",
		"declaration 1: roster 1, 2 containers, mesh_names off",
		"pass 2: declaration 2 held (2 replacements, 0 removals) (meshhost approve 2 releases it); nothing applied",
		"pass 4: did 2 replace in <d>; declaration 2 released (approved, or no longer held)",
		"declaration 2: roster 2, 2 containers, mesh_names off",
		"pass 5: frozen (golden) (meshhost unfreeze releases it); nothing applied",
		"pass 7: unfrozen",
	}
	if diff := cmp.Diff(want, historyLines(t, j)); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// TestHistoryShowsAHeldRosterAsHeld: a roster the guard holds (it drops
// too many names at once) is journalled as held, with meshhost roster
// accept GEN, never as the roster in force; its release (the accept) is
// an entry of its own, and only then is the roster journalled.
func TestHistoryShowsAHeldRosterAsHeld(t *testing.T) {
	ctx := context.Background()
	j := openTruthJournal(t, t.TempDir())
	f, _ := truthFixture(t, j, 100, 0)
	f.push(t, declaration(1, spec.FlagOn, 2, 100))
	f.push(t, declaration(2, spec.FlagOn, 2, 40)) // 60 names dropped: held
	if err := AcceptRoster(statedir.New(f.state), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.agent.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pass 1: did 2 create in <d>",
		"declaration 1: roster 1, 2 containers, mesh_names on; names +100 -0 ~0",
		"pass 2: roster 2 held (roster 1 keeps serving) (meshhost roster accept 2 releases it)",
		"declaration 2: roster 2 held (roster 1 serves until meshhost roster accept 2), 2 containers, mesh_names on; names +0 -60 ~0",
		"pass 3: roster hold released (roster 2 accepted, or superseded)",
	}
	if diff := cmp.Diff(want, historyLines(t, j)); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}
