package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
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
	f := newFixture(t, true)
	f.push(t, declaration(3, spec.FlagOn, 2, 10))

	// Declaration 4 whose roster claims generation 3 with other names.
	lie := strings.Replace(string(declaration(4, spec.FlagOn, 2, 11)), `"roster": {"generation": 4`, `"roster": {"generation": 3`, 1)
	_, err := f.source.Offer([]byte(lie), "test")
	if !errors.Is(err, declsource.ErrConflict) || !strings.Contains(err.Error(), "roster generation 3 is served with other names") {
		t.Fatalf("Offer(roster 3 with another name) = %v, want a conflict naming roster generation 3", err)
	}

	// A restarted agent: the resolver serves its saved roster 3, the
	// first pass (before any declaration) tells the Source, and a first
	// declaration with roster 2 is refused.
	srv, err := resolver.New(resolver.Config{StatePath: statedir.New(f.state).Roster(), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
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
	older := strings.Replace(string(declaration(5, spec.FlagOn, 2, 10)), `"roster": {"generation": 5`, `"roster": {"generation": 2`, 1)
	if _, err := source.Offer([]byte(older), "test"); !errors.Is(err, declsource.ErrConflict) || !strings.Contains(err.Error(), "2 is older than roster generation 3, served") {
		t.Errorf("Offer(roster 2) to a restarted agent serving roster 3 = %v, want a conflict", err)
	}
}
