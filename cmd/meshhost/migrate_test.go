package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// TestMigratePauseJudgesWithTheAgentsProofMaxAge: `meshhost migrate pause`
// and `resume` switch nothing the agent's --proof-max-age refuses. The
// agent (--proof-max-age 10m, no prober) holds a 30-minute-old passing
// probe under flag on and keeps the network in copy mode; before, either
// command re-evaluated the switch with the default 1h and put the network
// in resolve mode.
func TestMigratePauseJudgesWithTheAgentsProofMaxAge(t *testing.T) {
	dir := statedir.New(t.TempDir())
	podman := migrations.Network{Name: "podman", Driver: "bridge",
		Subnets: []migrations.Subnet{{Prefix: netip.MustParsePrefix("10.88.0.0/16"), Gateway: netip.MustParseAddr("10.88.0.1")}}}
	agentGate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace", MaxProofAge: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentGate.Observe([]migrations.Network{podman}); err != nil {
		t.Fatal(err)
	}
	gateway := spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}}
	if err := agentGate.Record([]migrations.Result{{Network: "podman", Driver: "bridge", Kind: migrations.KindOf(podman), Pass: true,
		At: time.Now().Add(-30 * time.Minute), Strategy: migrations.StrategyGateway, DNS: gateway}}); err != nil {
		t.Fatal(err)
	}
	if err := agentGate.SetFlag(spec.FlagOn); err != nil {
		t.Fatal(err)
	}
	resolve := func() bool {
		t.Helper()
		s, err := migrations.LoadState(dir.Migrations())
		if err != nil {
			t.Fatal(err)
		}
		return s.Networks["podman"].Resolve
	}
	if resolve() {
		t.Fatal("setup: the agent's gate switched on a proof older than its --proof-max-age")
	}
	for _, sub := range []string{"pause", "resume"} {
		if code, out, errOut := runCLI(t, nil, "migrate", sub, "--state", dir.Path(), "--machine", "ace"); code != 0 {
			t.Fatalf("meshhost migrate %s = exit %d: %s%s", sub, code, out, errOut)
		}
		if resolve() {
			t.Errorf("meshhost migrate %s switched the network on a 30-minute-old proof; the agent's --proof-max-age is 10m", sub)
		}
	}
}
