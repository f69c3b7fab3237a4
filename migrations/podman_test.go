//go:build remote

package migrations_test

import (
	"context"
	"github.com/meshhost/meshhost/internal/testkit/needs"
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
	// testNodeLocal and testLoopback are not the production defaults, so a
	// running agent is never disturbed.
	testNodeLocal = "169.254.53.77"
	testLoopback  = "127.53.0.77"
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
		needs.Missing(t, "cannot add the node-local address %s to lo (needs root): %v: %s", a, err, out)
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
// without DNS; dual-stack and IPv6-only with and without DNS), the probe
// image and a resolver serving zone.
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
	// Dual stack: podman picks both subnets. IPv6 only: a v6 subnet given
	// without --ipv6 (with --ipv6 podman adds a v4 one).
	dualDNS := h.Network("dualdns", "--ipv6")
	dualPlain := h.Network("dualplain", "--ipv6", "--disable-dns")
	v6DNS := h.Network("v6dns", "--subnet", "fd53:77:1::/64")
	v6Plain := h.Network("v6plain", "--subnet", "fd53:77:2::/64", "--disable-dns")
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
		case dualDNS:
			e.nets["dual-dns"] = n
		case dualPlain:
			e.nets["dual-plain"] = n
		case v6DNS:
			e.nets["v6-dns"] = n
		case v6Plain:
			e.nets["v6-plain"] = n
		}
	}
	if len(e.nets) != 9 {
		t.Fatalf("networks found: %v, want the default and the eight made", e.nets)
	}
	for _, n := range []string{"v6-dns", "v6-plain"} {
		for _, sn := range e.nets[n].Subnets {
			if sn.Prefix.Addr().Is4() {
				t.Fatalf("network %s has an IPv4 subnet %s, want IPv6 only", n, sn.Prefix)
			}
		}
	}

	e.server = e.newServer(t)
	return e
}

