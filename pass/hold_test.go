package pass

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/reconcile"
)

// TestHoldCountsRemovals: the hold counts removals of containers with
// replacements (a push that removed every container was neither held nor
// paced), but not the finishing of a removal cut short, nor creates; and
// says how many of each.
func TestHoldCountsRemovals(t *testing.T) {
	act := func(k reconcile.Kind, name string) reconcile.Action {
		return reconcile.Action{Kind: k, Name: name, Reason: string(k) + " " + name}
	}
	cutShort := reconcile.Action{Kind: reconcile.Remove, Name: "old", Removing: true, Reason: "cut short"}
	mixed := []reconcile.Action{cutShort, act(reconcile.Remove, "a"), act(reconcile.Remove, "b"), act(reconcile.Replace, "c"), act(reconcile.Replace, "d"), act(reconcile.Create, "e")}
	removals := []reconcile.Action{act(reconcile.Remove, "a"), act(reconcile.Remove, "b"), act(reconcile.Remove, "c")}
	for _, tc := range []struct {
		name      string
		actions   []reconcile.Action
		holdAbove int
		approved  uint64
		want      *Hold
		says      string
	}{
		{"replacements and removals over the limit", mixed, 3, 0,
			&Hold{Generation: 7, HoldAbove: 3, Replacements: []Replacement{{"c", "replace c"}, {"d", "replace d"}}, Removals: []Replacement{{"a", "remove a"}, {"b", "remove b"}}},
			"declaration 7 held: it would replace 2 and remove 2 containers, more than --hold-above 3; the containers stay as they are until `meshhost approve 7` (then the replacement budget paces it) or a newer declaration"},
		{"up to the limit together", mixed, 4, 0, nil, ""},
		{"removals alone", removals, 2, 0,
			&Hold{Generation: 7, HoldAbove: 2, Removals: []Replacement{{"a", "remove a"}, {"b", "remove b"}, {"c", "remove c"}}},
			"declaration 7 held: it would remove 3 containers, more than --hold-above 2; the containers stay as they are until `meshhost approve 7` (then the replacement budget paces it) or a newer declaration"},
		{"approved", mixed, 3, 7,
			&Hold{Generation: 7, HoldAbove: 3, Replacements: []Replacement{{"c", "replace c"}, {"d", "replace d"}}, Removals: []Replacement{{"a", "remove a"}, {"b", "remove b"}}, Approved: true},
			"declaration 7 replaces 2 and removes 2 containers, more than --hold-above 3; approved by the operator, it goes ahead within the replacement budget"},
		{"removals cut short do not count", []reconcile.Action{cutShort, cutShort, cutShort}, 1, 0, nil, ""},
		{"hold off", removals, 0, 0, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hold(7, &reconcile.Plan{Actions: tc.actions}, tc.holdAbove, func() uint64 { return tc.approved })
			if diff := cmp.Diff(tc.want, h); diff != "" {
				t.Fatalf("hold (-want +got):\n%s", diff)
			}
			if h != nil && h.String() != tc.says {
				t.Errorf("hold says\n%s\nwant\n%s", h, tc.says)
			}
		})
	}
}
