package resolver

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/spec"
)

// faultRoster is the roster of generation gen in TestStateFaultMatrix's
// workload: a name per generation so far; from generation 8 on a second
// zone, so that the roster of 8 is compiled whole.
func faultRoster(gen uint64) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	if gen >= 8 {
		r.Zones = []string{"internal", "mesh"}
	}
	for g := uint64(1); g <= gen; g++ {
		r.Names[fmt.Sprintf("n%d.internal", g)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(g)})}
	}
	return r
}

// TestStateFaultMatrix: a fault at every write step of the resolver's
// saved roster (an error; a crash right there; a crash right after the
// step took effect), at every occurrence of the step in a workload of
// whole rosters, deltas, compactions and a late compaction of an older
// table. After every update a restart (LoadState, what New serves) serves
// the newest generation whose Update or Apply returned success, or a
// newer one, with that generation's names; never an older one. A crash
// stops every write from then on (the process is gone) and the workload.
func TestStateFaultMatrix(t *testing.T) {
	type mode int
	const (
		errBefore mode = iota
		errAfter
		crashBefore
		crashAfter
	)
	for step := deltalog.Step(0); step < deltalog.NumSteps; step++ {
		for _, m := range []mode{errBefore, errAfter, crashBefore, crashAfter} {
			for nth := 1; nth <= 8; nth++ {
				t.Run(fmt.Sprintf("step%d/mode%d/hit%d", step, m, nth), func(t *testing.T) {
					state := filepath.Join(t.TempDir(), "roster.json")
					hits, fired, dead := 0, false, false
					faults := func(st deltalog.Step, after bool) error {
						if dead {
							return errors.New("the process has crashed")
						}
						if fired || st != step || after != (m == errAfter || m == crashAfter) {
							return nil
						}
						if hits++; hits != nth {
							return nil
						}
						fired = true
						dead = m == crashBefore || m == crashAfter
						return errors.New("injected fault")
					}
					s, err := New(safeConfig(t, Config{StatePath: state, stateFaults: faults}))
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					var acked uint64
					check := func(after string) {
						t.Helper()
						r, err := LoadState(state)
						if acked == 0 && errors.Is(err, errNoState) {
							return
						}
						if err != nil {
							if acked > 0 {
								t.Fatalf("after %s, a restart reads no roster (%v), want generation %d or newer", after, err, acked)
							}
							return
						}
						if r.Generation < acked {
							t.Errorf("after %s, a restart serves generation %d, older than %d, whose save returned success", after, r.Generation, acked)
							return
						}
						want := faultRoster(r.Generation)
						if !slices.Equal(sortedNames(r), sortedNames(want)) || len(r.Zones) != len(want.Zones) {
							t.Errorf("after %s, a restart serves generation %d with names %v zones %v, want %v %v", after, r.Generation, sortedNames(r), r.Zones, sortedNames(want), want.Zones)
						}
					}
					update := func(gen uint64) {
						if dead {
							return
						}
						if err := s.Update(faultRoster(gen)); err == nil {
							acked = gen
						} else if !fired {
							t.Errorf("Update %d: %v, with no fault injected", gen, err)
						}
						check(fmt.Sprintf("the roster of generation %d", gen))
					}
					apply := func(gen uint64) {
						if dead {
							return
						}
						d := &spec.RosterDelta{From: gen - 1, To: gen, Set: map[string][]netip.Addr{
							fmt.Sprintf("n%d.internal", gen): {netip.AddrFrom4([4]byte{10, 0, 0, byte(gen)})},
						}}
						if err := s.Apply(d); err == nil {
							acked = gen
						} else if !fired {
							t.Errorf("Apply %d: %v, with no fault injected", gen, err)
						}
						check(fmt.Sprintf("the delta to generation %d", gen))
					}
					compact := func(t0 *table) {
						if dead {
							return
						}
						if t0 == nil {
							s.state.compact(s)
						} else {
							s.state.saveWhole(t0, s.Busy) // a compaction that took its snapshot earlier
						}
						check("a compaction")
					}
					update(1)
					apply(2)
					apply(3)
					apply(4)
					compact(nil)
					apply(5)
					old := s.table.Load()
					apply(6)
					compact(old) // late: generation 5 after 6 was acknowledged
					apply(7)
					update(8) // zones change: compiled and saved whole
					apply(9)
					compact(nil)
					apply(10)
					update(11) // same zones: saved as a delta (a diff)
					compact(nil)
					if !fired {
						t.Skip("the workload makes fewer such steps")
					}
				})
			}
		}
	}
}

func sortedNames(r *spec.Roster) []string {
	var out []string
	for n := range r.Names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestFreezeStateWaitsForACompaction: FreezeState (a handover's Prepare)
// returns only once a compaction under way has written; from then on
// nothing this server does writes the state (a delta is served but not
// saved, a compaction writes nothing), so the files are the successor's:
// what it writes stays.
func TestFreezeStateWaitsForACompaction(t *testing.T) {
	state := filepath.Join(t.TempDir(), "roster.json")
	entered, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	faults := func(st deltalog.Step, after bool) error {
		if st == deltalog.StepBaseWrite && !after && armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return nil
	}
	s, err := New(safeConfig(t, Config{StatePath: state, stateFaults: faults}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(faultRoster(1)); err != nil {
		t.Fatal(err)
	}
	for gen := uint64(2); gen <= 4; gen++ {
		if err := s.Apply(&spec.RosterDelta{From: gen - 1, To: gen, Set: map[string][]netip.Addr{fmt.Sprintf("n%d.internal", gen): {netip.AddrFrom4([4]byte{10, 0, 0, byte(gen)})}}}); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	compacted := make(chan struct{})
	go func() { s.state.compact(s); close(compacted) }()
	<-entered // the compaction is writing the roster file
	frozen := make(chan struct{})
	go func() { s.FreezeState(); close(frozen) }()
	select {
	case <-frozen:
		t.Fatal("FreezeState returned while a compaction was writing")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-compacted
	select {
	case <-frozen:
	case <-time.After(10 * time.Second):
		t.Fatal("FreezeState did not return once the compaction had written")
	}
	// The successor owns the files now.
	successor := map[string][]byte{state: []byte("successor's roster\n"), LogPath(state): []byte("successor's log\n")}
	for p, b := range successor {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Apply(&spec.RosterDelta{From: 4, To: 5, Set: map[string][]netip.Addr{"n5.internal": {netip.AddrFrom4([4]byte{10, 0, 0, 5})}}}); err == nil {
		t.Error("a delta after FreezeState says it was saved")
	}
	s.state.compact(s)
	if err := s.Update(faultRoster(8)); err == nil {
		t.Error("a whole roster after FreezeState says it was saved")
	}
	for p, b := range successor {
		if got, _ := os.ReadFile(p); string(got) != string(b) {
			t.Errorf("%s after FreezeState = %q, want the successor's %q", p, got, b)
		}
	}
}
