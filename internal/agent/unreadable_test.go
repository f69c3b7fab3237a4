package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// unreadable is a resolver in another process whose roster cannot be read
// while failing is set (its control socket times out, say), as
// control.Client: Roster answers nil, RosterContext the error. Its other
// calls go through.
type unreadable struct {
	*resolver.Server
	failing atomic.Bool
}

func (u *unreadable) Roster() *spec.Roster {
	if u.failing.Load() {
		return nil
	}
	return u.Server.Roster()
}

func (u *unreadable) RosterContext(context.Context) (*spec.Roster, error) {
	if u.failing.Load() {
		return nil, errors.New("the resolver's control socket did not answer")
	}
	return u.Server.Roster(), nil
}

// unreadableWhole is unreadable taking whole rosters only, as a resolver
// older than deltas: its Apply reads the roster it serves, changes it by
// the delta and puts it whole (Update), as control.Client does for such a
// resolver.
type unreadableWhole struct{ u *unreadable }

func (w unreadableWhole) Apply(d *spec.RosterDelta) error {
	r, err := w.u.RosterContext(context.Background())
	if err != nil {
		return err
	}
	return applyWhole(r, d, w.u.Update)
}
func (w unreadableWhole) Roster() *spec.Roster { return w.u.Roster() }
func (w unreadableWhole) Serving() bool        { return w.u.Serving() }
func (w unreadableWhole) RosterContext(ctx context.Context) (*spec.Roster, error) {
	return w.u.RosterContext(ctx)
}

// applyWhole puts served (nil: none) changed by d with update.
func applyWhole(served *spec.Roster, d *spec.RosterDelta, update func(*spec.Roster) error) error {
	if served == nil {
		served = &spec.Roster{Names: map[string][]netip.Addr{}}
	}
	if _, err := served.Apply(d); err != nil {
		return err
	}
	return update(served)
}

// TestUnreadableResolverKeepsTheGuard: an agent that starts while its
// resolver serves 100 names but cannot be read takes the roster in force
// for unknown, not empty. A declared roster of 10 names would pass the
// roster guard against an empty one (and, sent whole, replace the 100
// names); instead the pass fails saying why, the resolver keeps its 100
// names, and once it can be read the guard holds the shrink. The same
// with a resolver that takes deltas and one that takes whole rosters.
func TestUnreadableResolverKeepsTheGuard(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "delta", true: "whole"}[whole], func(t *testing.T) { testUnreadableResolver(t, whole) })
	}
}

func testUnreadableResolver(t *testing.T, whole bool) {
	var res *unreadable
	f := newFixture(t, true, func(c *Config) {
		srv := c.Resolver.(*resolver.Server)
		served := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
		for i := range 100 {
			served.Names[fmt.Sprintf("svc%d.node%d.internal", i, i%50)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 64, 0, byte(i)})}
		}
		if err := srv.Update(served); err != nil {
			t.Fatal(err)
		}
		res = &unreadable{Server: srv}
		res.failing.Store(true)
		c.Resolver = res
		if whole {
			c.Resolver = unreadableWhole{res}
		}
	})
	if _, err := f.source.Offer(declaration(2, spec.FlagOn, 2, 10), "test"); err != nil {
		t.Fatal(err)
	}
	_, err := f.agent.Pass(context.Background())
	if err == nil || !strings.Contains(err.Error(), "reading the roster the resolver serves") {
		t.Fatalf("a pass while the resolver's roster cannot be read = %v, want an error saying so", err)
	}
	if g, n := f.srv.Generation(), len(f.srv.Roster().Names); g != 1 || n != 100 {
		t.Fatalf("the resolver serves roster %d with %d names, want 1 with 100: a roster the guard never saw replaced it", g, n)
	}

	res.failing.Store(false)
	rep, err := f.agent.Pass(context.Background())
	if err != nil {
		t.Fatalf("the pass once the resolver answers: %v", err)
	}
	if !strings.Contains(rep.RosterHeld, "drops 90 of 100 names") {
		t.Errorf("roster held: %q, want the guard holding the shrink from 100 names to 10", rep.RosterHeld)
	}
	if g := f.srv.Generation(); g != 1 {
		t.Errorf("the resolver serves roster %d, want 1 (the shrink held)", g)
	}
}
