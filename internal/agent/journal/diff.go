package journal

import (
	"fmt"
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
