package migrations

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// TestPausedMoveToUnprovenNetwork is issue 17's fourth bug: while the
// migration is paused, a resolve-mode container moved to a network no
// probe has proven got resolve mode with its old network's DNS server,
// which the new network cannot reach: no DNS at all. It gets copy mode; moved
// to another proven network it gets that network's servers, not its old
// ones.
func TestPausedMoveToUnprovenNetwork(t *testing.T) {
	other := Network{Name: "other", Driver: "bridge",
		Subnets: []Subnet{{netip.MustParsePrefix("10.90.0.0/24"), netip.MustParseAddr("10.90.0.1")}}}
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	_, err := g.Observe([]Network{defaultNet, meshNet, other})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now), result(meshNet, true, clk.now)}))
	cur := current(t, gatewayMode, "podman")
	if got := g.Mode([]string{"podman"}, cur); !sameMode(got, gatewayMode) {
		t.Fatalf("before the pause: %v, want %v", got, gatewayMode)
	}
	mustDo(t, g.Pause())
	for _, tc := range []struct {
		name string
		nets []string
		want spec.Mode
	}{
		{"stays", []string{"podman"}, gatewayMode},
		{"moved to an unproven network", []string{"other"}, copyMode},
		{"joins an unproven network", []string{"podman", "other"}, copyMode},
		{"moved to a proven network", []string{"mesh"}, nodeMode},
		{"joins a proven network", []string{"podman", "mesh"}, bothMode},
	} {
		if got := g.Mode(tc.nets, cur); !sameMode(got, tc.want) {
			t.Errorf("paused, %s: Mode(%v) = %v, want %v", tc.name, tc.nets, got, tc.want)
		}
	}
}

// TestMoveToFailingNetwork: a network in resolve mode whose latest probe
// failed keeps its resolve-mode containers (until RollbackAfter), but a
// container that moves onto it is created in copy mode, as a new one is.
func TestMoveToFailingNetwork(t *testing.T) {
	clk := &fakeClock{t0}
	g := openGate(t, t.TempDir(), clk, nil)
	_, err := g.Observe([]Network{defaultNet, meshNet})
	mustDo(t, err)
	mustDo(t, g.SetFlag(spec.FlagOn))
	mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now), result(meshNet, true, clk.now)}))
	clk.now = clk.now.Add(time.Minute)
	mustDo(t, g.Record([]Result{result(meshNet, false, clk.now)}))
	if got := g.Mode([]string{"mesh"}, current(t, nodeMode, "mesh")); !sameMode(got, nodeMode) {
		t.Errorf("a container on the failing network: %v, want %v kept", got, nodeMode)
	}
	if got := g.Mode([]string{"mesh"}, current(t, gatewayMode, "podman")); !sameMode(got, copyMode) {
		t.Errorf("a container moving onto the failing network: %v, want copy mode", got)
	}
	if got := g.Mode([]string{"mesh"}, nil); !sameMode(got, copyMode) {
		t.Errorf("a new container on the failing network: %v, want copy mode", got)
	}
}

