package migrations

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

var (
	defaultNet = Network{Name: "podman", Driver: "bridge",
		Subnets: []Subnet{{netip.MustParsePrefix("10.88.0.0/16"), netip.MustParseAddr("10.88.0.1")}}}
	meshNet = Network{Name: "mesh", Driver: "bridge", DNSEnabled: true,
		Subnets: []Subnet{{netip.MustParsePrefix("10.89.0.0/24"), netip.MustParseAddr("10.89.0.1")}}}
	gatewayDNS = spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Options: []string{"ndots:1"}}
	nodeDNS    = spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("169.254.53.53")}, Search: []string{"dns.podman"}, Options: []string{"ndots:1"}}
	bothDNS    = spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("169.254.53.53"), netip.MustParseAddr("10.88.0.1")}, Search: []string{"dns.podman"}, Options: []string{"ndots:1"}}
)

// addrs lets cmp compare net/netip values.
var addrs = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func result(n Network, pass bool, at time.Time) Result {
	r := Result{Network: n.Name, Driver: n.Driver, Kind: KindOf(n), Pass: pass, At: at, Runtime: "podman 4.3.1"}
	switch {
	case !pass:
		r.Reason = "canary: i/o timeout"
	case n.DNSEnabled:
		r.Strategy, r.DNS = StrategyNodeLocal, nodeDNS
	default:
		r.Strategy, r.DNS = StrategyGateway, gatewayDNS
	}
	return r
}

// stateFile is the gate's state file in a test's directory.
const stateFile = "migrations.json"

