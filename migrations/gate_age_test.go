package migrations

import (
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
