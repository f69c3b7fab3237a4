package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
)

// TestProbeCommand runs `meshhost probe` against real podman: one row per
// network, saying which strategy each got. Podman's default network passes
// through its gateway; a DNS-enabled network through aardvark-dns where it
// forwards to a container's --dns servers (podman 4.4 and later), while on
// podman 4.3, with no node-local address assigned, it fails, naming what
// each strategy lacked.
func TestProbeCommand(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // the probe binds the default network's gateway
	probe := buildMeshprobe(t, h)
	dnsNet := h.Network("dns")
	v := podmantest.Version(t)
	args := []string{"probe", "--podman", h.Socket(), "--probe-binary", probe,
		"--node-local", "169.254.53.98", // not assigned
		"--loopback", "127.53.0.98"}

	code, out, stderr := runCLI(t, nil, append(args, "--output", "json")...)
	var results []probeResultJSON
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("meshhost probe --output json (exit %d): %v\n%s\n%s", code, err, out, stderr)
	}
	checkGolden(t, "probe.shape", jsonShape(t, out))
	rows := map[string]probeResultJSON{}
	failed := false
	for _, r := range results {
		rows[r.Network] = r
		failed = failed || !r.Pass
		t.Logf("%s: pass=%v strategy=%s reason=%s", r.Network, r.Pass, r.Strategy, r.Reason)
	}
	if want := map[bool]int{true: 3, false: 0}[failed]; code != want {
		t.Errorf("meshhost probe exited %d, want %d (a network failed: %v)", code, want, failed)
	}
	if r := rows["podman"]; !r.Pass || r.Strategy != string(migrations.StrategyGateway) {
		t.Errorf("podman's default network: pass=%v strategy=%s, want a pass through its gateway: %s", r.Pass, r.Strategy, r.Reason)
	}
	r := rows[dnsNet]
	if v.AtLeast(4, 4) {
		if !r.Pass || r.Strategy != string(migrations.StrategyAardvark) {
			t.Errorf("podman %s, DNS-enabled network: pass=%v strategy=%s, want a pass through aardvark-dns: %s", v, r.Pass, r.Strategy, r.Reason)
		}
	} else if r.Pass || !strings.Contains(r.Reason, "aardvark: ") || !strings.Contains(r.Reason, "node-local: node-local address 169.254.53.98 is not assigned") {
		t.Errorf("podman %s, DNS-enabled network: pass=%v, reason %q; want a failure naming both strategies", v, r.Pass, r.Reason)
	}

	// The table says the same.
	_, text, _ := runCLI(t, nil, args...)
	t.Logf("meshhost probe:\n%s", text)
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[0] != dnsNet {
			continue
		}
		if want := map[bool]string{true: "aardvark pass", false: "node-local fail"}[v.AtLeast(4, 4)]; f[3]+" "+f[4] != want {
			t.Errorf("meshhost probe's row for %s: %q, want strategy and result %q", dnsNet, l, want)
		}
	}
}
