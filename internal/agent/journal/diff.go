package journal

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Diff is what changed between two rosters: the names added, removed, and
// moved (same name, other addresses).
type Diff struct {
	From    uint64 `json:"from"` // roster generations; From is 0 for the first roster
	To      uint64 `json:"to"`
	Added   []Name `json:"added,omitempty"`
	Removed []Name `json:"removed,omitempty"`
	Moved   []Move `json:"moved,omitempty"`
	// Unknown: what changed was not known when it was recorded (the
	// agent had lost track of the declarations in between).
	Unknown bool `json:"unknown,omitempty"`
}

// Name is a roster name and its addresses.
type Name struct {
	Name  string       `json:"name"`
	Addrs []netip.Addr `json:"addrs"`
}

// Move is a name whose addresses changed.
type Move struct {
	Name string       `json:"name"`
	Old  []netip.Addr `json:"old"`
	New  []netip.Addr `json:"new"`
}

// RosterDiff returns the names added, removed or moved from a to b, each
// list sorted by name. A nil roster has no names.
func RosterDiff(a, b *spec.Roster) Diff {
	var d Diff
	old, new := names(a), names(b)
	if a != nil {
		d.From = a.Generation
	}
	if b != nil {
		d.To = b.Generation
	}
	for _, n := range sortedUnion(old, new) {
		oa, inOld := old[n]
		na, inNew := new[n]
		switch {
		case !inOld:
			d.Added = append(d.Added, Name{n, na})
		case !inNew:
			d.Removed = append(d.Removed, Name{n, oa})
		case !slices.Equal(oa, na):
			d.Moved = append(d.Moved, Move{n, oa, na})
		}
	}
	return d
}

// DiffOf returns the diff a roster delta makes, from the delta and its
// undo (spec.Roster.Apply's, or spec.DiffRosters'), which holds the
// addresses the names it moved or removed had: in time proportional to the
// delta.
func DiffOf(delta, undo *spec.RosterDelta) Diff {
	d := Diff{From: delta.From, To: delta.To}
	for _, n := range slices.Sorted(maps.Keys(delta.Set)) {
		old, had := undo.Set[n]
		switch {
		case !had:
			d.Added = append(d.Added, Name{n, delta.Set[n]})
		case !slices.Equal(old, delta.Set[n]):
			d.Moved = append(d.Moved, Move{n, old, delta.Set[n]})
		}
	}
	for _, n := range delta.Remove { // sorted
		if old, had := undo.Set[n]; had {
			d.Removed = append(d.Removed, Name{n, old})
		}
	}
	return d
}

// Then returns the diff of d followed by e (e.From must be d.To), in time
// proportional to both: each name's addresses before d and after e.
func (d Diff) Then(e Diff) Diff {
	type state struct {
		addrs   []netip.Addr
		present bool
	}
	before, after := map[string]state{}, map[string]state{}
	note := func(n string, old state, new state) {
		if _, seen := before[n]; !seen {
			before[n] = old
		}
		after[n] = new
	}
	for _, x := range []Diff{d, e} {
		for _, a := range x.Added {
			note(a.Name, state{}, state{a.Addrs, true})
		}
		for _, r := range x.Removed {
			note(r.Name, state{r.Addrs, true}, state{})
		}
		for _, m := range x.Moved {
			note(m.Name, state{m.Old, true}, state{m.New, true})
		}
	}
	out := Diff{From: d.From, To: e.To}
	for _, n := range slices.Sorted(maps.Keys(before)) {
		b, a := before[n], after[n]
		switch {
		case !b.present && a.present:
			out.Added = append(out.Added, Name{n, a.addrs})
		case b.present && !a.present:
			out.Removed = append(out.Removed, Name{n, b.addrs})
		case b.present && a.present && !slices.Equal(b.addrs, a.addrs):
			out.Moved = append(out.Moved, Move{n, b.addrs, a.addrs})
		}
	}
	return out
}

// Reverse returns the diff that takes d back.
func (d Diff) Reverse() Diff {
	out := Diff{From: d.To, To: d.From, Added: d.Removed, Removed: d.Added, Unknown: d.Unknown}
	for _, m := range d.Moved {
		out.Moved = append(out.Moved, Move{m.Name, m.New, m.Old})
	}
	return out
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Added)+len(d.Removed)+len(d.Moved) == 0 }

// String is one line per change:
//
//   - searxng.zurag.be 100.64.0.9
//   - old.internal 10.0.0.1
//     ~ gitea.novox.internal 10.89.0.7 -> 10.89.0.8
func (d Diff) String() string {
	var b strings.Builder
	for _, n := range d.Added {
		fmt.Fprintf(&b, "+ %s %s\n", n.Name, addrs(n.Addrs))
	}
	for _, n := range d.Removed {
		fmt.Fprintf(&b, "- %s %s\n", n.Name, addrs(n.Addrs))
	}
	for _, m := range d.Moved {
		fmt.Fprintf(&b, "~ %s %s -> %s\n", m.Name, addrs(m.Old), addrs(m.New))
	}
	return b.String()
}

func addrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// names returns r's names, canonical, with sorted addresses.
func names(r *spec.Roster) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	if r == nil {
		return out
	}
	for n, as := range r.Names {
		as = slices.Clone(as)
		slices.SortFunc(as, netip.Addr.Compare)
		out[spec.CanonicalName(n)] = slices.Compact(as)
	}
	return out
}

func sortedUnion(a, b map[string][]netip.Addr) []string {
	out := make([]string, 0, len(a)+len(b))
	for n := range a {
		out = append(out, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
