package migrations

import (
	"bytes"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// lonelyNet is an --internal network with aardvark-dns: no strategy can
// work there, so its probe always fails.
var lonelyNet = Network{Name: "lonely", Driver: "bridge", Internal: true, DNSEnabled: true,
	Subnets: []Subnet{{netip.MustParsePrefix("10.91.0.0/24"), netip.MustParseAddr("10.91.0.1")}}}

func declare(flag spec.MeshNamesFlag, cs ...spec.Container) *spec.Declaration {
	return &spec.Declaration{MeshNames: flag, Containers: cs}
}

func TestUsedNetworks(t *testing.T) {
	for _, tc := range []struct {
		name string
		cs   []spec.Container
		want []string
	}{
		{"none declared", nil, []string{}},
		{"no network: the default one", []spec.Container{container("a")}, []string{"podman"}},
		{"sorted, once each", []spec.Container{container("a", "mesh", "podman"), container("b", "mesh"), container("c")}, []string{"mesh", "podman"}},
		{"only declared ones", []spec.Container{container("a", "mesh")}, []string{"mesh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UsedNetworks(tc.cs)
			if got == nil {
				t.Fatalf("UsedNetworks = nil, want non-nil (nil means not recorded)")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("UsedNetworks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAutoWaitsOnlyForUsedNetworks: under auto the machine switches once
// every network a declared container uses passed its probe; one no
// declared container uses (lonely, whose probe can never pass) is probed
// and reported, and does not hold it back.
func TestAutoWaitsOnlyForUsedNetworks(t *testing.T) {
	type probe int
	const (
		unprobed probe = iota
		pass
		fail
		stale // passed, longer ago than MaxProofAge
	)
	for _, tc := range []struct {
		name       string
		containers []spec.Container // nil with undeclared: Declare is never called
		undeclared bool
		podman     probe
		mesh       probe
		switches   bool
		holding    []string
		unused     []string
	}{
		{name: "unused network failing", containers: []spec.Container{container("a"), container("b", "mesh")},
			podman: pass, mesh: pass, switches: true, unused: []string{"lonely"}},
		{name: "only the default network used", containers: []spec.Container{container("a")},
			podman: pass, mesh: fail, switches: true, unused: []string{"lonely", "mesh"}},
		{name: "used network failing", containers: []spec.Container{container("a"), container("b", "lonely")},
			podman: pass, mesh: pass, holding: []string{"lonely"}, unused: []string{"mesh"}},
		{name: "used network not probed yet", containers: []spec.Container{container("a", "mesh")},
			podman: pass, mesh: unprobed, holding: []string{"mesh"}, unused: []string{"lonely", "podman"}},
		{name: "used network's proof too old", containers: []spec.Container{container("a", "mesh")},
			podman: pass, mesh: stale, holding: []string{"mesh"}, unused: []string{"lonely", "podman"}},
		{name: "no container declared", containers: []spec.Container{},
			podman: pass, mesh: pass, unused: []string{"lonely", "mesh", "podman"}},
		{name: "declaration not recorded: every network holds", undeclared: true,
			podman: pass, mesh: pass, holding: []string{"lonely"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t0}
			g := openGate(t, t.TempDir(), clk, nil)
			if tc.undeclared {
				mustDo(t, g.SetFlag(spec.FlagAuto))
			} else {
				mustDo(t, g.Declare(declare(spec.FlagAuto, tc.containers...)))
			}
			_, err := g.Observe([]Network{defaultNet, meshNet, lonelyNet})
			mustDo(t, err)
			rs := []Result{result(lonelyNet, false, clk.now)}
			for _, p := range []struct {
				n Network
				p probe
			}{{defaultNet, tc.podman}, {meshNet, tc.mesh}} {
				switch p.p {
				case pass, fail:
					rs = append(rs, result(p.n, p.p == pass, clk.now))
				case stale:
					rs = append(rs, result(p.n, true, clk.now.Add(-2*DefaultMaxProofAge)))
				}
			}
			mustDo(t, g.Record(rs))

			st := g.State()
			if got := !st.AutoSwitchedAt.IsZero(); got != tc.switches {
				t.Errorf("switched = %v, want %v", got, tc.switches)
			}
			a := g.Auto()
			if diff := cmp.Diff(tc.holding, a.Holding); diff != "" {
				t.Errorf("Auto().Holding (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.unused, a.Unused); diff != "" {
				t.Errorf("Auto().Unused (-want +got):\n%s", diff)
			}
			if a.UsedKnown == tc.undeclared {
				t.Errorf("Auto().UsedKnown = %v, want %v", a.UsedKnown, !tc.undeclared)
			}
			// Failing closed is per network: lonely never switches, and a
			// container there gets copy mode whether or not it is used.
			if st.Networks["lonely"].Resolve {
				t.Error("lonely switched to resolve mode with a failing probe")
			}
			if m := g.Mode([]string{"lonely"}, nil); m.Names != spec.Copy {
				t.Errorf("Mode(lonely) = %v, want copy", m)
			}
			if m := g.Mode(nil, nil); (m.Names == spec.Resolve) != tc.switches {
				t.Errorf("Mode(default network) = %v, want resolve = %v", m, tc.switches)
			}
		})
	}
}

// TestAutoAfterSwitchNewlyUsedNetwork: after the machine switched past an
// unused network whose probe fails, a container declared onto it gets
// copy mode (and so does one that joins it), the network keeps being
// probed, and once its probe passes it switches on its own.
func TestAutoAfterSwitchNewlyUsedNetwork(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	mustDo(t, g.Declare(declare(spec.FlagAuto, container("a"))))
	_, err := g.Observe([]Network{defaultNet, lonelyNet})
	mustDo(t, err)
	mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now), result(lonelyNet, false, clk.now)}))
	if g.State().AutoSwitchedAt.IsZero() {
		t.Fatal("setup: the machine did not switch past the unused network")
	}
	cs := []spec.Container{container("a"), container("b", "lonely"), container("c", "podman", "lonely")}
	mustDo(t, g.Declare(declare(spec.FlagAuto, cs...)))
	if g.State().AutoSwitchedAt.IsZero() {
		t.Error("declaring a container onto a failing network switched the machine back")
	}
	want := map[string]spec.Mode{"a": gatewayMode, "b": copyMode, "c": copyMode}
	if diff := cmp.Diff(want, g.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("Modes with lonely used and failing (-want +got):\n%s", diff)
	}
	if a := g.Auto(); a.SwitchedAt.IsZero() {
		t.Errorf("Auto() = %+v, want it switched", a)
	}
	clk.now = clk.now.Add(31 * time.Second)
	if diff := cmp.Diff([]string{"lonely"}, g.NeedsProbe()); diff != "" {
		t.Errorf("NeedsProbe after Retry (-want +got):\n%s", diff)
	}
	// Recreated with --disable-dns, it passes: its containers switch.
	fixed := lonelyNet
	fixed.DNSEnabled = false
	_, err = g.Observe([]Network{defaultNet, fixed})
	mustDo(t, err)
	if diff := cmp.Diff([]string{"lonely"}, g.NeedsProbe()); diff != "" {
		t.Errorf("NeedsProbe after lonely was recreated (-want +got):\n%s", diff)
	}
	lonelyDNS := spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.91.0.1")}, Options: []string{"ndots:1"}}
	mustDo(t, g.Record([]Result{{Network: "lonely", Driver: "bridge", Kind: KindOf(fixed), Pass: true, At: clk.now,
		Strategy: StrategyGateway, DNS: lonelyDNS}}))
	want = map[string]spec.Mode{"a": gatewayMode, "b": {Names: spec.Resolve, DNS: lonelyDNS},
		"c": {Names: spec.Resolve, DNS: mergeDNS(lonelyDNS, gatewayDNS)}}
	if diff := cmp.Diff(want, g.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("Modes after lonely passed (-want +got):\n%s", diff)
	}
}

// TestAutoLogNamesHoldingAndUnused: the log line that says why the machine
// keeps its copy names the networks holding it and those ignored as unused.
func TestAutoLogNamesHoldingAndUnused(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t0}
	g, err := OpenGate(GateConfig{Path: filepath.Join(t.TempDir(), stateFile), Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	mustDo(t, err)
	mustDo(t, g.Declare(declare(spec.FlagAuto, container("a"), container("b", "mesh"))))
	_, err = g.Observe([]Network{defaultNet, meshNet, lonelyNet})
	mustDo(t, err)
	mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now), result(meshNet, false, clk.now), result(lonelyNet, false, clk.now)}))
	var held string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "keeps copied names") {
			held = l
		}
	}
	for _, want := range []string{"holding=[mesh]", "ignored_unused=[lonely]"} {
		if !strings.Contains(held, want) {
			t.Errorf("the log line that says why auto waits = %q, want %s in it\nlog:\n%s", held, want, buf.String())
		}
	}
	buf.Reset()
	mustDo(t, g.Record([]Result{result(meshNet, true, clk.now)}))
	if !strings.Contains(buf.String(), "switching the machine to resolve mode") || !strings.Contains(buf.String(), "ignored_unused=[lonely]") {
		t.Errorf("the switch's log does not name the unused network it did not wait for:\n%s", buf.String())
	}
}

