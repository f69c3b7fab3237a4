package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
)

// TestProbeStateTakesTheAgentsAddresses: probe --state records proofs for
// the agent, so it proves the addresses the agent's resolver is exposed
// on, as the agent's gate records them in the state directory (the
// defaults before it has): a --node-local or --loopback that differs is
// refused (exit 64, naming the flag and the agent's address) before
// anything runs; one that agrees, or none, goes on (here to the missing
// podman socket). Without --state the flags are the probe's own.
func TestProbeStateTakesTheAgentsAddresses(t *testing.T) {
	fresh := t.TempDir() // no agent has recorded its addresses: the defaults
	agent := t.TempDir()
	if _, err := migrations.OpenGate(migrations.GateConfig{Path: statedir.New(agent).Migrations(),
		NodeLocal: netip.MustParseAddr("169.254.20.10"), Loopback: netip.MustParseAddr("127.0.0.54")}); err != nil {
		t.Fatal(err)
	}
	const noPodman = "no podman socket"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"loopback other than the default", []string{"--state", fresh, "--loopback", "127.0.0.99"}, 64, []string{"--loopback 127.0.0.99", migrations.DefaultLoopback}},
		{"node-local other than the default", []string{"--state", fresh, "--node-local", "169.254.1.1"}, 64, []string{"--node-local 169.254.1.1", migrations.DefaultNodeLocal}},
		{"the default, the agent's other", []string{"--state", agent, "--loopback", migrations.DefaultLoopback}, 64, []string{"127.0.0.54"}},
		{"node-local other than the agent's", []string{"--state", agent, "--node-local", migrations.DefaultNodeLocal}, 64, []string{"169.254.20.10"}},
		{"the agent's", []string{"--state", agent, "--loopback", "127.0.0.54", "--node-local", "169.254.20.10"}, 1, []string{noPodman}},
		{"no flags", []string{"--state", agent}, 1, []string{noPodman}},
		{"without --state", []string{"--loopback", "127.0.0.99"}, 1, []string{noPodman}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"probe"}, tc.args...)
			code, out, errOut := runCLI(t, nil, args...)
			if code != tc.code {
				t.Errorf("meshhost %v = exit %d, want %d\n%s%s", args, code, tc.code, out, errOut)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("meshhost %v: stderr does not say %q:\n%s", args, s, errOut)
				}
			}
		})
	}
}
