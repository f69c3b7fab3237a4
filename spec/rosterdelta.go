package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
)

// RosterDelta is a change to a roster: the names it sets (adds, or gives
// other addresses) and removes, and its zones when they change. It takes
// roster generation From to generation To, and applies only on top of
// generation From, so that a change is never applied to a roster it was
// not computed from.
//
// A delta costs what it changes: validating, applying, composing and
// writing one touch its own names, never the roster's. A normalized delta
// (Normalize) has canonical names and zones, sorted distinct addresses and
// a sorted Remove.
type RosterDelta struct {
	// From is the generation the delta applies to; 0 is "no roster".
	From uint64
	// To is the generation the roster has once the delta is applied.
	To uint64
	// Zones, when not nil, are the zones of generation To, whole; nil
	// leaves the zones as they are.
	Zones []string
	// Set maps each name added or moved to its addresses in generation To.
	Set map[string][]netip.Addr
	// Remove lists the names that leave the roster.
	Remove []string
}

// ErrDeltaBase is returned when a delta is applied to a roster of another
// generation than its From.
var ErrDeltaBase = errors.New("the delta does not apply to this roster generation")

// Len is the number of names d changes.
func (d *RosterDelta) Len() int { return len(d.Set) + len(d.Remove) }

// Empty reports whether d changes no name and no zone.
func (d *RosterDelta) Empty() bool { return d.Len() == 0 && d.Zones == nil }

// Validate reports every fault of d, each a *FieldError: a To not after
// From, names that are no host names, set twice (names are
// case-insensitive) or both set and removed, addresses as Roster.Validate
// judges them, and zones as Roster.Validate judges them. It costs what d
// changes, whatever the size of the roster it applies to.
func (d *RosterDelta) Validate() error {
	var errs FaultList
	if d.To <= d.From {
		errs.Add("generation", "%d is not after from %d: a delta moves a roster forward", d.To, d.From)
	}
	if d.Zones != nil {
		validateZones(&errs, "zones", d.Zones)
	}
	seen := make(map[string]string, d.Len()) // canonical name -> path where first given
	for _, name := range sortedKeys(d.Set) {
		path := joinPath("set", name)
		if !validName(name, path, &errs) {
			continue
		}
		cn := CanonicalName(name)
		if prev, ok := seen[cn]; ok {
			errs.Add(path, "same name as %s (names are case-insensitive); keep one", prev)
			continue
		}
		seen[cn] = path
		addrs := d.Set[name]
		switch {
		case len(addrs) == 0:
			errs.Add(path, "has no addresses; remove the name instead")
		case len(addrs) > MaxAddrsPerName:
			errs.Add(path, "has %d addresses; at most %d fit a DNS answer", len(addrs), MaxAddrsPerName)
		}
		for j := range addrs {
			if fault := addrFault(addrs, j); fault != "" {
				errs.Add(path+"["+strconv.Itoa(j)+"]", "%s", fault)
			}
		}
	}
	for i, name := range d.Remove {
		path := "remove[" + strconv.Itoa(i) + "]"
		if !validName(name, path, &errs) {
			continue
		}
		cn := CanonicalName(name)
		if prev, ok := seen[cn]; ok {
			errs.Add(path, "%q is also given at %s; a name is either set or removed", name, prev)
			continue
		}
		seen[cn] = path
	}
	return errs.Err()
}

func validName(name, path string, errs *FaultList) bool {
	if err := CheckName(CanonicalName(name)); err != nil {
		errs.Add(path, "not a valid host name: %v", err)
		return false
	}
	return true
}

// Normalize returns a copy of a valid d with canonical names and zones,
// sorted distinct addresses and a sorted Remove. Call it after Validate.
func (d *RosterDelta) Normalize() *RosterDelta {
	out := &RosterDelta{From: d.From, To: d.To, Set: make(map[string][]netip.Addr, len(d.Set))}
	if d.Zones != nil {
		out.Zones = canonicalZones(d.Zones)
	}
	for name, addrs := range d.Set {
		out.Set[CanonicalName(name)] = sortedAddrs(addrs)
	}
	for _, name := range d.Remove {
		out.Remove = append(out.Remove, CanonicalName(name))
	}
	slices.Sort(out.Remove)
	return out
}