// newServer returns a resolver serving zone, forwarding to the stub
// upstream, closed when the test ends.
func (e *env) newServer(t *testing.T) *resolver.Server {
	t.Helper()
	srv, err := resolver.New(resolver.Config{Upstreams: []netip.AddrPort{e.stub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	r := &spec.Roster{Generation: 1, Zones: []string{zone}, Names: map[string][]netip.Addr{"db." + zone: {netip.MustParseAddr("10.200.0.5")}}}
	if err := srv.Update(r); err != nil {
		t.Fatal(err)
	}
	return srv
}

func (e *env) runner(t *testing.T, res migrations.Resolver) *migrations.Runner {
	t.Helper()
	r, err := migrations.NewRunner(migrations.RunnerConfig{
		Runtime: e.rt, Resolver: res, Image: e.image, Zone: zone,
		Outside: outsideName, OutsideWant: outsideAddr, NodeLocal: e.node, Loopback: netip.MustParseAddr(testLoopback),
		Timeout: 40 * time.Second,
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

// selfRefusing is a resolver that answers only loopback and container
// subnets, as meshhost did before it allowed the node-local address
// itself: it drops single addresses from its allow list.
type selfRefusing struct{ *resolver.Server }

func (r selfRefusing) SetAllow(p []netip.Prefix) {
	r.Server.SetAllow(slices.DeleteFunc(slices.Clone(p), func(p netip.Prefix) bool { return p.IsSingleIP() }))
}

func TestProbePodman(t *testing.T) {
	e := setup(t)
	v := podmantest.Version(t)
	// Podman 4.4 and later keep aardvark-dns as the nameserver of a
	// container given --dns on a DNS-enabled network, and make it forward
	// to the given server: the aardvark strategy works there, and the
	// node-local one goes through aardvark-dns too.
	aardvarkForwards := v.AtLeast(4, 4)
	t.Logf("podman %s: aardvark-dns forwards to a container's --dns servers: %v", v, aardvarkForwards)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(t.TempDir(), "migrations.json"), NodeLocal: e.node, Loopback: netip.MustParseAddr(testLoopback)})
	if err != nil {
		t.Fatal(err)
	}
	nets := e.list("default", "dns", "internal", "internal-nodns", "internal-bare", "dual-dns", "dual-plain", "v6-dns", "v6-plain")
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

	// The node-local strategy on a DNS-enabled network, tried first. Where
	// aardvark-dns forwards, it asks the node-local address from the
	// node-local address itself: a resolver answering only loopback and
	// the container subnets (meshhost before it allowed that address)
	// refuses it, and the lookup fails as "server misbehaving". Podman 4.3
	// writes the node-local address into resolv.conf, so the container
	// asks it from its subnet, and that resolver answers.
	nodeLocalFirst := map[string]migrations.Strategy{e.nets["dns"].Name: migrations.StrategyNodeLocal, e.nets["dual-dns"].Name: migrations.StrategyNodeLocal}
	refusing := e.newServer(t)
	for _, r := range e.runner(t, selfRefusing{refusing}).Probe(ctx, e.list("dns"), nodeLocalFirst) {
		a := r.Attempts[0]
		t.Logf("node-local, the node-local address refused: %s: pass=%v reason=%s", r.Network, a.Pass, a.Reason)
		if a.Strategy != migrations.StrategyNodeLocal || a.Pass == aardvarkForwards {
			t.Errorf("podman %s: node-local with the node-local address refused as a client: %s pass=%v, want pass=%v (%s)", v, a.Strategy, a.Pass, !aardvarkForwards, a.Reason)
		}
		if aardvarkForwards && !strings.Contains(a.Reason, "server misbehaving") {
			t.Errorf("podman %s: node-local refused: reason %q, want the REFUSED answer (server misbehaving)", v, a.Reason)
		}
	}
	refusing.Close()
	// As meshhost does it: the node-local address is answered.
	nl := e.newServer(t)
	for _, r := range e.runner(t, nl).Probe(ctx, e.list("dns", "dual-dns"), nodeLocalFirst) {
		a := r.Attempts[0]
		t.Logf("node-local: %s: pass=%v reason=%s", r.Network, a.Pass, a.Reason)
		if a.Strategy != migrations.StrategyNodeLocal || !a.Pass {
			t.Errorf("podman %s: %s on %s: pass=%v, want a pass: %s", v, a.Strategy, r.Network, a.Pass, a.Reason)
		}
	}
	nl.Close()

	// Up: the real resolver, every network, each strategy in its order.
	start := time.Now()
	up := e.runner(t, e.server).Probe(ctx, nets, nil)
	t.Logf("probed %d networks in %v", len(nets), time.Since(start))
	dnsStrategy := migrations.StrategyNodeLocal
	if aardvarkForwards {
		dnsStrategy = migrations.StrategyAardvark
	}
	type expect struct {
		pass     bool
		strategy migrations.Strategy
		reason   string // in the reason of a failure
	}
	want := map[string]expect{
		e.nets["default"].Name:        {true, migrations.StrategyGateway, ""},
		e.nets["dns"].Name:            {true, dnsStrategy, ""},
		e.nets["internal"].Name:       {false, "", "no strategy can work"},
		e.nets["internal-nodns"].Name: {true, migrations.StrategyGateway, ""},
		e.nets["internal-bare"].Name:  {false, "", "no gateway"},
		e.nets["dual-dns"].Name:       {true, dnsStrategy, ""},
		e.nets["dual-plain"].Name:     {true, migrations.StrategyGateway, ""},
		e.nets["v6-plain"].Name:       {true, migrations.StrategyGateway, ""},
		// IPv6 only with aardvark-dns: through it where it forwards; podman
		// 4.3 gives the container the IPv4 node-local address, which it
		// has no address to reach.
		e.nets["v6-dns"].Name: map[bool]expect{
			true:  {true, migrations.StrategyAardvark, ""},
			false: {false, "", "no IPv4 address to reach its nameserver " + testNodeLocal},
		}[aardvarkForwards],
	}
	byName := map[string]migrations.Result{}
	for _, r := range up {
		byName[r.Network] = r
		t.Logf("%s (%s): pass=%v strategy=%s latency=%v duration=%v runtime=%s dns=%v reason=%s",
			r.Network, r.Kind, r.Pass, r.Strategy, r.Latency, r.Duration, r.Runtime, r.DNS, r.Reason)
		w := want[r.Network]
		if r.Pass != w.pass || r.Pass && r.Strategy != w.strategy {
			t.Errorf("probe of %s (%s) = pass %v with %q, want pass %v with %q: %s", r.Network, r.Kind, r.Pass, r.Strategy, w.pass, w.strategy, r.Reason)
		}
		if !r.Pass && !strings.Contains(r.Reason, w.reason) {
			t.Errorf("probe of %s (%s) failed for %q, want the reason to say %q", r.Network, r.Kind, r.Reason, w.reason)
		}
		if !strings.HasPrefix(r.Runtime, "podman ") {
			t.Errorf("probe of %s: runtime %q, want podman's version", r.Network, r.Runtime)
		}
	}
	// Where aardvark-dns does not forward, the aardvark strategy was tried
	// first and failed, saying why.
	if !aardvarkForwards {
		for _, n := range []string{"dns", "dual-dns", "v6-dns"} {
			r := byName[e.nets[n].Name]
			if len(r.Attempts) == 0 || r.Attempts[0].Strategy != migrations.StrategyAardvark || r.Attempts[0].Pass ||
				!strings.Contains(r.Attempts[0].Reason, "as podman before 4.4 does") {
				t.Errorf("podman %s: %s's first attempt %+v, want the aardvark strategy failing because podman replaced aardvark-dns in resolv.conf", v, n, r.Attempts)
			}
		}
	}
	wantServer := map[string]netip.Addr{
		"dns":        map[bool]netip.Addr{true: netip.MustParseAddr(testLoopback), false: e.node}[aardvarkForwards],
		"dual-plain": e.nets["dual-plain"].Subnets[0].Gateway,
		"v6-plain":   e.nets["v6-plain"].Subnets[0].Gateway,
	}
	for _, sn := range e.nets["dual-plain"].Subnets {
		if sn.Gateway.Is4() {
			wantServer["dual-plain"] = sn.Gateway // IPv4, on a dual-stack network
		}
	}
	for n, srv := range wantServer {
		if dns := byName[e.nets[n].Name].DNS; len(dns.Servers) != 1 || dns.Servers[0] != srv {
			t.Errorf("%s's proven configuration = %+v, want the one server %s", n, dns, srv)
		}
	}
	if dns := byName[e.nets["dns"].Name].DNS; !slices.Contains(dns.Search, migrations.PodmanDNSZone) {
		t.Errorf("DNS-enabled network's proven configuration = %+v, want search %s", dns, migrations.PodmanDNSZone)
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
	auto, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(t.TempDir(), "migrations.json"), NodeLocal: e.node, Loopback: netip.MustParseAddr(testLoopback)})
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
	// Auto with the declaration's networks known: the failing networks
	// are ones no declared container uses, so the machine switches past
	// them; a container on one still gets copy mode.
	declared, err := migrations.OpenGate(migrations.GateConfig{Path: filepath.Join(t.TempDir(), "migrations.json"), NodeLocal: e.node, Loopback: netip.MustParseAddr(testLoopback)})
	if err != nil {
		t.Fatal(err)
	}
	if err := declared.Declare(&spec.Declaration{MeshNames: spec.FlagAuto, Containers: containers}); err != nil {
		t.Fatal(err)
	}
	if _, err := declared.Observe(nets); err != nil {
		t.Fatal(err)
	}
	if err := declared.Record(up); err != nil {
		t.Fatal(err)
	}
	a := declared.Auto()
	t.Logf("auto, declared on the default and DNS-enabled networks: %+v", a)
	if a.SwitchedAt.IsZero() || len(a.Holding) != 0 || !slices.Contains(a.Unused, e.nets["internal"].Name) {
		t.Errorf("auto with only unused networks failing: %+v, want switched, nothing holding, %s unused", a, e.nets["internal"].Name)
	}
	for name, m := range declared.Modes(containers, nil) {
		if m.Names != spec.Resolve {
			t.Errorf("auto, the failing networks unused: Mode(%s) = %v, want resolve", name, m)
		}
	}
	if m := declared.Mode([]string{e.nets["internal"].Name}, nil); m.Names != spec.Copy {
		t.Errorf("auto, switched: a container on %s, whose probe failed, gets %v, want copy", e.nets["internal"].Name, m)
	}

	// Unreachable after the switch: the resolver stops serving every
	// address the strategies gave it. The probe fails again.
	for _, a := range e.server.Listeners() {
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
