package migrations

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// TestStaleProofDoesNotSwitch is issue 17's sixth bug (second half): a
// probe result 60 days old switched a machine under "auto" when no prober
// could be made. A passing probe older than MaxProofAge (or from the
// future: a clock that went back) switches nothing; a fresh one does. A
// network switched already stays switched as its proof ages.
func TestStaleProofDoesNotSwitch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		age       time.Duration // of the probe when the gate evaluates it
		maxAge    time.Duration // GateConfig.MaxProofAge, 0: the default
		wantAfter bool
	}{
		{"60 days", 60 * 24 * time.Hour, 0, false},
		{"just over the default", DefaultMaxProofAge + time.Second, 0, false},
		{"within the default", DefaultMaxProofAge - time.Second, 0, true},
		{"a minute", time.Minute, 0, true},
		{"configured longer", 3 * 24 * time.Hour, 4 * 24 * time.Hour, true},
		{"configured shorter", 10 * time.Minute, 5 * time.Minute, false},
		{"from the future", -time.Hour, 0, false},
		{"slightly in the future", -10 * time.Second, 0, true},
	} {
		for _, flag := range []spec.MeshNamesFlag{spec.FlagAuto, spec.FlagOn} {
			t.Run(tc.name+"/"+string(flag), func(t *testing.T) {
				dir := t.TempDir()
				clk := &fakeClock{t0}
				g, err := OpenGate(GateConfig{Path: filepath.Join(dir, stateFile), Now: clk.Now, MaxProofAge: tc.maxAge})
				mustDo(t, err)
				_, err = g.Observe([]Network{defaultNet})
				mustDo(t, err)
				// Probed under flag off (or by an agent long gone): on
				// record, nothing switched.
				mustDo(t, g.Record([]Result{result(defaultNet, true, t0)}))
				clk.now = t0.Add(tc.age)
				// No prober: the agent only observes and sets the flag.
				mustDo(t, g.SetFlag(flag))
				_, err = g.Observe([]Network{defaultNet})
				mustDo(t, err)
				if got := g.State().Networks["podman"].Resolve; got != tc.wantAfter {
					t.Errorf("a passing probe %v old: switched = %v, want %v", tc.age, got, tc.wantAfter)
				}
				if got := g.Mode(nil, nil); sameMode(got, gatewayMode) != tc.wantAfter {
					t.Errorf("a passing probe %v old: new container gets %v", tc.age, got)
				}
				if !tc.wantAfter {
					// A fresh probe switches it.
					mustDo(t, g.Record([]Result{result(defaultNet, true, clk.now)}))
					if !g.State().Networks["podman"].Resolve {
						t.Error("a fresh passing probe did not switch the network")
					}
				}
				// Switched, it stays switched as the proof ages.
				clk.now = clk.now.Add(90 * 24 * time.Hour)
				_, err = g.Observe([]Network{defaultNet})
				mustDo(t, err)
				if !g.State().Networks["podman"].Resolve {
					t.Error("a switched network went back to copy mode as its proof aged")
				}
			})
		}
	}
}

func current(t *testing.T, m spec.Mode, nets ...string) *spec.Rendered {
	t.Helper()
	r, err := spec.Render(container("c", nets...), &spec.Roster{Generation: 1}, m)
	if err != nil {
		t.Fatal(err)
	}
	return &r
}

func sameMode(a, b spec.Mode) bool { return a.Names == b.Names && sameDNS(a.DNS, b.DNS) }

