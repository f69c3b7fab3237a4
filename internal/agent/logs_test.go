package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// TestPassLogFields: the lines of a pass, the reconciler's among them,
// carry the field set every meshhost line uses: pass (its number),
// declaration_generation, roster_generation and, for a container,
// container; and a failed pass is logged at error level, naming its pass.
func TestPassLogFields(t *testing.T) {
	var logs syncbuf.Buffer
	log, err := logging.New(&logs, logging.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rt *panicky
	f := newFixture(t, true, func(c *Config) {
		rt = &panicky{Runtime: c.Runtime}
		c.Runtime, c.Logger = rt, log
		rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		c.Reconciler = rec
	})
	f.push(t, declaration(4, spec.FlagOn, 2, 10))
	line := func(msg string) string {
		t.Helper()
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="`+msg+`"`) {
				return l
			}
		}
		t.Fatalf("no %q line in:\n%s", msg, logs.String())
		return ""
	}
	for msg, want := range map[string][]string{
		"reconcile action":    {"component=reconcile", "container=app", "kind=create", "pass=1", "declaration_generation=4", "roster_generation=4"},
		"roster in force":     {"component=agent", "roster_generation=4", "pass=1", "declaration_generation=4"},
		"declaration applied": {"declaration_generation=4", "pass=1", "roster_generation=4"},
	} {
		l := line(msg)
		for _, w := range want {
			if !strings.Contains(l, " "+w) {
				t.Errorf("%q line lacks %s: %s", msg, w, l)
			}
		}
		if strings.Count(l, " pass=") != 1 {
			t.Errorf("%q line names its pass %d times: %s", msg, strings.Count(l, " pass="), l)
		}
	}

	// A failed pass: Run logs it at error level, with its number.
	if _, err := f.source.Offer(declaration(5, spec.FlagOn, 2, 10), "test"); err != nil {
		t.Fatal(err)
	}
	rt.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.agent.Run(ctx); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "pass failed; retrying") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if l := line("pass failed; retrying"); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, " pass=2 ") {
		t.Errorf("the failed pass's line: %s", l)
	}
	if l := line("the pass panicked; what was in force stays, and the next pass tries again"); !strings.Contains(l, " pass=2") || !strings.Contains(l, " declaration_generation=5") {
		t.Errorf("the panic's line: %s", l)
	}
}
