package spec

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Roster is the mesh's list of names: every name on the mesh and its
// addresses, at one generation. Containers resolve it at lookup time through
// the resolver (resolve mode) or get it copied into their hosts (copy mode).
//
// A Roster is applied whole or not at all; a validated Roster has canonical
// (lowercase, no trailing dot) names and zones and sorted, distinct addresses.
type Roster struct {
	// Generation orders rosters; it never goes backwards. Zero is invalid.
	Generation uint64
	// Zones are the domains the mesh is authoritative for, e.g. "internal":
	// an unknown name inside them does not exist and is never forwarded.
	Zones []string
	// Names maps a name to its addresses (IPv4 and IPv6). Names outside the
	// zones are exact routed names, e.g. "searxng.zurag.be".
	Names map[string][]netip.Addr
}

// Limits of a roster the resolver serves, which Validate enforces: a roster
// beyond them is refused where it is declared, with the path, rather than
// by every machine's resolver at every pass.
const (
	// MaxAddrsPerName bounds one name's addresses: more would not fit a DNS
	// answer anyway.
	MaxAddrsPerName = 4000
	// MaxZones bounds the zones of a roster.
	MaxZones = 1<<16 - 2
)

// Validate reports every fault of r, each a *FieldError naming the entry.
func (r *Roster) Validate() error { return r.ValidateYielding(nil) }

// ValidateYielding is Validate calling yield, when not nil, once per name as
// it goes: a caller validating a large roster beside latency-sensitive work
// passes a function that steps aside while that work waits (the resolver's
// swap does, for its sockets). spec itself never waits.
func (r *Roster) ValidateYielding(yield func()) error {
	var errs FaultList
	if r.Generation == 0 {
		errs.Add("generation", "must be greater than 0")
	}
	validateZones(&errs, "zones", r.Zones)
	if len(r.Names) > MaxNames {
		errs.Add("names", "%d names; at most %d", len(r.Names), MaxNames)
		return errs.Err()
	}
	if r.namesValid(yield) {
		return errs.Err()
	}
	canonical := map[string]string{} // canonical name -> name as given
	for _, name := range sortedKeys(r.Names) {
		// The path is formatted only for faults: with 100,000 names,
		// formatting it for every valid one doubled Validate's time.
		path := lazyPath{name}
		if err := CheckName(CanonicalName(name)); err != nil {
			errs.Add(path.String(), "not a valid host name: %v", err)
			continue
		}
		cn := CanonicalName(name)
		if prev, ok := canonical[cn]; ok {
			errs.Add(path.String(), "same name as %q (names are case-insensitive); keep one", prev)
			continue
		}
		canonical[cn] = name
		addrs := r.Names[name]
		switch {
		case len(addrs) == 0:
			errs.Add(path.String(), "has no addresses; remove the name or give it one")
		case len(addrs) > MaxAddrsPerName:
			errs.Add(path.String(), "has %d addresses; at most %d fit a DNS answer", len(addrs), MaxAddrsPerName)
		}
		for j := range addrs {
			if fault := addrFault(addrs, j); fault != "" {
				errs.Add(path.index(j), "%s", fault)
			}
		}
	}
	return errs.Err()
}

// validateZones reports the faults of a list of zones at path.
func validateZones(errs *FaultList, path string, zones []string) {
	if len(zones) > MaxZones {
		errs.Add(path, "%d zones; at most %d are supported", len(zones), MaxZones)
	}
	seen := map[string]bool{}
	for i, z := range zones {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := CheckName(CanonicalName(z)); err != nil {
			errs.Add(p, "%v", err)
			continue
		}
		cz := CanonicalName(z)
		if seen[cz] {
			errs.Add(p, "zone %q is listed twice", z)
		}
		seen[cz] = true
	}
}

// addrFault says what is wrong with addrs[j], "" when nothing is; both of
// Validate's passes judge addresses by it.
func addrFault(addrs []netip.Addr, j int) string {
	switch a := addrs[j]; {
	case !a.IsValid():
		return "is not a valid IP address"
	case a.Zone() != "":
		return fmt.Sprintf("%s has an IPv6 zone, which a hosts entry cannot carry", a)
	case a.Is4In6():
		return fmt.Sprintf("%s is an IPv4-mapped IPv6 address; write %s", a, a.Unmap())
	case slices.Contains(addrs[:j], a): // lists are short: no map per name
		return fmt.Sprintf("%s is listed twice", a)
	}
	return ""
}

// namesValid reports whether Validate would find no fault in r.Names. It
// allocates nothing for a roster of canonical names and calls yield (when
// not nil) once per name: it runs on every roster swap, and sorting 100,000
// names to report faults in order held one CPU for tens of milliseconds.
// Validate sorts only when there are faults to report.
func (r *Roster) namesValid(yield func()) bool {
	var folded map[string]bool // canonical forms of the names not given canonical
	for name, addrs := range r.Names {
		if yield != nil {
			yield()
		}
		cn := CanonicalName(name)
		if CheckName(cn) != nil || len(addrs) == 0 || len(addrs) > MaxAddrsPerName {
			return false
		}
		if cn != name {
			if _, clash := r.Names[cn]; clash || folded[cn] {
				return false
			}
			if folded == nil {
				folded = map[string]bool{}
			}
			folded[cn] = true
		}
		for j := range addrs {
			if addrFault(addrs, j) != "" {
				return false
			}
		}
	}
	return true
}

// Normalize returns a copy of a valid r with canonical names and zones and
// sorted addresses. Call it after Validate.
func (r *Roster) Normalize() *Roster {
	out := &Roster{Generation: r.Generation, Names: make(map[string][]netip.Addr, len(r.Names))}
	for _, z := range r.Zones {
		out.Zones = append(out.Zones, CanonicalName(z))
	}
	slices.Sort(out.Zones)
	out.Zones = slices.Compact(out.Zones)
	for name, addrs := range r.Names {
		a := slices.Clone(addrs)
		slices.SortFunc(a, netip.Addr.Compare)
		out.Names[CanonicalName(name)] = slices.Compact(a)
	}
	return out
}

func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// lazyPath is the path of a roster name, formatted only when a fault needs it.
type lazyPath struct{ name string }

func (p lazyPath) String() string     { return fmt.Sprintf("names[%q]", p.name) }
func (p lazyPath) index(i int) string { return fmt.Sprintf("names[%q][%d]", p.name, i) }