func openGate(t *testing.T, dir string, clk *fakeClock, reg prometheus.Registerer) *Gate {
	t.Helper()
	g, err := OpenGate(GateConfig{Path: filepath.Join(dir, stateFile), Now: clk.Now, Registerer: reg})
	if err != nil {
		t.Fatalf("OpenGate: %v", err)
	}
	return g
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// running returns what the runtime reports for a managed container created
// with mode m on nets.
func running(t *testing.T, name string, m spec.Mode, nets ...string) reconcile.Observed {
	t.Helper()
	c := spec.Container{Name: name, Image: "localhost/x:1"}
	for _, n := range nets {
		c.Networks = append(c.Networks, spec.NetworkAttachment{Name: n})
	}
	r, err := spec.Render(c, &spec.Roster{Generation: 1}, m)
	if err != nil {
		t.Fatal(err)
	}
	return reconcile.Observed{ID: name + "-id", Name: name, State: reconcile.StateRunning, Labels: map[string]string{
		reconcile.LabelManaged: "true", digest.LabelDigest: digest.Of(r), digest.LabelRecord: digest.NewRandomKey().Record(r),
	}}
}

func container(name string, nets ...string) spec.Container {
	c := spec.Container{Name: name, Image: "localhost/x:1"}
	for _, n := range nets {
		c.Networks = append(c.Networks, spec.NetworkAttachment{Name: n})
	}
	return c
}

var (
	copyMode    = spec.Mode{Names: spec.Copy}
	gatewayMode = spec.Mode{Names: spec.Resolve, DNS: gatewayDNS}
	nodeMode    = spec.Mode{Names: spec.Resolve, DNS: nodeDNS}
	bothMode    = spec.Mode{Names: spec.Resolve, DNS: bothDNS}
)

// TestModes covers every flag against every probe outcome of two networks,
// for containers on each network and on both (and on the default network
// by omission).
func TestModes(t *testing.T) {
	type probe int
	const (
		unprobed probe = iota
		pass
		fail
	)
	tests := []struct {
		flag          spec.MeshNamesFlag
		podman, mesh  probe
		onPodman      spec.Mode // also a container declaring no network
		onMesh, onAll spec.Mode
	}{
		{spec.FlagOff, pass, pass, copyMode, copyMode, copyMode},
		{spec.FlagOff, fail, pass, copyMode, copyMode, copyMode},
		{spec.FlagOff, unprobed, unprobed, copyMode, copyMode, copyMode},
		{spec.FlagOn, pass, pass, gatewayMode, nodeMode, bothMode},
		{spec.FlagOn, pass, fail, gatewayMode, copyMode, copyMode},
		{spec.FlagOn, fail, pass, copyMode, nodeMode, copyMode},
		{spec.FlagOn, pass, unprobed, gatewayMode, copyMode, copyMode},
		{spec.FlagOn, fail, fail, copyMode, copyMode, copyMode},
		{spec.FlagOn, unprobed, unprobed, copyMode, copyMode, copyMode},
		{spec.FlagAuto, pass, pass, gatewayMode, nodeMode, bothMode},
		{spec.FlagAuto, pass, fail, copyMode, copyMode, copyMode},
		{spec.FlagAuto, fail, pass, copyMode, copyMode, copyMode},
		{spec.FlagAuto, pass, unprobed, copyMode, copyMode, copyMode},
		{spec.FlagAuto, unprobed, unprobed, copyMode, copyMode, copyMode},
	}
	for _, tt := range tests {
		name := string(tt.flag) + "/" + map[probe]string{unprobed: "unprobed", pass: "pass", fail: "fail"}[tt.podman] +
			"-" + map[probe]string{unprobed: "unprobed", pass: "pass", fail: "fail"}[tt.mesh]
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{t0}
			g := openGate(t, t.TempDir(), clk, nil)
			_, err := g.Observe([]Network{defaultNet, meshNet})
			mustDo(t, err)
			mustDo(t, g.SetFlag(tt.flag))
			var rs []Result
			if tt.podman != unprobed {
				rs = append(rs, result(defaultNet, tt.podman == pass, clk.now))
			}
			if tt.mesh != unprobed {
				rs = append(rs, result(meshNet, tt.mesh == pass, clk.now))
			}
			mustDo(t, g.Record(rs))
			got := g.Modes([]spec.Container{container("a", "podman"), container("b", "mesh"), container("c", "podman", "mesh"), container("d")}, nil)
			want := map[string]spec.Mode{"a": tt.onPodman, "b": tt.onMesh, "c": tt.onAll, "d": tt.onPodman}
			if diff := cmp.Diff(want, got, addrs); diff != "" {
				t.Errorf("Modes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnknownNetworkKeepsCopy(t *testing.T) {
	g := openGate(t, t.TempDir(), &fakeClock{t0}, nil)
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
	if got := g.Mode([]string{"podman", "elsewhere"}, nil); got.Names != spec.Copy {
		t.Errorf("Mode(podman, elsewhere) = %v, want copy: an unknown network is unproven", got)
	}
}

// TestFailingAfterSwitch: a network in resolve mode that fails its probe is
// reported (log, metric); new containers on it get copy mode, existing ones
// keep resolve until it fails RollbackAfter times in a row, then go back.
func TestFailingAfterSwitch(t *testing.T) {
	clk := &fakeClock{t0}
	reg := prometheus.NewPedanticRegistry()
	g := openGate(t, t.TempDir(), clk, reg)
	_, err := g.Observe([]Network{defaultNet, meshNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0), result(meshNet, true, t0)}))
	existing := []reconcile.Observed{running(t, "old", nodeMode, "mesh")}
	cs := []spec.Container{container("old", "mesh"), container("new", "mesh")}
	if diff := cmp.Diff(map[string]spec.Mode{"old": nodeMode, "new": nodeMode}, g.Modes(cs, existing), addrs); diff != "" {
		t.Fatalf("after passing (-want +got):\n%s", diff)
	}

	clk.now = t0.Add(time.Minute)
	mustDo(t, g.Record([]Result{result(meshNet, false, clk.now)}))
	if diff := cmp.Diff(map[string]spec.Mode{"old": nodeMode, "new": copyMode}, g.Modes(cs, existing), addrs); diff != "" {
		t.Errorf("after one failure (-want +got):\n%s", diff)
	}
	if got := gaugeValue(t, g.metrics.failing.WithLabelValues("mesh")); got != 1 {
		t.Errorf("meshhost_migrations_network_failing{network=mesh} = %v, want 1", got)
	}
	if got := g.NeedsProbe(); len(got) != 0 {
		t.Errorf("NeedsProbe right after a failure = %v, want none before Retry", got)
	}
	clk.now = clk.now.Add(31 * time.Second)
	if diff := cmp.Diff([]string{"mesh"}, g.NeedsProbe(), addrs); diff != "" {
		t.Errorf("NeedsProbe after Retry (-want +got):\n%s", diff)
	}

	mustDo(t, g.Record([]Result{result(meshNet, false, clk.now)}))
	if diff := cmp.Diff(map[string]spec.Mode{"old": copyMode, "new": copyMode}, g.Modes(cs, existing), addrs); diff != "" {
		t.Errorf("after RollbackAfter failures (-want +got):\n%s", diff)
	}
	if got := gaugeValue(t, g.metrics.failing.WithLabelValues("mesh")); got != 0 {
		t.Errorf("meshhost_migrations_network_failing{network=mesh} after rollback = %v, want 0 (back in copy mode)", got)
	}
	if got := gaugeValue(t, g.metrics.resolve.WithLabelValues("mesh")); got != 0 {
		t.Errorf("meshhost_migrations_network_resolve{network=mesh} after rollback = %v, want 0", got)
	}

	clk.now = clk.now.Add(time.Minute)
	mustDo(t, g.Record([]Result{result(meshNet, true, clk.now)}))
	if diff := cmp.Diff(map[string]spec.Mode{"old": nodeMode, "new": nodeMode}, g.Modes(cs, existing), addrs); diff != "" {
		t.Errorf("after recovering (-want +got):\n%s", diff)
	}
}

// TestAutoKeepsSwitchWhenNetworkAppears: under auto, a network created
// after the switch does not switch the others back; it joins once proven.
func TestAutoKeepsSwitchWhenNetworkAppears(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagAuto))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
	changed, err := g.Observe([]Network{defaultNet, meshNet})
	mustDo(t, err)
	if !changed {
		t.Errorf("Observe with a new network = unchanged, want changed")
	}
	if diff := cmp.Diff([]string{"mesh"}, g.NeedsProbe(), addrs); diff != "" {
		t.Errorf("NeedsProbe (-want +got):\n%s", diff)
	}
	cs := []spec.Container{container("a", "podman"), container("b", "mesh")}
	if diff := cmp.Diff(map[string]spec.Mode{"a": gatewayMode, "b": copyMode}, g.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("before the new network passed (-want +got):\n%s", diff)
	}
	mustDo(t, g.Record([]Result{result(meshNet, true, t0)}))
	if diff := cmp.Diff(map[string]spec.Mode{"a": gatewayMode, "b": nodeMode}, g.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("after it passed (-want +got):\n%s", diff)
	}
	mustDo(t, g.SetFlag(spec.FlagOff))
	if diff := cmp.Diff(map[string]spec.Mode{"a": copyMode, "b": copyMode}, g.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("after the flag went off (-want +got):\n%s", diff)
	}
	mustDo(t, g.SetFlag(spec.FlagAuto))
	if got := g.State().AutoSwitchedAt; got.IsZero() {
		t.Errorf("auto again with every network proven: AutoSwitchedAt is zero, want the machine switched")
	}
}

