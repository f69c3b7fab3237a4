package spec_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestRosterValidateNamesLimit: Validate refuses a roster built in code
// with more than MaxNames names, naming the limit.
func TestRosterValidateNamesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a million-name roster takes seconds")
	}
	r := &spec.Roster{Generation: 1, Names: make(map[string][]netip.Addr, spec.MaxNames+1)}
	addr := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	for i := range spec.MaxNames + 1 {
		r.Names[fmt.Sprintf("n%d.internal", i)] = addr
	}
	err := r.Validate()
	want := fmt.Sprintf("names: %d names; at most %d", spec.MaxNames+1, spec.MaxNames)
	if err == nil || err.Error() != want {
		t.Errorf("Validate(%d names) = %v, want %q", len(r.Names), err, want)
	}
	if err != nil && strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("Validate reported more than the limit: %.300v", err)
	}
}

// TestRosterApplyNamesLimit: a delta may not grow a roster past MaxNames
// names, which a whole roster may not hold either (a delta adding a
// million names was once accepted); the names it removes or only moves
// count as such. A refused delta leaves the roster as it was.
func TestRosterApplyNamesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a million-name roster takes seconds")
	}
	addr := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	moved := []netip.Addr{netip.MustParseAddr("10.0.0.2")}
	r := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: make(map[string][]netip.Addr, spec.MaxNames)}
	for i := range spec.MaxNames - 1 {
		r.Names[fmt.Sprintf("n%d.internal", i)] = addr
	}
	set := func(names ...string) map[string][]netip.Addr {
		m := map[string][]netip.Addr{}
		for _, n := range names {
			m[n] = addr
			if !strings.HasPrefix(n, "new") {
				m[n] = moved // a name the roster has: moved, not added
			}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		delta   *spec.RosterDelta
		wantErr string
	}{
		{"up to the limit", &spec.RosterDelta{Set: set("new1.internal")}, ""},
		{"past the limit", &spec.RosterDelta{Set: set("new1.internal", "new2.internal")},
			fmt.Sprintf("set: the roster would hold %d names after this delta (%d before); at most %d", spec.MaxNames+1, spec.MaxNames-1, spec.MaxNames)},
		{"as many removed as added", &spec.RosterDelta{Set: set("new1.internal", "new2.internal"), Remove: []string{"n0.internal"}}, ""},
		{"a name removed that the roster lacks frees nothing", &spec.RosterDelta{Set: set("new1.internal", "new2.internal"), Remove: []string{"gone.internal"}},
			fmt.Sprintf("set: the roster would hold %d names after this delta (%d before); at most %d", spec.MaxNames+1, spec.MaxNames-1, spec.MaxNames)},
		{"moved names are no new names", &spec.RosterDelta{Set: set("n1.internal", "n2.internal", "new1.internal")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.delta.From, tc.delta.To = r.Generation, r.Generation+1
			before := len(r.Names)
			undo, err := r.Apply(tc.delta)
			var got string
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Fatalf("Apply(+%d -%d to %d names) = %q, want %q", len(tc.delta.Set), len(tc.delta.Remove), before, got, tc.wantErr)
			}
			if err != nil {
				var fe *spec.FieldError
				if !errors.As(err, &fe) {
					t.Errorf("Apply's refusal %T is no *spec.FieldError", err)
				}
				if r.Generation != tc.delta.From || len(r.Names) != before {
					t.Errorf("the refused delta changed the roster: generation %d, %d names; want %d, %d", r.Generation, len(r.Names), tc.delta.From, before)
				}
				return
			}
			if _, err := r.Apply(undo); err != nil { // back to MaxNames-1 for the next case
				t.Fatal(err)
			}
		})
	}
}