// TestGateNeverUnproven is the gate's property, over random histories of
// network moves, pauses and resumes, flag changes, probe results (passing
// with one of several configurations, failing, fresh, stale or from the
// future), networks appearing, vanishing and changing their subnets, and
// the clock moving: whenever the gate gives a container resolve mode, every
// network it is declared on has a proof, no such network was rolled back
// by failing probes, each of its DNS servers was proven on one of them, a
// network whose latest probe failed is one it runs on in resolve mode
// already, and each network is in resolve mode or (paused) one it runs on
// in resolve mode. A network switches to resolve mode only on a proof
// younger than MaxProofAge. Containers then run in the mode they were
// given, as the reconciler would make them.
//
// The containers are declared to the gate (Declare) on random subsets of
// the networks, and moved without always being declared again, so the
// networks the gate holds for used are at times not those they run on:
// failing closed never depends on them. Under auto, once the gate changed
// its state: the machine has switched if and only if it did so at a step
// where every present network a declared container uses passed its probe
// (and there was one); networks no declared container uses do not hold it
// back.
func TestGateNeverUnproven(t *testing.T) {
	pool := []Network{
		defaultNet, meshNet,
		{Name: "third", Driver: "bridge", Subnets: []Subnet{{netip.MustParsePrefix("10.90.0.0/24"), netip.MustParseAddr("10.90.0.1")}}},
		{Name: "lan", Driver: "macvlan", Subnets: []Subnet{{netip.MustParsePrefix("192.168.7.0/24"), netip.MustParseAddr("192.168.7.1")}}},
	}
	// Configurations a probe may prove; each network proves one of them.
	configs := []spec.DNSConfig{gatewayDNS, nodeDNS,
		{Servers: []netip.Addr{netip.MustParseAddr("10.90.0.1")}},
		{Servers: []netip.Addr{netip.MustParseAddr("169.254.53.53")}},
		{}, // StrategyNone: connectivity proven, no server
	}
	const seeds, steps = 60, 80
	var resolved, pausedKept, checks int
	// switchedPastUnused counts switches under auto while a network no
	// declared container uses had no passing probe.
	var switchedPastUnused int
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 17))
		clk := &fakeClock{t0}
		g, err := OpenGate(GateConfig{Path: filepath.Join(t.TempDir(), stateFile), Now: clk.Now})
		mustDo(t, err)
		type ctr struct {
			nets []string
			cur  *spec.Rendered
		}
		ctrs := make([]ctr, 3)
		randomNets := func() []string {
			var out []string
			for _, n := range pool {
				if rng.IntN(3) == 0 {
					out = append(out, n.Name)
				}
			}
			if len(out) == 0 && rng.IntN(2) == 0 {
				out = []string{pool[rng.IntN(len(pool))].Name}
			}
			return out // none: the default network
		}
		for i := range ctrs {
			ctrs[i].nets = randomNets()
		}
		declared := func() []spec.Container {
			var out []spec.Container
			for i := range ctrs {
				out = append(out, container(fmt.Sprintf("c%d", i), ctrs[i].nets...))
			}
			return out
		}
		if seed%4 != 0 {
			// The others start as a state without the declaration's
			// networks: every network holds auto back until one is given.
			mustDo(t, g.Declare(&spec.Declaration{MeshNames: spec.FlagOff, Containers: declared()}))
		}
		present := slices.Clone(pool)
		var history []string
		for step := range steps {
			before := g.State()
			var op string
			switch k := rng.IntN(10); k {
			case 0:
				present = present[:0]
				for _, n := range pool {
					if rng.IntN(5) != 0 {
						if rng.IntN(8) == 0 { // recreated with other subnets
							n.Subnets = []Subnet{{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParseAddr("10.99.0.1")}}
						}
						present = append(present, n)
					}
				}
				_, err = g.Observe(present)
				op = fmt.Sprintf("observe %d networks", len(present))
			case 1, 2:
				var rs []Result
				for _, n := range present {
					if rng.IntN(2) == 0 {
						continue
					}
					at := clk.now
					switch rng.IntN(6) {
					case 0:
						at = at.Add(-time.Duration(rng.IntN(72)) * time.Hour) // stale, or not
					case 1:
						at = at.Add(time.Duration(rng.IntN(120)) * time.Minute) // from the future
					}
					r := Result{Network: n.Name, Driver: n.Driver, Kind: KindOf(n), Pass: rng.IntN(3) != 0, At: at}
					if r.Pass {
						r.Strategy, r.DNS = StrategyGateway, configs[rng.IntN(len(configs))]
					}
					rs = append(rs, r)
				}
				err = g.Record(rs)
				op = fmt.Sprintf("record %d results", len(rs))
			case 3:
				flag := []spec.MeshNamesFlag{spec.FlagOff, spec.FlagAuto, spec.FlagOn}[rng.IntN(3)]
				if rng.IntN(2) == 0 {
					err = g.SetFlag(flag)
					op = "flag " + string(flag)
				} else {
					err = g.Declare(&spec.Declaration{MeshNames: flag, Containers: declared()})
					op = "declare flag " + string(flag)
				}
			case 4:
				err, op = g.Pause(), "pause"
			case 5:
				err, op = g.Resume(), "resume"
			case 6:
				i := rng.IntN(len(ctrs))
				ctrs[i].nets = randomNets()
				op = fmt.Sprintf("move c%d to %v", i, ctrs[i].nets)
				if rng.IntN(3) != 0 {
					// Declared, as the agent's next pass does; else the
					// gate's networks are the last declaration's.
					err = g.Declare(&spec.Declaration{MeshNames: g.State().Flag, Containers: declared()})
					op = "declared: " + op
				}
			case 7:
				clk.now = clk.now.Add(time.Duration(rng.IntN(180)) * time.Minute)
				op = "clock " + clk.now.Sub(t0).String()
			default:
				op = "apply"
			}
			mustDo(t, err)
			history = append(history, op)
			st := g.State()
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d step %d: %s\nhistory: %v", seed, step, fmt.Sprintf(format, args...), history)
			}
			// Under auto: the machine switches only when every used
			// network passes, and it has, once an operation that always
			// judges the switch again ran (observe, record, pause,
			// resume; flag and declare judge only what they change).
			if st.Flag == spec.FlagAuto {
				judged := slices.ContainsFunc([]string{"observe", "record", "pause", "resume"}, func(p string) bool { return strings.HasPrefix(op, p) })
				set := g.settings(st)
				used, allPass, unusedFailing := 0, true, false
				for name, ns := range st.Networks {
					switch {
					case !ns.Present:
					case st.Used != nil && !slices.Contains(st.Used, name):
						unusedFailing = unusedFailing || !passing(ns, clk.now, set)
					default:
						used++
						allPass = allPass && passing(ns, clk.now, set)
					}
				}
				switch {
				case judged && st.AutoSwitchedAt.IsZero() && used > 0 && allPass:
					fail("auto: every one of the %d used networks passes, and the machine has not switched (used %v)", used, st.Used)
				case before.AutoSwitchedAt.IsZero() && !st.AutoSwitchedAt.IsZero() && (used == 0 || !allPass):
					fail("auto: the machine switched with %d used networks, not all passing (used %v)", used, st.Used)
				case before.AutoSwitchedAt.IsZero() && !st.AutoSwitchedAt.IsZero() && unusedFailing:
					switchedPastUnused++
				}
			}
			// Switching needs a fresh proof.
			for name, ns := range st.Networks {
				if ns.Resolve && (before.Networks[name] == nil || !before.Networks[name].Resolve) {
					if ns.Last == nil || !ns.Last.Pass || clk.now.Sub(ns.Last.At) > DefaultMaxProofAge || ns.Last.At.Sub(clk.now) > proofSkew {
						fail("network %s switched to resolve mode on %+v at %v", name, ns.Last, clk.now)
					}
				}
			}
			for i := range ctrs {
				c := &ctrs[i]
				got := g.Mode(c.nets, c.cur)
				checks++
				if got.Names == spec.Resolve {
					resolved++
					if st.Paused && c.cur != nil && c.cur.Mode == spec.Resolve && sameDNS(got.DNS, c.cur.DNS) {
						pausedKept++
					}
					if why := unproven(st, c.nets, c.cur, got); why != "" {
						fail("c%d on %v (running %v) got %v: %s", i, c.nets, c.cur, got, why)
					}
				}
				if op == "apply" {
					cont := container(fmt.Sprintf("c%d", i), c.nets...)
					r, err := spec.Render(cont, &spec.Roster{Generation: 1}, got)
					if err != nil {
						fail("Render(%v): %v", got, err)
					}
					c.cur = &r
				}
			}
		}
	}
	t.Logf("%d modes checked, %d resolve (%d kept as they ran while paused)", checks, resolved, pausedKept)
	if resolved < checks/20 || pausedKept == 0 {
		t.Errorf("the histories gave resolve mode %d times of %d (%d kept while paused): too rarely to test anything", resolved, checks, pausedKept)
	}
	t.Logf("%d switches under auto past an unused network without a passing probe", switchedPastUnused)
	if switchedPastUnused == 0 {
		t.Errorf("no history switched under auto while an unused network had no passing probe: the histories test nothing of it")
	}
}

