//go:build remote

package migrations_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/dnsstub"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// The real-podman tests. They talk to loopback (the stub upstream), to
// their own probe containers, and to a node-local address they add to lo
// and remove.

const (
	zone        = "mesh.test"
	outsideName = "outside.example.test"
	// testNodeLocal is not the production default, so a running agent is
	// never disturbed.
	testNodeLocal = "169.254.53.77"
)

var outsideAddr = netip.MustParseAddr("192.0.2.80")

var (
	buildOnce sync.Once
	probeBin  string
	buildErr  error
)

// TestMain removes the directory probeBinary built meshprobe in.
func TestMain(m *testing.M) {
	code := m.Run()
	if probeBin != "" {
		os.RemoveAll(filepath.Dir(probeBin))
	}
	os.Exit(code)
}

// probeBinary builds cmd/meshprobe once per test binary.
func probeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshprobe")
		if err != nil {
			buildErr = err
			return
		}
		probeBin = filepath.Join(dir, "meshprobe")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", probeBin, "../cmd/meshprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building meshprobe: %v", buildErr)
	}
	return probeBin
}

// stubUpstream answers A for outsideName with outsideAddr and NXDOMAIN for
// anything else, on a loopback UDP port.
func stubUpstream(t *testing.T) netip.AddrPort {
	t.Helper()
	addr, err := dnsstub.Start(t.Context(), outsideName, outsideAddr)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// nodeLocal adds testNodeLocal to lo for the test, or skips it.
func nodeLocal(t *testing.T) netip.Addr {
	t.Helper()
	a := netip.MustParseAddr(testNodeLocal)
	out, err := exec.Command("ip", "addr", "add", testNodeLocal+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		t.Skipf("cannot add the node-local address %s to lo (needs root): %v: %s", a, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", testNodeLocal+"/32", "dev", "lo").Run() })
	return a
}

type env struct {
	h      *podmantest.Harness
	rt     *podman.Runtime
	image  string
	nets   map[string]migrations.Network
	node   netip.Addr
	stub   netip.AddrPort
	server *resolver.Server
}

var (
	envOnce sync.Once
)

// setup makes the networks (default, DNS-enabled, internal with and
// without DNS), the probe image and a resolver serving zone.
func setup(t *testing.T) *env {
	t.Helper()
	h := podmantest.New(t)
	podmantest.Exclusive(t) // binds gateways and the node-local address
	ctx := context.Background()
	p, err := podman.New(ctx, h.Socket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{h: h, rt: p, node: nodeLocal(t), stub: stubUpstream(t)}
	start := time.Now()
	e.image, err = migrations.ProbeImage(ctx, p, probeBinary(t))
	if err != nil {
		t.Fatalf("ProbeImage: %v", err)
	}
	t.Cleanup(func() { p.RemoveImage(context.Background(), e.image) })
	t.Logf("probe image %s ready in %v", e.image, time.Since(start))
	if again, err := migrations.ProbeImage(ctx, p, probeBinary(t)); err != nil || again != e.image {
		t.Errorf("ProbeImage again = %q, %v; want %q: the same binary makes the same tag", again, err, e.image)
	}

	dnsNet := h.Network("dns")
	intNet := h.Network("int", "--internal")
	// Podman 4.3 gives an internal network without DNS no gateway unless
	// asked for one.
	intPlain := h.Network("intplain", "--internal", "--disable-dns", "--subnet", "10.213.77.0/24", "--gateway", "10.213.77.1")
	intBare := h.Network("intbare", "--internal", "--disable-dns")
	all, err := e.rt.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.nets = map[string]migrations.Network{}
	for _, n := range all {
		switch n.Name {
		case spec.DefaultNetwork:
			e.nets["default"] = n
		case dnsNet:
			e.nets["dns"] = n
		case intNet:
			e.nets["internal"] = n
		case intPlain:
			e.nets["internal-nodns"] = n
		case intBare:
			e.nets["internal-bare"] = n
		}
	}
	if len(e.nets) != 5 {
		t.Fatalf("networks found: %v, want the default and the three made", e.nets)
	}

	e.server, err = resolver.New(resolver.Config{Upstreams: []netip.AddrPort{e.stub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.server.Close() })
	r := &spec.Roster{Generation: 1, Zones: []string{zone}, Names: map[string][]netip.Addr{"db." + zone: {netip.MustParseAddr("10.200.0.5")}}}
	if err := e.server.Update(r); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) runner(t *testing.T, res migrations.Resolver) *migrations.Runner {
	t.Helper()
	r, err := migrations.NewRunner(migrations.RunnerConfig{
		Runtime: e.rt, Resolver: res, Image: e.image, Zone: zone,
		Outside: outsideName, OutsideWant: outsideAddr, NodeLocal: e.node, Timeout: 40 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) list(names ...string) []migrations.Network {
	var out []migrations.Network
	for _, n := range names {
		out = append(out, e.nets[n])
	}
	return out
}

// deaf is a resolver that is down: it never listens anywhere.
type deaf struct{}

func (deaf) Listen(netip.AddrPort) error                          { return nil }
func (deaf) Unlisten(netip.AddrPort) error                        { return nil }
func (deaf) SetAllow([]netip.Prefix)                              {}
func (deaf) SetLocalForward(netip.Prefix, string, netip.AddrPort) {}

func TestProbePodman(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(t.TempDir(), "migrations.json")})
	if err != nil {
		t.Fatal(err)
	}
	nets := e.list("default", "dns", "internal", "internal-nodns", "internal-bare")
	if _, err := gate.Observe(nets); err != nil {
		t.Fatal(err)
	}
	if err := gate.SetFlag(spec.FlagOn); err != nil {
		t.Fatal(err)
	}
	containers := []spec.Container{
		{Name: "a", Networks: []spec.NetworkAttachment{{Name: e.nets["default"].Name}}},
		{Name: "b", Networks: []spec.NetworkAttachment{{Name: e.nets["dns"].Name}}},
		{Name: "c", Networks: []spec.NetworkAttachment{{Name: e.nets["default"].Name}, {Name: e.nets["dns"].Name}}},
	}

	// Down: nothing listens where the strategies say. Every probe fails and
	// the gate stays closed.
	down := e.runner(t, deaf{}).Probe(ctx, e.list("default", "dns"), nil)
	for _, r := range down {
		t.Logf("resolver down: %s: pass=%v strategy=%s reason=%s duration=%v", r.Network, r.Pass, r.Strategy, r.Reason, r.Duration)
		if r.Pass {
			t.Errorf("probe of %s with the resolver down passed, want a failure", r.Network)
		}
	}
	if err := gate.Record(down); err != nil {
		t.Fatal(err)
	}
	for name, m := range gate.Modes(containers, nil) {
		if m.Names != spec.Copy {
			t.Errorf("resolver down: Mode(%s) = %v, want copy", name, m)
		}
	}

	// Up: the real resolver.
	start := time.Now()
	up := e.runner(t, e.server).Probe(ctx, nets, nil)
	t.Logf("probed %d networks in %v", len(nets), time.Since(start))
	want := map[string]struct {
		pass     bool
		strategy migrations.Strategy
	}{
		e.nets["default"].Name:        {true, migrations.StrategyGateway},
		e.nets["dns"].Name:            {true, migrations.StrategyNodeLocal},
		e.nets["internal"].Name:       {false, ""},
		e.nets["internal-nodns"].Name: {true, migrations.StrategyGateway},
		e.nets["internal-bare"].Name:  {false, ""},
	}
	for _, r := range up {
		t.Logf("%s (%s): pass=%v strategy=%s latency=%v duration=%v runtime=%s dns=%v reason=%s",
			r.Network, r.Kind, r.Pass, r.Strategy, r.Latency, r.Duration, r.Runtime, r.DNS, r.Reason)
		w := want[r.Network]
		if r.Pass != w.pass || r.Pass && r.Strategy != w.strategy {
			t.Errorf("probe of %s (%s) = pass %v with %q, want pass %v with %q: %s", r.Network, r.Kind, r.Pass, r.Strategy, w.pass, w.strategy, r.Reason)
		}
		if !strings.HasPrefix(r.Runtime, "podman ") {
			t.Errorf("probe of %s: runtime %q, want podman's version", r.Network, r.Runtime)
		}
	}
	dns := up[1].DNS
	if !slices.Contains(dns.Search, migrations.PodmanDNSZone) || dns.Servers[0] != e.node {
		t.Errorf("DNS-enabled network's proven configuration = %+v, want the node-local server and search %s", dns, migrations.PodmanDNSZone)
	}
	if err := gate.Record(up); err != nil {
		t.Fatal(err)
	}
	got := gate.Modes(containers, nil)
	for _, name := range []string{"a", "b", "c"} {
		if got[name].Names != spec.Resolve {
			t.Errorf("resolver up, flag on: Mode(%s) = %v, want resolve", name, got[name])
		}
	}
	if err := gate.SetFlag(spec.FlagAuto); err != nil {
		t.Fatal(err)
	}
	// Auto from a fresh gate: the internal network with aardvark failed,
	// so nothing switches.
	auto, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(t.TempDir(), "migrations.json")})
	if err != nil {
		t.Fatal(err)
	}
	auto.Observe(nets)
	auto.SetFlag(spec.FlagAuto)
	auto.Record(up)
	for name, m := range auto.Modes(containers, nil) {
		if m.Names != spec.Copy {
			t.Errorf("auto with a failing network: Mode(%s) = %v, want copy", name, m)
		}
	}

	// Unreachable after the switch: the resolver stops serving the
	// addresses of both strategies. The probe fails again.
	for _, a := range []netip.AddrPort{netip.AddrPortFrom(e.nets["default"].Subnets[0].Gateway, 53), netip.AddrPortFrom(e.node, 53)} {
		if err := e.server.Unlisten(a); err != nil {
			t.Fatal(err)
		}
	}
	again := e.runner(t, deaf{}).Probe(ctx, e.list("default"), gate.Strategies())
	if again[0].Pass {
		t.Errorf("probe with the gateway listener gone passed, want a failure")
	}
	t.Logf("after unlisten: %s", again[0].Reason)
	if err := gate.Record(again); err != nil {
		t.Fatal(err)
	}
	if m := gate.Mode([]string{e.nets["default"].Name}, nil); m.Names != spec.Copy {
		t.Errorf("a new container on a failing network: %v, want copy", m)
	}
}
