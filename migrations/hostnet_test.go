package migrations

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// hostProbes runs probe containers that pass while pass is set, and
// records what each was given.
type hostProbes struct {
	fakeProbes
	mu   sync.Mutex
	pass bool
	ran  []spec.Rendered
}

func (h *hostProbes) RunOnce(_ context.Context, r spec.Rendered) (int, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ran = append(h.ran, r)
	if !h.pass {
		return 1, `{"pass":false,"checks":[{"check":"canary","ok":false,"error":"i/o timeout"}],"resolv_conf":"nameserver ` + DefaultLoopback + `\n"}`, nil
	}
	return 0, `{"pass":true,"checks":[{"check":"canary","ok":true,"latency_ms":1},{"check":"outside","ok":true}]}`, nil
}

// TestWithHost: the host's network is a network of the machine only where
// a declared container is on it; podman lists none.
func TestWithHost(t *testing.T) {
	bridgeNet := Network{Name: "mesh", Driver: "bridge"}
	for _, tc := range []struct {
		name string
		nets []Network
		used []string
		want []string
	}{
		{"unused", []Network{bridgeNet}, []string{"mesh", "podman"}, []string{"mesh"}},
		{"used", []Network{bridgeNet}, []string{spec.HostNetwork, "mesh"}, []string{"mesh", spec.HostNetwork}},
		{"listed already", []Network{bridgeNet, HostNetwork}, []string{spec.HostNetwork}, []string{"mesh", spec.HostNetwork}},
		{"no networks listed", nil, []string{spec.HostNetwork}, []string{spec.HostNetwork}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, n := range WithHost(tc.nets, tc.used) {
				got = append(got, n.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("WithHost (-want +got):\n%s", diff)
			}
		})
	}
	if KindOf(HostNetwork) != KindHost {
		t.Errorf("KindOf(HostNetwork) = %s, want %s", KindOf(HostNetwork), KindHost)
	}
}

// TestHostNetworkEndpoint: on the host's network the resolver is asked on
// the loopback address (the --loopback flag's), which nothing off the
// machine reaches and nothing needs assigning; no other network shares the
// host's loopback.
func TestHostNetworkEndpoint(t *testing.T) {
	lo := netip.MustParseAddr("127.53.0.9")
	e, err := NewExposer(ExposerConfig{Resolver: newFakeResolver(), Loopback: lo})
	if err != nil {
		t.Fatal(err)
	}
	if got := candidates(KindHost); len(got) == 0 || got[0] != StrategyLoopback {
		t.Errorf("candidates(%s) = %v, want %s first", KindHost, got, StrategyLoopback)
	}
	got, err := e.endpoint(HostNetwork, StrategyLoopback)
	if err != nil {
		t.Fatal(err)
	}
	want := endpoint{listen: []netip.AddrPort{netip.AddrPortFrom(lo, 53)}, dns: spec.DNSConfig{Servers: []netip.Addr{lo}, Options: []string{"ndots:1"}}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(endpoint{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
		cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("endpoint(host, loopback) (-want +got):\n%s", diff)
	}
	for _, n := range []Network{{Name: "mesh", Driver: "bridge"}, {Name: "dns", Driver: "bridge", DNSEnabled: true}} {
		if _, err := e.endpoint(n, StrategyLoopback); err == nil {
			t.Errorf("endpoint(%s, loopback) = nil error, want it refused: only the host's network shares its loopback", n.Name)
		}
	}
}

// TestHostNetworkMigration: the host's network is migrated as any other.
// A declaration with a container on it makes it a network of the machine;
// it is probed by a probe container on the host's network given the
// loopback resolver; until that passes the container keeps its copy
// (fail closed); the pass switches it once to the loopback resolver, later
// passes keep it there, and failing probes roll it back to copy mode once.
func TestHostNetworkMigration(t *testing.T) {
	clk := &fakeClock{now: t0}
	g := openGate(t, t.TempDir(), clk, nil)
	rt := &hostProbes{fakeProbes: fakeProbes{containers: map[string]ProbeContainer{}}}
	res := newFakeResolver()
	exp, err := NewExposer(ExposerConfig{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(RunnerConfig{Runtime: rt, Exposer: exp, Image: "img", Zone: "internal", Outside: "example.org", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	edge := container("edge", spec.HostNetwork)
	decl := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOn, Roster: &spec.Roster{Generation: 1}, Containers: []spec.Container{edge}}
	mustDo(t, g.Declare(decl))

	var modes []spec.NameMode // edge's mode after each pass, as the reconciler would create it
	var cur *spec.Mode        // the mode edge runs in; nil before the first pass
	pass := func() {
		t.Helper()
		nets := WithHost(nil, g.State().Used)
		if _, err := g.Observe(nets); err != nil {
			t.Fatal(err)
		}
		byName := map[string]Network{}
		for _, n := range nets {
			byName[n.Name] = n
		}
		var need []Network
		for _, name := range g.NeedsProbe() {
			need = append(need, byName[name])
		}
		results := r.Probe(context.Background(), need, g.Strategies())
		mustDo(t, g.Record(results))

		var observed []reconcile.Observed
		if cur != nil {
			observed = append(observed, running(t, "edge", *cur, spec.HostNetwork))
		}
		m := g.Modes([]spec.Container{edge}, observed)["edge"]
		modes = append(modes, m.Names)
		cur = &m // the reconciler creates edge so
		if m.Names == spec.Resolve {
			if want := []netip.Addr{netip.MustParseAddr(DefaultLoopback)}; !cmp.Equal(want, m.DNS.Servers, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
				t.Errorf("edge's DNS servers in resolve mode = %v, want the loopback resolver %v", m.DNS.Servers, want)
			}
		}
		clk.now = clk.now.Add(11 * time.Minute) // past Interval: every network is probed again
	}

	pass() // the probe fails: edge keeps its copy
	rt.pass = true
	pass() // passes: resolve
	pass() // passes again: stays
	rt.pass = false
	pass() // fails once: failing; edge runs in resolve mode and keeps it
	pass() // fails twice (RollbackAfter): rolled back to copy

	if len(rt.ran) == 0 {
		t.Fatal("no probe container ran")
	}
	for _, p := range rt.ran {
		if !p.OnHostNetwork() || len(p.Networks) != 1 {
			t.Errorf("probe container %s on networks %+v, want the host's network only", p.Name, p.Networks)
		}
		if p.Mode != spec.Resolve || len(p.DNS.Servers) != 1 || p.DNS.Servers[0].String() != DefaultLoopback {
			t.Errorf("probe container %s given %s %+v, want resolve mode with the loopback resolver %s", p.Name, p.Mode, p.DNS, DefaultLoopback)
		}
		if strings.Contains(strings.Join(p.Command, " "), "-peer") {
			t.Errorf("probe container %s asks a peer name; the host's network has no runtime DNS", p.Name)
		}
	}
	if !res.listening[netip.MustParseAddrPort(DefaultLoopback+":53")] {
		t.Errorf("the resolver does not listen on %s:53 for the host's network; listening on %v", DefaultLoopback, res.listening)
	}
	// One switch, one rollback: each a single change of edge's create-time
	// settings, which the reconciler turns into one replacement.
	want := []spec.NameMode{spec.Copy, spec.Resolve, spec.Resolve, spec.Resolve, spec.Copy}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("edge's mode pass by pass (-want +got):\n%s", diff)
	}
	if ns := g.State().Networks[spec.HostNetwork]; ns == nil || ns.Resolve || ns.Kind != KindHost {
		t.Errorf("host network state after the rollback = %+v, want kind %s in copy mode", ns, KindHost)
	}
}
