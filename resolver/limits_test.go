package resolver

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestApplyNamesLimit: a delta may not grow the roster served past
// spec.MaxNames names, the limit of a whole roster: the overlay a delta
// makes (what PATCH /v1/roster on the control socket applies) refuses it
// as spec.Roster.Apply does. The table stands for one of MaxNames-1 names
// (compiling a million names is not this test's business).
func TestApplyNamesLimit(t *testing.T) {
	base, err := buildTable(testRoster(7), 5, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	base.count = spec.MaxNames - 1
	addr := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	for _, tc := range []struct {
		name    string
		set     []string
		remove  []string
		wantErr string
	}{
		{"up to the limit", []string{"new1.internal"}, nil, ""},
		{"past the limit", []string{"new1.internal", "new2.internal"}, nil,
			fmt.Sprintf("set: the roster would hold %d names after this delta (%d before); at most %d", spec.MaxNames+1, spec.MaxNames-1, spec.MaxNames)},
		{"as many removed", []string{"new1.internal", "new2.internal"}, []string{"gitea.novox.internal"}, ""},
		{"a name moved is no new name", []string{"gitea.novox.internal", "new1.internal"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &spec.RosterDelta{From: 7, To: 8, Set: map[string][]netip.Addr{}, Remove: tc.remove}
			for _, n := range tc.set {
				d.Set[n] = addr
			}
			_, err := base.apply(d)
			var got string
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("apply(+%v -%v) to %d names = %q, want %q", tc.set, tc.remove, base.count, got, tc.wantErr)
			}
		})
	}
}
