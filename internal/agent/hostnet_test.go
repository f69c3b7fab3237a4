package agent

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// hostProber passes every network: bridges through their gateway, the
// host's network through the loopback resolver, as migrations' Runner
// proves them. It records which networks it was asked to probe.
type hostProber struct {
	now    func() time.Time
	mu     sync.Mutex
	probed []string
}

func (p *hostProber) Probe(_ context.Context, nets []migrations.Network, _ map[string]migrations.Strategy) []migrations.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []migrations.Result
	for _, n := range nets {
		p.probed = append(p.probed, n.Name)
		r := migrations.Result{Network: n.Name, Driver: n.Driver, Kind: migrations.KindOf(n), Pass: true, At: p.now()}
		if r.Kind == migrations.KindHost {
			r.Strategy, r.DNS = migrations.StrategyLoopback, spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr(migrations.DefaultLoopback)}, Options: []string{"ndots:1"}}
		} else {
			r.Strategy, r.DNS = migrations.StrategyGateway, spec.DNSConfig{Servers: []netip.Addr{n.Subnets[0].Gateway}, Options: []string{"ndots:1"}}
		}
		out = append(out, r)
	}
	return out
}

func (p *hostProber) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.probed
	p.probed = nil
	slices.Sort(out)
	return out
}

// TestHostNetworkInTheAgent: podman lists no host network, so the agent
// makes it one of the machine's networks where a declared container is on
// it, and only there: the machine whose declaration puts nothing on it
// never probes it. Once its probe passes, flag auto switches the
// host-network container to the loopback resolver like any other, and a
// roster change then replaces nothing.
func TestHostNetworkInTheAgent(t *testing.T) {
	nets := &networkList{}
	nets.set(migrations.Network{Name: "podman", Driver: "bridge", Subnets: subnet("10.88.0.0/16", "10.88.0.1")})
	clk := &testClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	prober := &hostProber{now: clk.Now}
	f := newFixture(t, false, func(c *Config) {
		gate, err := migrations.OpenGate(migrations.GateConfig{Path: statedir.New(t.TempDir()).Migrations(), Owner: "ace", Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		c.Gate, c.Networks = gate, nets
		c.NewProber = func(string) (Prober, error) { return prober, nil }
	})

	f.push(t, usedDeclaration(1, 3, map[string][]string{"web": nil}))
	if got, want := prober.take(), []string{"podman"}; !slices.Equal(got, want) {
		t.Errorf("without a host-network container the agent probed %v, want %v", got, want)
	}

	clk.advance(time.Second)
	rep := f.push(t, usedDeclaration(2, 3, map[string][]string{"web": nil, "edge": {spec.HostNetwork}}))
	if got, want := prober.take(), []string{spec.HostNetwork}; !slices.Equal(got, want) {
		t.Errorf("with edge on the host's network the agent probed %v, want %v", got, want)
	}
	if rep.Modes["edge"] != "resolve" || rep.Modes["web"] != "resolve" {
		t.Fatalf("modes %v, want edge and web in resolve mode", rep.Modes)
	}
	var edge spec.Rendered
	for _, c := range f.rt.Containers() {
		if c.Name == "edge" {
			in, err := f.rt.Inspect(context.Background(), c.ID)
			if err != nil {
				t.Fatal(err)
			}
			edge = in.Settings
		}
	}
	if !edge.OnHostNetwork() || len(edge.DNS.Servers) != 1 || edge.DNS.Servers[0].String() != migrations.DefaultLoopback || len(edge.Hosts) != 0 {
		t.Errorf("edge created on %+v with DNS %+v and %d hosts lines, want the host's network, the loopback resolver, no copy", edge.Networks, edge.DNS, len(edge.Hosts))
	}

	before := ids(f.rt)
	f.push(t, usedDeclaration(3, 7, map[string][]string{"web": nil, "edge": {spec.HostNetwork}}))
	if n := replaced(before, ids(f.rt)); n != 0 {
		t.Errorf("a roster change in resolve mode replaced %d containers, want 0", n)
	}
}