// TestOperatorGateJudgesWithTheAgentsDeclaration: an operator command
// that opens the agent's state file (`meshhost migrate pause|resume`,
// `meshhost probe --state`) has no declaration at hand; it judges auto's
// switch with the networks the agent's declaration uses, recorded in the
// file, so it switches the machine exactly where the agent's next pass
// would, and never where it would not.
func TestOperatorGateJudgesWithTheAgentsDeclaration(t *testing.T) {
	operators := []struct {
		name string
		do   func(g *Gate, now time.Time) error
	}{
		{"migrate pause", func(g *Gate, _ time.Time) error { return g.Pause() }},
		{"migrate resume", func(g *Gate, _ time.Time) error { return g.Resume() }},
		{"probe --state", func(g *Gate, now time.Time) error {
			if _, err := g.Observe([]Network{defaultNet, lonelyNet}); err != nil {
				return err
			}
			return g.Record([]Result{result(lonelyNet, false, now)})
		}},
	}
	for _, op := range operators {
		for _, tc := range []struct {
			name     string
			used     []spec.Container
			switches bool
		}{
			{"lonely unused", []spec.Container{container("a")}, true},
			{"lonely used", []spec.Container{container("a"), container("b", "lonely")}, false},
		} {
			t.Run(op.name+"/"+tc.name, func(t *testing.T) {
				clk := &fakeClock{t0}
				dir := t.TempDir()
				agent := openGate(t, dir, clk, nil)
				mustDo(t, agent.Declare(declare(spec.FlagAuto, tc.used...)))
				_, err := agent.Observe([]Network{defaultNet, lonelyNet})
				mustDo(t, err)
				mustDo(t, agent.Record([]Result{result(defaultNet, true, clk.now), result(lonelyNet, false, clk.now)}))
				if got := !agent.State().AutoSwitchedAt.IsZero(); got != tc.switches {
					t.Fatalf("setup: the agent's gate switched = %v, want %v", got, tc.switches)
				}
				// Undo the switch in the file: the operator's gate is the
				// first to judge it.
				path := filepath.Join(dir, stateFile)
				s := mustLoad(t, path)
				s.AutoSwitchedAt = time.Time{}
				for _, ns := range s.Networks {
					ns.Resolve, ns.ResolveSince = false, time.Time{}
				}
				mustDo(t, s.save(path))

				cli := openGate(t, dir, clk, nil)
				mustDo(t, op.do(cli, clk.now))
				got := !mustLoad(t, path).AutoSwitchedAt.IsZero()
				if got != tc.switches {
					t.Errorf("%s switched the machine = %v, want %v (the agent's declaration: %v)", op.name, got, tc.switches, UsedNetworks(tc.used))
				}

			})
		}
	}
}

