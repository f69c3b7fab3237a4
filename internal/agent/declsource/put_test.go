package declsource

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

func TestPut(t *testing.T) {
	decl := func(machine string, gen, rosterGen uint64) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: machine, Generation: gen, MeshNames: spec.FlagOff,
			Roster: &spec.Roster{Generation: rosterGen, Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}}
	}
	s := New(Config{Machine: "ace"})
	changed := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		name         string
		d            *spec.Declaration
		stale        bool
		fails        bool
		wantGen      uint64
		wantRoster   uint64
		wantSignaled bool
	}{
		{"first", decl("ace", 5, 3), false, false, 5, 3, true},
		{"roster moves alone", decl("ace", 5, 4), false, false, 5, 4, true},
		{"same again", decl("ace", 5, 4), false, false, 5, 4, false},
		{"older roster, same generation", decl("ace", 5, 2), true, true, 5, 4, false},
		{"older generation", decl("ace", 4, 9), true, true, 5, 4, false},
		{"newer generation, older roster", decl("ace", 6, 1), false, false, 6, 1, true},
		{"another machine", decl("novox", 9, 9), false, true, 6, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Put(tc.d, "test")
			if (err != nil) != tc.fails || errors.Is(err, ErrStale) != tc.stale {
				t.Errorf("Put = %v, want failure %v (stale %v)", err, tc.fails, tc.stale)
			}
			cur, origin := s.Current()
			if cur.Generation != tc.wantGen || cur.Roster.Generation != tc.wantRoster || origin != "test" {
				t.Errorf("in force: generation %d roster %d origin %q, want %d, %d, test", cur.Generation, cur.Roster.Generation, origin, tc.wantGen, tc.wantRoster)
			}
			if got := changed(); got != tc.wantSignaled {
				t.Errorf("Changed signalled %v, want %v", got, tc.wantSignaled)
			}
			if doc, _ := s.Document(); doc != nil {
				t.Error("Document() after Put is not nil: the agent would save bytes of another declaration")
			}
		})
	}
}