func canonicalZones(zones []string) []string {
	out := make([]string, 0, len(zones))
	for _, z := range zones {
		out = append(out, CanonicalName(z))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedAddrs(addrs []netip.Addr) []netip.Addr {
	a := slices.Clone(addrs)
	slices.SortFunc(a, netip.Addr.Compare)
	return slices.Compact(a)
}

// Apply changes the normalized roster r by the normalized delta d, in
// place and in time proportional to d, and returns the delta that undoes
// it (from d.To back to d.From): the addresses the names d moved or
// removed had, and the names it added, to be removed. Removing a name r
// does not have changes nothing (so that composed deltas apply). A delta
// whose From is not r's generation is refused with ErrDeltaBase, and r is
// unchanged.
//
// A delta that would leave r more than MaxNames names is refused too
// (CheckDeltaNames), as a whole roster of that many is: it would grow the
// roster past the limit a few names at a time.
//
// r's map is changed in place: whoever holds r must own it, or no one
// else may read it meanwhile.
func (r *Roster) Apply(d *RosterDelta) (undo *RosterDelta, err error) {
	if d.From != r.Generation {
		return nil, fmt.Errorf("%w: the delta is from generation %d, the roster is generation %d", ErrDeltaBase, d.From, r.Generation)
	}
	if len(r.Names)+len(d.Set) > MaxNames { // else it cannot pass the limit: no need to count
		if err := CheckDeltaNames(len(r.Names), r.namesAfter(d)); err != nil {
			return nil, err
		}
	}
	undo = &RosterDelta{From: d.To, To: d.From, Set: map[string][]netip.Addr{}}
	if r.Names == nil {
		r.Names = map[string][]netip.Addr{}
	}
	if d.Zones != nil && !slices.Equal(d.Zones, r.Zones) {
		undo.Zones = r.Zones
		if undo.Zones == nil {
			undo.Zones = []string{}
		}
		r.Zones = slices.Clone(d.Zones)
	}
	for name, addrs := range d.Set {
		if old, ok := r.Names[name]; ok {
			undo.Set[name] = old
		} else {
			undo.Remove = append(undo.Remove, name)
		}
		r.Names[name] = addrs
	}
	for _, name := range d.Remove {
		if old, ok := r.Names[name]; ok {
			undo.Set[name] = old
			delete(r.Names, name)
		}
	}
	slices.Sort(undo.Remove)
	r.Generation = d.To
	return undo, nil
}

// namesAfter is how many names r would hold once d is applied, in time
// proportional to d.
func (r *Roster) namesAfter(d *RosterDelta) int {
	n := len(r.Names)
	for name := range d.Set {
		if _, ok := r.Names[name]; !ok {
			n++
		}
	}
	for _, name := range d.Remove {
		if _, ok := r.Names[name]; ok {
			if _, set := d.Set[name]; !set {
				n--
			}
		}
	}
	return n
}

// CheckDeltaNames refuses a roster delta that takes a roster of before
// names to after names, more than MaxNames, with a *FieldError at its
// "set": the limit of a whole roster (Roster.Validate) holds for one made
// by deltas too. Roster.Apply checks it; so does anyone who applies deltas
// to a roster of their own making (the resolver's tables).
func CheckDeltaNames(before, after int) error {
	if after <= MaxNames {
		return nil
	}
	return &FieldError{Path: "set", Reason: fmt.Sprintf("the roster would hold %d names after this delta (%d before); at most %d", after, before, MaxNames)}
}

// Then returns the delta that applies d and then e (e.From must be d.To),
// in time proportional to both. A name d adds and e removes is removed by
// the result, which changes nothing where the name is absent.
func (d *RosterDelta) Then(e *RosterDelta) (*RosterDelta, error) {
	if e.From != d.To {
		return nil, fmt.Errorf("%w: composing a delta to generation %d with one from %d", ErrDeltaBase, d.To, e.From)
	}
	out := &RosterDelta{From: d.From, To: e.To, Zones: d.Zones, Set: make(map[string][]netip.Addr, len(d.Set)+len(e.Set))}
	if e.Zones != nil {
		out.Zones = e.Zones
	}
	maps.Copy(out.Set, d.Set)
	removed := make(map[string]bool, len(d.Remove)+len(e.Remove))
	for _, n := range d.Remove {
		removed[n] = true
	}
	for n, a := range e.Set {
		out.Set[n] = a
		delete(removed, n)
	}
	for _, n := range e.Remove {
		delete(out.Set, n)
		removed[n] = true
	}
	out.Remove = make([]string, 0, len(removed))
	for n := range removed {
		out.Remove = append(out.Remove, n)
	}
	slices.Sort(out.Remove)
	return out, nil
}

// DiffRosters returns the delta from the normalized roster from to the
// normalized roster to, and the delta that undoes it, in time proportional
// to both rosters (a whole roster costs its size once, to find what
// changed; the deltas then cost what changed). A nil from is "no roster"
// (generation 0).
func DiffRosters(from, to *Roster) (delta, undo *RosterDelta) {
	var fromGen uint64
	var fromNames map[string][]netip.Addr
	var fromZones []string
	if from != nil {
		fromGen, fromNames, fromZones = from.Generation, from.Names, from.Zones
	}
	delta = &RosterDelta{From: fromGen, To: to.Generation, Set: map[string][]netip.Addr{}}
	undo = &RosterDelta{From: to.Generation, To: fromGen, Set: map[string][]netip.Addr{}}
	if !slices.Equal(fromZones, to.Zones) {
		delta.Zones, undo.Zones = nonNil(to.Zones), nonNil(fromZones)
	}
	kept := 0
	for name, addrs := range to.Names {
		old, ok := fromNames[name]
		switch {
		case !ok:
			delta.Set[name] = addrs
			undo.Remove = append(undo.Remove, name)
		case !slices.Equal(old, addrs):
			delta.Set[name], undo.Set[name] = addrs, old
			kept++
		default:
			kept++
		}
	}
	if kept < len(fromNames) { // some names are gone: find them
		for name, old := range fromNames {
			if _, ok := to.Names[name]; !ok {
				delta.Remove = append(delta.Remove, name)
				undo.Set[name] = old
			}
		}
	}
	slices.Sort(delta.Remove)
	slices.Sort(undo.Remove)
	return delta, undo
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// DeclarationDelta is a declaration given as a change to the one in
// force: a new declaration generation whose roster is the roster in force
// changed by Roster. Its containers and mesh_names are those in force. It
// lets a controller change k names of a large roster by sending k names.
type DeclarationDelta struct {
	Schema     int
	Machine    string
	Generation uint64
	Roster     *RosterDelta
}

// Validate reports every fault of d, each a *FieldError naming its path
// (roster_delta.set["a..b"]), in time proportional to d.
func (d *DeclarationDelta) Validate() error {
	var errs FaultList
	validateHead(&errs, d.Schema, d.Machine, d.Generation)
	if d.Roster == nil {
		errs.Add("roster_delta", "is required")
	} else if err := d.Roster.Validate(); err != nil {
		for _, e := range unjoin(err) {
			if fe, ok := e.(*FieldError); ok {
				errs.Add("roster_delta"+prefixPath(fe.Path), "%s", fe.Reason)
			} else {
				errs.AddErr(e)
			}
		}
	}
	return errs.Err()
}

type rosterDeltaDoc struct {
	From       uint64              `json:"from"`
	Generation uint64              `json:"generation"`
	Zones      []string            `json:"zones,omitempty"`
	Set        map[string][]string `json:"set,omitempty"`
	Remove     []string            `json:"remove,omitempty"`
}

// MarshalJSON writes d in the roster delta format specjson.ParseRosterDelta
// reads:
//
//	{"from": 7, "generation": 8, "zones": ["internal"],
//	 "set": {"gitea.novox.internal": ["10.89.0.8"]}, "remove": ["old.novox.internal"]}
//
// zones is written only when d changes them (an empty list is written as
// such: no zones).
func (d *RosterDelta) MarshalJSON() ([]byte, error) {
	doc := rosterDeltaDoc{From: d.From, Generation: d.To, Remove: d.Remove}
	if len(d.Set) > 0 {
		doc.Set = make(map[string][]string, len(d.Set))
		for n, addrs := range d.Set {
			s := make([]string, len(addrs))
			for i, a := range addrs {
				s[i] = a.String()
			}
			doc.Set[n] = s
		}
	}
	if d.Zones == nil {
		return json.Marshal(doc)
	}
	// omitempty would drop an empty list, which means "no zones" here.
	return json.Marshal(struct {
		rosterDeltaDoc
		Zones []string `json:"zones"`
	}{doc, d.Zones})
}

// MarshalJSON writes d in the declaration delta format
// specjson.ParseDeclarationDelta reads.
func (d *DeclarationDelta) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Schema      int          `json:"schema"`
		Machine     string       `json:"machine"`
		Generation  uint64       `json:"generation"`
		RosterDelta *RosterDelta `json:"roster_delta"`
	}{d.Schema, d.Machine, d.Generation, d.Roster})
}