// TestFutureProbeIsDue: a probe stamped more than proofSkew in the future
// (the clock was ahead when it ran, and was set back since) is due at
// once, in copy mode and in resolve mode, passed or failed: its age is
// unknown. Before, NeedsProbe waited for the clock to catch up with it (a
// day, a year), and a network in resolve mode went unchecked all that
// time. A probe within the skew keeps its schedule, and once probed again
// by the corrected clock a network is due Interval later, as any other.
func TestFutureProbeIsDue(t *testing.T) {
	const interval = 10 * time.Minute // GateConfig.Interval's default
	for _, tc := range []struct {
		name    string
		resolve bool          // switched to resolve mode before the future probe
		ahead   time.Duration // how far in the future the probe is stamped
		pass    bool
		want    []string // NeedsProbe right after
	}{
		{"a day ahead", false, 24 * time.Hour, true, []string{"podman"}},
		{"a day ahead in resolve mode", true, 24 * time.Hour, true, []string{"podman"}},
		{"a year ahead in resolve mode", true, 365 * 24 * time.Hour, true, []string{"podman"}},
		{"a day ahead, failed, in resolve mode", true, 24 * time.Hour, false, []string{"podman"}},
		{"just beyond the skew", true, proofSkew + time.Second, true, []string{"podman"}},
		{"within the skew", true, proofSkew / 2, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, err := OpenGate(GateConfig{Path: filepath.Join(t.TempDir(), stateFile)})
				mustDo(t, err)
				_, err = g.Observe([]Network{defaultNet})
				mustDo(t, err)
				mustDo(t, g.SetFlag(spec.FlagOn))
				if tc.resolve {
					mustDo(t, g.Record([]Result{result(defaultNet, true, time.Now())}))
					if !g.State().Networks["podman"].Resolve {
						t.Fatal("setup: a passing probe under flag on did not switch the network")
					}
				}
				mustDo(t, g.Record([]Result{result(defaultNet, tc.pass, time.Now().Add(tc.ahead))}))
				if diff := cmp.Diff(tc.want, g.NeedsProbe()); diff != "" {
					t.Errorf("NeedsProbe() right after a probe stamped %v ahead (-want +got):\n%s", tc.ahead, diff)
				}

				// Probed again by the corrected clock: on schedule again.
				mustDo(t, g.Record([]Result{result(defaultNet, true, time.Now())}))
				if got := g.NeedsProbe(); len(got) != 0 {
					t.Errorf("NeedsProbe() right after a probe now = %v, want none", got)
				}
				time.Sleep(interval)
				if diff := cmp.Diff([]string{"podman"}, g.NeedsProbe()); diff != "" {
					t.Errorf("NeedsProbe() an Interval after the probe (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestOperatorGateJudgesWithTheAgentsSettings: a gate opened without
// MaxProofAge or RollbackAfter (`meshhost migrate pause|resume`, `meshhost
// probe --state`, `meshhost plan`) judges the switch with those of the
// agent's gate on the same state file, recorded there, not with the
// defaults. Before, `meshhost migrate pause` on a machine whose agent runs
// with --proof-max-age 10m switched a network on a 30-minute-old proof
// the agent refuses, and `meshhost probe --state` recording a second failed
// probe took a network back to copy mode that the agent (rolling back after
// 5) keeps.
func TestOperatorGateJudgesWithTheAgentsSettings(t *testing.T) {
	// operator is what each command does to the state file.
	operators := []struct {
		name string
		do   func(g *Gate) error
	}{
		{"migrate pause", (*Gate).Pause},
		{"migrate resume", (*Gate).Resume},
		{"probe --state, another network", func(g *Gate) error {
			if _, err := g.Observe([]Network{defaultNet, meshNet}); err != nil {
				return err
			}
			return g.Record([]Result{result(meshNet, false, time.Now())})
		}},
		{"plan of a declaration turning the flag to auto", func(g *Gate) error { return g.SetFlag(spec.FlagAuto) }},
	}
	for _, op := range operators {
		t.Run(op.name+"/proof older than the agent's max age", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), stateFile)
				agent, err := OpenGate(GateConfig{Path: path, MaxProofAge: 10 * time.Minute})
				mustDo(t, err)
				_, err = agent.Observe([]Network{defaultNet})
				mustDo(t, err)
				mustDo(t, agent.Record([]Result{result(defaultNet, true, time.Now())})) // under flag off
				time.Sleep(30 * time.Minute)
				mustDo(t, agent.SetFlag(spec.FlagOn))
				if switched(t, path) {
					t.Fatal("setup: the agent's gate switched on a proof older than its MaxProofAge")
				}
				cli, err := OpenGate(GateConfig{Path: path})
				mustDo(t, err)
				mustDo(t, op.do(cli))
				if switched(t, path) {
					t.Errorf("%s switched the network on a 30-minute-old proof, which the agent's MaxProofAge 10m refuses", op.name)
				}
				if got := mustLoad(t, path).Settings; got != (Settings{MaxProofAge: 10 * time.Minute}) {
					t.Errorf("after %s the state records settings %+v, want the agent's", op.name, got)
				}
			})
		})
		t.Run(op.name+"/proof younger than the agent's max age", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Within the agent's 4h, beyond the default 1h: the
				// operator's gate switches as the agent's own would.
				path := filepath.Join(t.TempDir(), stateFile)
				agent, err := OpenGate(GateConfig{Path: path, MaxProofAge: 4 * time.Hour})
				mustDo(t, err)
				_, err = agent.Observe([]Network{defaultNet})
				mustDo(t, err)
				mustDo(t, agent.Record([]Result{result(defaultNet, true, time.Now())}))
				time.Sleep(3 * time.Hour)
				cli, err := OpenGate(GateConfig{Path: path})
				mustDo(t, err)
				mustDo(t, cli.SetFlag(spec.FlagOn)) // as plan does, or the agent's next pass
				mustDo(t, op.do(cli))
				if !switched(t, path) {
					t.Errorf("%s with flag on did not switch on a 3-hour-old proof, which the agent's MaxProofAge 4h takes", op.name)
				}
			})
		})
	}

	t.Run("rollback after", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), stateFile)
			agent, err := OpenGate(GateConfig{Path: path, RollbackAfter: 5})
			mustDo(t, err)
			_, err = agent.Observe([]Network{defaultNet})
			mustDo(t, err)
			mustDo(t, agent.SetFlag(spec.FlagOn))
			mustDo(t, agent.Record([]Result{result(defaultNet, true, time.Now())}))
			mustDo(t, agent.Record([]Result{result(defaultNet, false, time.Now())}))
			// `meshhost probe --state` records the second failure in a row.
			cli, err := OpenGate(GateConfig{Path: path})
			mustDo(t, err)
			mustDo(t, cli.Record([]Result{result(defaultNet, false, time.Now())}))
			if !switched(t, path) {
				t.Error("an operator's probe took the network back to copy mode after 2 failures; the agent's RollbackAfter is 5")
			}
		})
	})

	t.Run("a state file without settings", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// As a meshhost before settings wrote it: the defaults, and
			// the agent records its own as soon as it opens the file,
			// before its first pass.
			path := filepath.Join(t.TempDir(), stateFile)
			old := `{"version": 1, "flag": "on", "paused": false, "networks": {"podman": {"kind": "bridge", "present": true, "subnets": ["10.88.0.0/16 via 10.88.0.1"], "failures": 0, "resolve": false}}}`
			mustDo(t, os.WriteFile(path, []byte(old), 0o644))
			s := mustLoad(t, path)
			if s.Settings != (Settings{}) || s.Flag != spec.FlagOn || !s.Networks["podman"].Present {
				t.Fatalf("LoadState of a file without settings = %+v", s)
			}
			if _, err := OpenGate(GateConfig{Path: path, MaxProofAge: 10 * time.Minute}); err != nil {
				t.Fatal(err)
			}
			if got := mustLoad(t, path).Settings; got != (Settings{MaxProofAge: 10 * time.Minute}) {
				t.Errorf("after the agent opened it, the file records %+v, want its MaxProofAge", got)
			}
		})
	})
}

func switched(t *testing.T, path string) bool {
	t.Helper()
	ns := mustLoad(t, path).Networks["podman"]
	return ns != nil && ns.Resolve
}

func mustLoad(t *testing.T, path string) *State {
	t.Helper()
	s, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
