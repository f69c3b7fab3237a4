package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// TestRosterGenerationsCannotLie: the agent tells its Source the roster the
// resolver serves, from its start (the saved one) and after every swap, so
// that a declaration whose roster is older, or reuses the served roster's
// generation with other names, is refused instead of silently leaving
// names at their old addresses.
func TestRosterGenerationsCannotLie(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool // offered to a restarted agent whose resolver serves its saved roster 3
		doc     decltest.Doc
		want    decltest.Verdict
	}{
		{"reused_generation_other_names", false, decl(4, spec.FlagOn, 2, 11).RosterGen(3),
			decltest.Refused(declsource.ErrConflict, "roster generation 3 is served with other names")},
		{"older_after_restart", true, decl(5, spec.FlagOn, 2, 10).RosterGen(2),
			decltest.Refused(declsource.ErrConflict, "2 is older than roster generation 3, served")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			f.push(t, declaration(3, spec.FlagOn, 2, 10))
			source := f.source
			if tc.restart {
				source = restartServing(t, f)
			}
			decltest.Offer(t, source, tc.doc, tc.want)
		})
	}
}

// restartServing starts a second agent on f's state and runtime whose
// resolver serves the saved roster; its first pass (before any
// declaration) tells its Source. It returns that Source.
func restartServing(t *testing.T, f *fixture) *declsource.Source {
	t.Helper()
	srv, err := resolver.New(resolver.Config{StatePath: statedir.New(f.state).Roster(), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	source := declsource.New(declsource.Config{Machine: "ace"})
	rec, err := reconcile.New(reconcile.Config{Runtime: f.rt, Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Runtime: f.rt, Reconciler: rec, Resolver: srv, Gate: f.agent.cfg.Gate, Source: source, State: statedir.New(f.state)})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := a.Pass(context.Background()); rep != nil || err != nil { // the first pass, nothing declared yet
		t.Fatalf("a first pass without a declaration = %v, %v", rep, err)
	}
	return source
}
