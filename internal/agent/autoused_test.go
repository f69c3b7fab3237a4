package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// scriptedProber passes or fails each network as the test says, and
// records which it was asked to probe.
type scriptedProber struct {
	now func() time.Time
	// mu guards the fields below.
	mu     sync.Mutex
	pass   map[string]bool
	probed []string
}

func (p *scriptedProber) Probe(_ context.Context, nets []migrations.Network, _ map[string]migrations.Strategy) []migrations.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []migrations.Result
	for _, n := range nets {
		p.probed = append(p.probed, n.Name)
		r := migrations.Result{Network: n.Name, Driver: n.Driver, Kind: migrations.KindOf(n), Pass: p.pass[n.Name], At: p.now()}
		if r.Pass {
			r.Strategy = migrations.StrategyGateway
			r.DNS = spec.DNSConfig{Servers: []netip.Addr{n.Subnets[0].Gateway}, Options: []string{"ndots:1"}}
		} else {
			r.Reason = "no strategy can work"
		}
		out = append(out, r)
	}
	return out
}

func (p *scriptedProber) set(network string, pass bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pass[network] = pass
}

// takeProbed returns the networks probed since the last call, sorted.
func (p *scriptedProber) takeProbed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.probed
	p.probed = nil
	slices.Sort(out)
	return out
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func subnet(prefix, gw string) []migrations.Subnet {
	return []migrations.Subnet{{Prefix: netip.MustParsePrefix(prefix), Gateway: netip.MustParseAddr(gw)}}
}

// usedDeclaration is a flag-auto declaration of generation gen, with names
// roster names, of containers by name on the networks given (none: the
// default network).
func usedDeclaration(gen uint64, names int, containers map[string][]string) []byte {
	d := decltest.Declaration(gen).Flag(spec.FlagAuto)
	for _, name := range slices.Sorted(maps.Keys(containers)) {
		d.Container(decltest.App{Name: name, Image: "busybox", Networks: append([]string{}, containers[name]...)})
	}
	for i := range names {
		d.Name(fmt.Sprintf("svc%d.internal", i), fmt.Sprintf("10.64.0.%d", i+1))
	}
	return d.JSON()
}

