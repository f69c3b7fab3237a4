package resolver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Generation returns the generation of the roster being served, 0 before
// the first. Unlike Roster it copies nothing.
func (s *Server) Generation() uint64 {
	if t := s.table.Load(); t != nil {
		return t.gen
	}
	return 0
}

// Differences compares r's zones and names with those of the roster being
// served, whatever the generations, and returns what differs, sorted, at
// most max lines (the last then says how many more): nil when r names the
// same addresses. It is what a caller says when r claims the generation
// being served: a generation names one roster, and a roster that changes
// must take a newer one (Update refuses r either way).
//
// It reads the compiled table: nothing as large as the roster is built.
func (s *Server) Differences(r *spec.Roster, max int) []string {
	t := s.table.Load()
	if t == nil {
		return []string{"no roster is served"}
	}
	var out []string
	served := make([]string, 0, len(t.zones))
	for _, z := range t.zones {
		served = append(served, z.name)
	}
	slices.Sort(served)
	here := make([]string, 0, len(r.Zones))
	for _, z := range r.Zones {
		here = append(here, spec.CanonicalName(z))
	}
	slices.Sort(here)
	here = slices.Compact(here)
	if !slices.Equal(served, here) {
		out = append(out, fmt.Sprintf("zones: served %v, here %v", served, here))
	}
	present := 0 // r's names the table holds
	for name, addrs := range r.Names {
		h, found, _ := t.lookupName(name)
		if !found || len(h.a4)+len(h.a6) == 0 { // a roster name has addresses
			out = append(out, fmt.Sprintf("names[%q]: not in the served roster", spec.CanonicalName(name)))
			continue
		}
		present++
		have := addrList(h.a4, h.a6)
		want := addrs
		if !slices.IsSortedFunc(want, netip.Addr.Compare) {
			want = slices.Clone(want)
			slices.SortFunc(want, netip.Addr.Compare)
		}
		if !slices.Equal(have, slices.Compact(slices.Clone(want))) {
			out = append(out, fmt.Sprintf("names[%q]: served %s, here %s", spec.CanonicalName(name), addrString(have), addrString(want)))
		}
	}
	if t.count > present { // names served and not in r: find them (rare)
		canonical := make(map[string]bool, len(r.Names))
		for n := range r.Names {
			canonical[spec.CanonicalName(n)] = true
		}
		t.eachName(nil, func(name string, _, _ []byte) {
			if !canonical[name] {
				out = append(out, fmt.Sprintf("names[%q]: served, missing here", name))
			}
		})
	}
	slices.Sort(out)
	if max > 0 && len(out) > max {
		more := len(out) - max + 1
		out = append(out[:max-1], fmt.Sprintf("and %d more", more))
	}
	return out
}

func addrString(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// DeltaDifferences compares what d sets and removes with the roster being
// served, and returns what differs, sorted, at most max lines: nil when
// serving d's change again would change nothing. It is what a caller says
// when d claims the generation being served (Apply refuses d either way).
// It costs what d names, not the roster.
func (s *Server) DeltaDifferences(d *spec.RosterDelta, max int) []string {
	t := s.table.Load()
	if t == nil {
		return []string{"no roster is served"}
	}
	var out []string
	if d.Zones != nil && !sameZones(t, d.Zones) {
		out = append(out, fmt.Sprintf("zones: here %v, not as served", d.Zones))
	}
	for name, addrs := range d.Set {
		h, found, _ := t.lookupName(name)
		var have []netip.Addr
		if found {
			have = addrList(h.a4, h.a6)
		}
		want := slices.Clone(addrs)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(have, slices.Compact(want)) {
			out = append(out, fmt.Sprintf("set[%q]: served %s, here %s", spec.CanonicalName(name), addrString(have), addrString(want)))
		}
	}
	for _, name := range d.Remove {
		if h, found, _ := t.lookupName(name); found && len(h.a4)+len(h.a6) > 0 {
			out = append(out, fmt.Sprintf("remove[%q]: served at %s", spec.CanonicalName(name), addrString(addrList(h.a4, h.a6))))
		}
	}
	slices.Sort(out)
	if max > 0 && len(out) > max {
		more := len(out) - max + 1
		out = append(out[:max-1], fmt.Sprintf("and %d more", more))
	}
	return out
}
