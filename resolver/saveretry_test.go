package resolver

import (
	"errors"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/spec"
)

// TestSaveRetried: a roster served but not saved (every write of the state
// fails: a full disk) is saved once writes succeed again, within
// SaveRetryInterval, with no update after it; a restart then serves it, not
// the roster saved before. Whole rosters (Update) and deltas (Apply) alike;
// the simulation found it (sim-note.md, defect 3; sim2-note.md).
func TestSaveRetried(t *testing.T) {
	for _, how := range []string{"update", "apply"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				state := filepath.Join(t.TempDir(), "roster.json")
				var full atomic.Bool
				faults := func(deltalog.Step, bool) error {
					if full.Load() {
						return errors.New("no space left on device")
					}
					return nil
				}
				s, err := New(safeConfig(t, Config{StatePath: state, Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}, stateFaults: faults}))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.Update(faultRoster(1)); err != nil {
					t.Fatal(err)
				}
				full.Store(true)
				if how == "update" {
					err = s.Update(faultRoster(2))
				} else {
					err = s.Apply(&spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"n2.internal": {netip.MustParseAddr("10.0.0.2")}}})
				}
				if err == nil {
					t.Fatal("roster 2 saved on a full disk")
				}
				if r := s.Roster(); r == nil || r.Generation != 2 {
					t.Fatalf("served %v after a failed save, want generation 2", r)
				}
				time.Sleep(3 * SaveRetryInterval) // still full: every retry fails
				synctest.Wait()
				if r, err := LoadState(state); err != nil || r.Generation != 1 {
					t.Fatalf("saved while the disk is full: %v, %v", r, err)
				}
				full.Store(false) // the disk is freed; no update comes
				time.Sleep(SaveRetryInterval)
				synctest.Wait()
				r, err := LoadState(state)
				if err != nil || r.Generation != 2 || len(r.Names) != 2 {
					t.Fatalf("a restart %s after the disk was freed serves %v (%v), want generation 2 with 2 names", SaveRetryInterval, r, err)
				}
				// Saved whole: the next delta follows on from it.
				if err := s.Apply(&spec.RosterDelta{From: 2, To: 3, Set: map[string][]netip.Addr{"n3.internal": {netip.MustParseAddr("10.0.0.3")}}}); err != nil {
					t.Fatal(err)
				}
				if r, err := LoadState(state); err != nil || r.Generation != 3 || len(r.Names) != 3 {
					t.Fatalf("after the next delta: saved %v, %v; want generation 3 with 3 names", r, err)
				}
			})
		})
	}
}