// TestAutoIgnoresUnusedNetworks is the agent's side of flag auto waiting
// only for the networks its declared containers use. The runtime has an
// --internal network with aardvark-dns (lonely) whose probe always fails and
// that no declared container uses: it is probed every pass it is due, as
// any network, but the machine switches without it, and a roster change
// then replaces nothing. A container declared onto it afterwards gets copy
// mode (failing closed), the network keeps being probed, and the
// container switches once it passes. Declared on it from the start, it
// holds the machine in copy mode, as before.
func TestAutoIgnoresUnusedNetworks(t *testing.T) {
	nets := &networkList{}
	nets.set(
		migrations.Network{Name: "podman", Driver: "bridge", Subnets: subnet("10.88.0.0/16", "10.88.0.1")},
		migrations.Network{Name: "mesh", Driver: "bridge", DNSEnabled: true, Subnets: subnet("10.89.0.0/24", "10.89.0.1")},
		migrations.Network{Name: "lonely", Driver: "bridge", Internal: true, DNSEnabled: true, Subnets: subnet("10.91.0.0/24", "10.91.0.1")},
	)
	setup := func(t *testing.T) (*fixture, *scriptedProber, *testClock) {
		clk := &testClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
		prober := &scriptedProber{now: clk.Now, pass: map[string]bool{"podman": true, "mesh": true, "lonely": false}}
		f := newFixture(t, false, func(c *Config) {
			gate, err := migrations.OpenGate(migrations.GateConfig{Path: statedir.New(t.TempDir()).Migrations(), Owner: "ace", Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			c.Gate, c.Networks = gate, nets
			c.NewProber = func(string) (Prober, error) { return prober, nil }
		})
		return f, prober, clk
	}
	base := map[string][]string{"web": nil, "api": {"mesh"}}

	t.Run("unused", func(t *testing.T) {
		f, prober, clk := setup(t)
		rep := f.push(t, usedDeclaration(1, 5, base))
		if got, want := prober.takeProbed(), []string{"lonely", "mesh", "podman"}; !slices.Equal(got, want) {
			t.Errorf("first pass probed %v, want every network the runtime has: %v", got, want)
		}
		st := f.agent.cfg.Gate.State()
		if st.AutoSwitchedAt.IsZero() {
			t.Fatalf("the machine did not switch: an unused network holds it (auto: %+v)", f.agent.cfg.Gate.Auto())
		}
		if st.Networks["lonely"].Resolve {
			t.Error("lonely switched to resolve mode with a failing probe")
		}
		for _, name := range []string{"web", "api"} {
			if rep.Modes[name] != "resolve" {
				t.Errorf("%s in %q mode, want resolve", name, rep.Modes[name])
			}
		}
		if a := f.agent.cfg.Gate.Auto(); !slices.Equal(a.Unused, []string{"lonely"}) {
			t.Errorf("Auto().Unused = %v, want [lonely]", a.Unused)
		}

		// The mission: a roster change replaces zero containers.
		before := ids(f.rt)
		f.push(t, usedDeclaration(2, 9, base))
		if n := replaced(before, ids(f.rt)); n != 0 {
			t.Errorf("a roster change in resolve mode replaced %d containers, want 0", n)
		}

		// A container declared onto lonely: copy mode, the others untouched.
		withLate := map[string][]string{"web": nil, "api": {"mesh"}, "late": {"lonely"}}
		rep = f.push(t, usedDeclaration(3, 9, withLate))
		if rep.Modes["late"] != "copy" {
			t.Errorf("late, on lonely (probe failing), in %q mode, want copy", rep.Modes["late"])
		}
		if n := replaced(before, ids(f.rt)); n != 0 {
			t.Errorf("declaring late replaced %d other containers, want 0", n)
		}
		if f.agent.cfg.Gate.State().AutoSwitchedAt.IsZero() {
			t.Error("declaring a container onto a failing network switched the machine back")
		}
		// lonely is probed again after the gate's retry delay.
		prober.takeProbed()
		clk.advance(31 * time.Second)
		rep = f.push(t, usedDeclaration(4, 9, withLate))
		if got := prober.takeProbed(); !slices.Contains(got, "lonely") {
			t.Errorf("after the retry delay the pass probed %v, want lonely among them", got)
		}
		if rep.Modes["late"] != "copy" {
			t.Errorf("late in %q mode with lonely still failing, want copy", rep.Modes["late"])
		}
		// Fixed (say, recreated with --disable-dns): late switches.
		prober.set("lonely", true)
		clk.advance(31 * time.Second)
		lateID := ids(f.rt)["late"]
		rep = f.push(t, usedDeclaration(5, 9, withLate))
		if rep.Modes["late"] != "resolve" {
			t.Errorf("late in %q mode after lonely passed, want resolve", rep.Modes["late"])
		}
		after := ids(f.rt)
		if after["late"] == lateID {
			t.Error("late was not replaced into resolve mode")
		}
		delete(after, "late")
		if n := replaced(before, after); n != 0 {
			t.Errorf("lonely passing replaced %d other containers, want 0", n)
		}
	})

	t.Run("used", func(t *testing.T) {
		f, prober, _ := setup(t)
		rep := f.push(t, usedDeclaration(1, 5, map[string][]string{"web": nil, "api": {"mesh"}, "db": {"lonely"}}))
		if got := prober.takeProbed(); len(got) != 3 {
			t.Errorf("first pass probed %v, want every network", got)
		}
		if st := f.agent.cfg.Gate.State(); !st.AutoSwitchedAt.IsZero() {
			t.Errorf("the machine switched at %v while a network a declared container uses fails its probe", st.AutoSwitchedAt)
		}
		for name, mode := range rep.Modes {
			if mode != "copy" {
				t.Errorf("%s in %q mode, want copy: lonely, used by db, holds the machine", name, mode)
			}
		}
		if a := f.agent.cfg.Gate.Auto(); !slices.Equal(a.Holding, []string{"lonely"}) || len(a.Unused) != 0 {
			t.Errorf("Auto() = %+v, want lonely holding, nothing unused", a)
		}
		// db dropped from the declaration: lonely is unused, and the
		// machine switches at once.
		rep = f.push(t, usedDeclaration(2, 5, base))
		if st := f.agent.cfg.Gate.State(); st.AutoSwitchedAt.IsZero() {
			t.Errorf("the machine did not switch once no declared container used lonely")
		}
		if rep.Modes["web"] != "resolve" || rep.Modes["api"] != "resolve" {
			t.Errorf("modes %v, want web and api in resolve mode", rep.Modes)
		}
	})
}
