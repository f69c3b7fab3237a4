package migrations

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestProofOfAnotherAddressSwitchesNothing: a proof of the resolver at
// address A (a probe run with other --node-local/--loopback flags than the
// agent's) does not switch a network whose containers the agent's exposer
// serves at B: recorded, it counts as not passed with the reason; already
// in the state file (a proof of the agent's earlier address), it counts as
// unproven. Both strategies whose address is configured.
func TestProofOfAnotherAddressSwitchesNothing(t *testing.T) {
	for _, tt := range []struct {
		strategy Strategy
		proved   spec.DNSConfig
		cfg      GateConfig // the agent's addresses (B)
	}{
		{StrategyNodeLocal, nodeDNS, GateConfig{NodeLocal: netip.MustParseAddr("169.254.20.10")}},
		{StrategyAardvark, spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr(DefaultLoopback)}, Search: []string{PodmanDNSZone}, Options: dnsOptions},
			GateConfig{Loopback: netip.MustParseAddr("127.0.0.54")}},
	} {
		t.Run(string(tt.strategy), func(t *testing.T) {
			r := result(meshNet, true, t0)
			r.Strategy, r.DNS = tt.strategy, tt.proved
			for _, stored := range []bool{false, true} {
				dir := t.TempDir()
				clk := &fakeClock{now: t0}
				path := filepath.Join(dir, stateFile)
				if stored {
					// Proven while the agent's address was the default A.
					old := openGate(t, dir, clk, nil)
					_, err := old.Observe([]Network{meshNet})
					mustDo(t, err)
					mustDo(t, old.SetFlag(spec.FlagOn))
					mustDo(t, old.Record([]Result{r}))
					if got := old.Mode([]string{"mesh"}, nil); got.Names != spec.Resolve {
						t.Fatalf("set-up: the proof of the agent's own address: Mode = %v, want resolve", got)
					}
				}
				cfg := tt.cfg
				cfg.Path, cfg.Now = path, clk.Now
				agent, err := OpenGate(cfg) // the agent's gate: records B
				if err != nil {
					t.Fatal(err)
				}
				if !stored {
					_, err := agent.Observe([]Network{meshNet})
					mustDo(t, err)
					mustDo(t, agent.SetFlag(spec.FlagOn))
					// probe --state of an older meshhost: an operator's gate,
					// with no addresses of its own, records a proof of A.
					op := openGate(t, dir, clk, nil)
					mustDo(t, op.Record([]Result{r}))
					last := op.State().Networks["mesh"].Last
					if last == nil || last.Pass || !strings.Contains(last.Reason, tt.proved.Servers[0].String()) {
						t.Errorf("recorded proof of %s: Last = %+v, want not passed, with the address in its reason", tt.proved.Servers[0], last)
					}
				}
				if got := agent.Mode([]string{"mesh"}, nil); got.Names != spec.Copy {
					t.Errorf("stored=%v: a proof of %v on a network the agent serves elsewhere: Mode = %v, want copy", stored, tt.proved.Servers, got)
				}
			}
		})
	}
}