// unproven says why resolve mode m is not proven for a container on nets
// running as cur, or "" when it is.
func unproven(st *State, nets []string, cur *spec.Rendered, m spec.Mode) string {
	if len(nets) == 0 {
		nets = []string{spec.DefaultNetwork}
	}
	if len(m.DNS.Servers) == 0 {
		return "resolve mode without a DNS server"
	}
	var proven []netip.Addr
	for _, n := range nets {
		ns := st.Networks[n]
		switch {
		case ns == nil || ns.Proven == nil:
			return fmt.Sprintf("network %s has no proof", n)
		case ns.Last != nil && !ns.Last.Pass && !ns.Resolve:
			return fmt.Sprintf("network %s was rolled back by failing probes", n)
		case ns.Last != nil && !ns.Last.Pass && !runsResolvedOn(cur, n):
			return fmt.Sprintf("network %s is failing its probes and the container would join it", n)
		case !ns.Resolve && !(st.Paused && runsResolvedOn(cur, n)):
			return fmt.Sprintf("network %s is not in resolve mode", n)
		}
		proven = append(proven, ns.Proven.DNS.Servers...)
	}
	for _, s := range m.DNS.Servers {
		if !slices.Contains(proven, s) {
			return fmt.Sprintf("DNS server %s was proven on none of %v", s, nets)
		}
	}
	return ""
}