func TestPause(t *testing.T) {
	clk := &fakeClock{t0}
	dir := t.TempDir()
	g := openGate(t, dir, clk, nil)
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
	// Another process (meshhost migrate pause) pauses through the file.
	other := openGate(t, dir, clk, nil)
	mustDo(t, other.Pause())

	observed := []reconcile.Observed{running(t, "a", copyMode, "podman")}
	cs := []spec.Container{container("a", "podman"), container("b", "podman")}
	if diff := cmp.Diff(map[string]spec.Mode{"a": copyMode, "b": gatewayMode}, g.Modes(cs, observed), addrs); diff != "" {
		t.Errorf("paused (-want +got):\n%s", diff)
	}
	st := g.Status(cs, observed, nil)
	if st[0].Phase != PhasePending || st[0].Reason != "paused (meshhost migrate resume)" {
		t.Errorf("Status(a) while paused = %+v, want pending, paused", st[0])
	}
	mustDo(t, g.Resume())
	if diff := cmp.Diff(map[string]spec.Mode{"a": gatewayMode, "b": gatewayMode}, g.Modes(cs, observed), addrs); diff != "" {
		t.Errorf("resumed (-want +got):\n%s", diff)
	}
	// Paused the other way: the rollback (flag off) waits too.
	observed = []reconcile.Observed{running(t, "a", gatewayMode, "podman")}
	mustDo(t, g.Pause())
	mustDo(t, g.SetFlag(spec.FlagOff))
	if got := g.Modes(cs, observed)["a"]; got.Names != spec.Resolve {
		t.Errorf("paused rollback: Mode(a) = %v, want resolve kept", got)
	}
}

