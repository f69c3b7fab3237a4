package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/spec"
)

// TestRosterAccept runs meshhost roster accept's rule (pass.AcceptCovers,
// through AcceptRoster and a pass) over what an operator may type: the
// held generation after more changes arrived (issue 22 defect 6: void on
// 9933242), and every generation that is not held (defect 12: accepted on
// 9933242, which let a later shrink through). A refused accept changes
// nothing: the next shrink is still held.
func TestRosterAccept(t *testing.T) {
	for _, tc := range []struct {
		name string
		// names declares roster generation i+1 with names[i] names; the
		// first is served, and 40 of 100 trips the guard.
		names     []int
		accept    uint64
		wantErr   string // "" : accepted
		wantServe uint64 // the roster generation served after the next pass
	}{
		{name: "held generation, nothing since", names: []int{100, 40}, accept: 2, wantServe: 2},
		{name: "held generation, two changes since", names: []int{100, 40, 41, 42}, accept: 2, wantServe: 4},
		{name: "newest held after changes", names: []int{100, 40, 41}, accept: 3, wantServe: 3},
		{name: "nothing held", names: []int{100}, accept: 2, wantErr: "no roster is held"},
		{name: "nothing held, in force", names: []int{100}, accept: 1, wantErr: "no roster is held"},
		{name: "generation served", names: []int{100, 40}, accept: 1, wantErr: "accept one of 2 to 2"},
		{name: "future generation", names: []int{100, 40}, accept: 3, wantErr: "accept one of 2 to 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			for i, n := range tc.names {
				f.push(t, declaration(uint64(i+1), spec.FlagOn, 2, n))
			}
			err := AcceptRoster(statedir.New(f.state), tc.accept)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("AcceptRoster(%d) = %v, want an error saying %q", tc.accept, err, tc.wantErr)
				}
				if got := AcceptedRoster(statedir.New(f.state)); got != 0 {
					t.Fatalf("a refused accept recorded roster %d", got)
				}
				// What the refused accept named must not slip through:
				// the next shrink to that generation is held.
				gen := uint64(len(tc.names) + 1)
				rep := f.push(t, declaration(gen, spec.FlagOn, 2, 10))
				if rep.RosterHeld == "" || f.srv.Roster().Generation >= gen {
					t.Fatalf("after the refused accept, a shrink to generation %d: held %q, serving %d; want it held", gen, rep.RosterHeld, f.srv.Roster().Generation)
				}
				return
			}
			if err != nil {
				t.Fatalf("AcceptRoster(%d) = %v, want it accepted", tc.accept, err)
			}
			rep, err := f.agent.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.RosterHeld != "" || f.srv.Roster().Generation != tc.wantServe {
				t.Fatalf("after roster accept %d: held %q, serving %d; want %d served", tc.accept, rep.RosterHeld, f.srv.Roster().Generation, tc.wantServe)
			}
			if h, _ := LoadRosterHold(statedir.New(f.state)); h != nil {
				t.Errorf("the hold ended, and %s still says %+v", statedir.New(f.state).RosterHeld(), *h)
			}
			// The accept released that hold only: a later shrink is held on
			// its own.
			gen := uint64(len(tc.names) + 1)
			rep = f.push(t, declaration(gen, spec.FlagOn, 2, 5))
			if rep.RosterHeld == "" || f.srv.Roster().Generation != tc.wantServe {
				t.Errorf("a later shrink to generation %d: held %q, serving %d; want it held", gen, rep.RosterHeld, f.srv.Roster().Generation)
			}
		})
	}
}
