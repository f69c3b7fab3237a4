package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// Issue 7: the resolver's exposure follows the networks, whether or not a
// prober can be made.

// listenRecorder is the resolver as an Exposer sees it, recording where it
// listens and whom it allows; nothing is bound.
type listenRecorder struct {
	mu        sync.Mutex
	listening map[netip.AddrPort]bool
	allow     []netip.Prefix
}

func (r *listenRecorder) Listen(a netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listening[a] {
		return errors.New("already listening")
	}
	r.listening[a] = true
	return nil
}

func (r *listenRecorder) Unlisten(a netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.listening[a] {
		return errors.New("not listening")
	}
	delete(r.listening, a)
	return nil
}

func (r *listenRecorder) SetAllow(p []netip.Prefix) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allow = slices.Clone(p)
}

func (r *listenRecorder) SetLocalForward(netip.Prefix, string, netip.AddrPort) {}

func (r *listenRecorder) serves(a netip.AddrPort, client netip.Prefix) (listening, allowed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listening[a], slices.Contains(r.allow, client)
}

// networkList is a runtime's network list the test changes.
type networkList struct {
	mu   sync.Mutex
	nets []migrations.Network
}

func (l *networkList) Networks(context.Context) ([]migrations.Network, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.nets), nil
}

func (l *networkList) set(nets ...migrations.Network) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nets = nets
}

// TestExposedWithoutProberAndNetworksGone: an agent that cannot make a
// prober (here: the probe image fails to import) still serves the
// networks in resolve mode, from its first pass; and a network deleted
// from the runtime loses its listener and allowed subnet at the next pass,
// while the others keep theirs.
func TestExposedWithoutProberAndNetworksGone(t *testing.T) {
	podman, _ := oneBridge{}.Networks(context.Background())
	extra := migrations.Network{Name: "extra", Driver: "bridge", Subnets: []migrations.Subnet{{
		Prefix: netip.MustParsePrefix("10.89.7.0/24"), Gateway: netip.MustParseAddr("10.89.7.1"),
	}}}
	nets := &networkList{}
	nets.set(podman[0], extra)
	res := &listenRecorder{listening: map[netip.AddrPort]bool{}}
	exposer, err := migrations.NewExposer(migrations.ExposerConfig{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	proberTries := 0
	f := newFixture(t, true, func(c *Config) {
		// extra was proven too, by the agent before the restart.
		if _, err := c.Gate.Observe([]migrations.Network{podman[0], extra}); err != nil {
			t.Fatal(err)
		}
		err := c.Gate.Record([]migrations.Result{{Network: "extra", Kind: migrations.KindBridge, Pass: true, At: time.Now(),
			Strategy: migrations.StrategyGateway,
			DNS:      spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.89.7.1")}, Options: []string{"ndots:1"}}}})
		if err != nil {
			t.Fatal(err)
		}
		c.Networks, c.Exposer = nets, exposer
		c.NewProber = func(string) (Prober, error) {
			proberTries++
			return nil, errors.New("importing the probe image: no space left on device")
		}
	})
	rep := f.push(t, declaration(1, spec.FlagOn, 2, 5))
	if proberTries == 0 {
		t.Fatal("the agent never tried to make a prober")
	}
	if rep.Modes["app0"] != "resolve" {
		t.Fatalf("app0 in %q mode, want resolve (the fixture's network is proven)", rep.Modes["app0"])
	}
	podmanGW, extraGW := netip.MustParseAddrPort("10.88.0.1:53"), netip.MustParseAddrPort("10.89.7.1:53")
	for _, n := range []struct {
		addr   netip.AddrPort
		subnet string
	}{{podmanGW, "10.88.0.0/16"}, {extraGW, "10.89.7.0/24"}} {
		if l, a := res.serves(n.addr, netip.MustParsePrefix(n.subnet)); !l || !a {
			t.Errorf("without a prober: listening on %s %v, allowing %s %v; want both (containers in resolve mode point there)",
				n.addr, l, n.subnet, a)
		}
	}

	// extra is deleted: the next pass takes its listener and subnet back.
	nets.set(podman[0])
	if _, err := f.agent.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, a := res.serves(extraGW, netip.MustParsePrefix("10.89.7.0/24")); l || a {
		t.Errorf("extra deleted: listening on its gateway %v, allowing its subnet %v; want neither", l, a)
	}
	if l, a := res.serves(podmanGW, netip.MustParsePrefix("10.88.0.0/16")); !l || !a {
		t.Errorf("extra deleted: podman's gateway listened on %v, subnet allowed %v; want both kept", l, a)
	}
}