// TestPauseKeepsAnInterruptedReplacement: paused while a replacement that
// switches a container to resolve mode was cut short (the old container
// aside, no new one yet), the container keeps its copy: the pass that
// finishes the replacement after a restart does not switch it (found by
// the simulation, internal/testkit/sim, seed 10857).
func TestPauseKeepsAnInterruptedReplacement(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
	mustDo(t, g.Pause())
	cs := []spec.Container{container("a", "podman")}
	for _, mode := range []spec.Mode{copyMode, gatewayMode} {
		observed := []reconcile.Observed{running(t, "a"+spec.AsideSuffix, mode, "podman")}
		if got := g.Modes(cs, observed)["a"]; got.Names != mode.Names {
			t.Errorf("paused, a set aside in %s mode: Mode(a) = %s, want %s kept", mode.Names, got.Names, mode.Names)
		}
	}
	// Resumed, the switch goes ahead.
	mustDo(t, g.Resume())
	observed := []reconcile.Observed{running(t, "a"+spec.AsideSuffix, copyMode, "podman")}
	if got := g.Modes(cs, observed)["a"]; got.Names != spec.Resolve {
		t.Errorf("resumed, a set aside in copy mode: Mode(a) = %s, want resolve", got.Names)
	}
}

func TestStatePersists(t *testing.T) {
	clk := &fakeClock{t0}
	dir := t.TempDir()
	g := openGate(t, dir, clk, nil)
	_, err := g.Observe([]Network{defaultNet, meshNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagAuto))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0), result(meshNet, true, t0)}))
	cs := []spec.Container{container("a", "podman"), container("b", "mesh"), container("c", "mesh", "podman")}
	before := g.Modes(cs, nil)

	// A restart: a new Gate reads the same state and decides the same, so
	// nothing is migrated again.
	g2 := openGate(t, dir, clk, nil)
	if diff := cmp.Diff(before, g2.Modes(cs, nil), addrs); diff != "" {
		t.Errorf("modes after a restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(g.State(), g2.State(), addrs); diff != "" {
		t.Errorf("state after a restart (-before +after):\n%s", diff)
	}
	if got := g2.NeedsProbe(); len(got) != 0 {
		t.Errorf("NeedsProbe right after a restart = %v, want none", got)
	}
	if diff := cmp.Diff(map[string]Strategy{"podman": StrategyGateway, "mesh": StrategyNodeLocal}, g2.Strategies(), addrs); diff != "" {
		t.Errorf("Strategies (-want +got):\n%s", diff)
	}

	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	mustDo(t, err)
	s, err := LoadState(filepath.Join(dir, stateFile))
	mustDo(t, err)
	if s.Version != StateVersion {
		t.Errorf("state version = %d, want %d", s.Version, StateVersion)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(matches) > 0 {
		t.Errorf("temporary files left: %v", matches)
	}
	// A state written by a newer meshhost is refused, not misread.
	newer := []byte(`{"version": 2, "flag": "on", "networks": {}}`)
	mustDo(t, os.WriteFile(filepath.Join(dir, stateFile), newer, 0o644))
	if _, err := OpenGate(GateConfig{Path: filepath.Join(dir, stateFile)}); err == nil {
		t.Errorf("OpenGate with a version 2 state: no error, want one")
	}
	mustDo(t, os.WriteFile(filepath.Join(dir, stateFile), data, 0o644))
	if _, err := OpenGate(GateConfig{Path: filepath.Join(dir, stateFile)}); err != nil {
		t.Errorf("OpenGate with the state restored: %v", err)
	}
}

func TestStatus(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	_, err := g.Observe([]Network{defaultNet, meshNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0), result(meshNet, false, t0)}))
	cs := []spec.Container{container("done", "podman"), container("pending", "podman"), container("blocked", "mesh"),
		container("broken", "podman"), container("new", "podman")}
	observed := []reconcile.Observed{
		running(t, "done", gatewayMode, "podman"),
		running(t, "pending", copyMode, "podman"),
		running(t, "blocked", copyMode, "mesh"),
		running(t, "broken", copyMode, "podman"),
	}
	got := g.Status(cs, observed, map[string]error{"broken": errors.New(`replacing "broken": starting new container: boom`)})
	want := []ContainerStatus{
		{Name: "blocked", Networks: []string{"mesh"}, Want: spec.Resolve, Target: spec.Copy, Current: spec.Copy, Phase: PhaseFailed, Reason: "probe failed on mesh: canary: i/o timeout"},
		{Name: "broken", Networks: []string{"podman"}, Want: spec.Resolve, Target: spec.Resolve, Current: spec.Copy, Phase: PhaseFailed, Reason: `replacing "broken": starting new container: boom`},
		{Name: "done", Networks: []string{"podman"}, Want: spec.Resolve, Target: spec.Resolve, Current: spec.Resolve, Phase: PhaseDone},
		{Name: "new", Networks: []string{"podman"}, Want: spec.Resolve, Target: spec.Resolve, Phase: PhasePending, Reason: "not created yet"},
		{Name: "pending", Networks: []string{"podman"}, Want: spec.Resolve, Target: spec.Resolve, Current: spec.Copy, Phase: PhasePending, Reason: "to be replaced: copy -> resolve"},
	}
	if diff := cmp.Diff(want, got, addrs); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"blocked", "broken", "done", "pending"}, names(g.ObservedContainers(observed)), addrs); diff != "" {
		t.Errorf("ObservedContainers (-want +got):\n%s", diff)
	}

	// Another owner's container is not this gate's: it does not run in any
	// mode the gate knows of, and is not listed.
	other := running(t, "done", gatewayMode, "podman")
	other.Labels[reconcile.LabelOwner] = "another-machine"
	got = g.Status(cs[:1], []reconcile.Observed{other}, nil)
	if got[0].Current != "" || got[0].Reason != "not created yet" {
		t.Errorf("Status of a container another owner manages = %+v, want it judged as not created", got[0])
	}
	if cs := g.ObservedContainers([]reconcile.Observed{other}); len(cs) != 0 {
		t.Errorf("ObservedContainers lists another owner's container: %v", names(cs))
	}
}