// TestStateUsedNetworks: the declaration's networks survive a restart; a
// declaration without containers is recorded as such, not as unknown; a
// file written before them is read as not knowing them.
func TestStateUsedNetworks(t *testing.T) {
	t.Run("persists", func(t *testing.T) {
		dir := t.TempDir()
		g := openGate(t, dir, &fakeClock{t0}, nil)
		mustDo(t, g.Declare(declare(spec.FlagAuto, container("b", "mesh"), container("a"))))
		if diff := cmp.Diff([]string{"mesh", "podman"}, mustLoad(t, filepath.Join(dir, stateFile)).Used); diff != "" {
			t.Errorf("Used after a restart (-want +got):\n%s", diff)
		}
	})
	t.Run("no container", func(t *testing.T) {
		dir := t.TempDir()
		g := openGate(t, dir, &fakeClock{t0}, nil)
		mustDo(t, g.Declare(declare(spec.FlagOff)))
		data, err := os.ReadFile(filepath.Join(dir, stateFile))
		mustDo(t, err)
		if !bytes.Contains(data, []byte(`"used_networks": []`)) {
			t.Errorf("state file after a declaration without containers:\n%s\nwant \"used_networks\": []", data)
		}
		if s := mustLoad(t, filepath.Join(dir, stateFile)); s.Used == nil || len(s.Used) != 0 {
			t.Errorf("Used read back = %#v, want empty, not nil", s.Used)
		}
	})
	t.Run("file without it", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), stateFile)
		old := `{"version": 1, "flag": "auto", "paused": false, "networks": {}}`
		mustDo(t, os.WriteFile(path, []byte(old), 0o644))
		if s := mustLoad(t, path); s.Used != nil {
			t.Errorf("Used of a file without used_networks = %#v, want nil (not recorded)", s.Used)
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		g := openGate(t, t.TempDir(), &fakeClock{t0}, nil)
		if err := g.Declare(declare("sometimes", container("a"))); err == nil {
			t.Error("Declare with flag \"sometimes\": no error")
		}
		if s := g.State(); s.Used != nil || s.Flag != spec.FlagOff {
			t.Errorf("a refused declaration changed the state: used %v, flag %q", s.Used, s.Flag)
		}
	})
}

// TestStatusNamesWhatAutoWaitsFor: migrate status says, for a container
// auto holds back, which used networks it waits for and which it ignores.
func TestStatusNamesWhatAutoWaitsFor(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	cs := []spec.Container{container("a"), container("b", "mesh")}
	mustDo(t, g.Declare(declare(spec.FlagAuto, cs...)))
	_, err := g.Observe([]Network{defaultNet, meshNet, lonelyNet})
	mustDo(t, err)
	mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now), result(lonelyNet, false, clk.now)}))
	st := g.Status(cs, nil, nil)
	want := "auto: waiting for networks the declared containers use to pass their probe: mesh (not for lonely: no declared container uses it)"
	if st[0].Name != "a" || st[0].Phase != PhasePending || st[0].Reason != want {
		t.Errorf("Status(a) = %+v, want pending: %q", st[0], want)
	}
}
