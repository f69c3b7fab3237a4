//go:build remote

package migrations_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/resolver"
)

// TestExposerNetworkRemovedPodman: the resolver listens on the gateways of
// two real podman networks; one is removed, and once the runtime's network
// list says so (the agent's next pass) its listener is gone, while the
// other network keeps its own. Nothing is sent anywhere.
func TestExposerNetworkRemovedPodman(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // binds bridge gateways' port 53
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := podman.New(ctx, h.Socket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := p
	gone, kept := h.Network("gone", "--disable-dns"), h.Network("kept", "--disable-dns")
	srv, err := resolver.New(resolver.Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	exp, err := migrations.NewExposer(migrations.ExposerConfig{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := rt.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gw := map[string]netip.AddrPort{}
	for _, n := range nets {
		if n.Name == gone || n.Name == kept {
			if _, err := exp.Expose(n, migrations.StrategyGateway); err != nil {
				t.Fatalf("Expose(%s): %v", n.Name, err)
			}
			gw[n.Name] = netip.AddrPortFrom(n.Subnets[0].Gateway, 53)
		}
	}
	if len(gw) != 2 {
		t.Fatalf("networks %s and %s not listed: %v", gone, kept, nets)
	}
	for _, name := range []string{gone, kept} {
		if !slices.Contains(srv.Listeners(), gw[name]) {
			t.Fatalf("the resolver does not listen on %s's gateway %s: %v", name, gw[name], srv.Listeners())
		}
	}
	exp.Retain(nets) // the networks as they are: nothing changes
	if got := srv.Listeners(); !slices.Contains(got, gw[gone]) || !slices.Contains(got, gw[kept]) {
		t.Fatalf("Retain of the networks as they are closed a listener: %v", got)
	}

	h.MustPodman("network", "rm", gone)
	if nets, err = rt.Networks(ctx); err != nil {
		t.Fatal(err)
	}
	exp.Retain(nets)
	got := srv.Listeners()
	if slices.Contains(got, gw[gone]) {
		t.Errorf("%s removed: the resolver still listens on its gateway %s", gone, gw[gone])
	}
	if !slices.Contains(got, gw[kept]) {
		t.Errorf("%s removed: the resolver stopped listening on %s's gateway %s", gone, kept, gw[kept])
	}
}