func names(cs []spec.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		n    Network
		want Kind
	}{
		{defaultNet, KindBridge},
		{meshNet, KindBridgeDNS},
		{Network{Driver: "bridge", Internal: true}, KindInternal},
		{Network{Driver: "bridge", Internal: true, DNSEnabled: true}, KindInternalDNS},
		{Network{Driver: "macvlan"}, KindMacvlan},
		{Network{Driver: "ipvlan"}, KindIPvlan},
		{Network{Driver: "host"}, KindHost},
		{Network{Driver: "none"}, KindNone},
		{Network{Driver: "sriov"}, KindOther},
	}
	for _, tt := range tests {
		if got := KindOf(tt.n); got != tt.want {
			t.Errorf("KindOf(%+v) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func TestRecreatedNetworkIsProbedAgain(t *testing.T) {
	clk := &fakeClock{now: t0}
	g := openGate(t, t.TempDir(), clk, nil)
	mustDo(t, g.SetFlag(spec.FlagOn))
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
	if got := g.NeedsProbe(); len(got) != 0 {
		t.Fatalf("NeedsProbe right after a pass = %v, want none", got)
	}
	// The same name and kind, recreated on another subnet: the proven DNS
	// server may not be on it, so the proof is void and it is probed again.
	moved := defaultNet
	moved.Subnets = []Subnet{{netip.MustParsePrefix("10.90.0.0/16"), netip.MustParseAddr("10.90.0.1")}}
	changed, err := g.Observe([]Network{moved})
	mustDo(t, err)
	if diff := cmp.Diff([]string{"podman"}, g.NeedsProbe()); diff != "" {
		t.Errorf("NeedsProbe after the subnet moved (changed=%v) (-want +got):\n%s", changed, diff)
	}
	if m := g.Mode([]string{"podman"}, nil); m.Names != spec.Copy {
		t.Errorf("mode on the moved network before a new probe = %s, want copy (fail closed)", m.Names)
	}
}
