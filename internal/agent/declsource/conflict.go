package declsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Refusal says why a declaration was refused, as
// meshhost_agent_declarations_refused_total counts it.
type Refusal string

const (
	// RefusedInvalid: a fault in the document (HTTP 400).
	RefusedInvalid Refusal = "invalid"
	// RefusedTooLarge: the document is over spec.MaxDocumentBytes (HTTP 413).
	RefusedTooLarge Refusal = "too_large"
	// RefusedOtherMachine: the declaration is another machine's (HTTP 400).
	RefusedOtherMachine Refusal = "other_machine"
	// RefusedOlder: its generation is older than the one in force (HTTP 409).
	RefusedOlder Refusal = "older_generation"
	// RefusedGenerationReused: the generation in force, with other content
	// (HTTP 409). The same document again is accepted, and changes nothing.
	RefusedGenerationReused Refusal = "generation_reused"
	// RefusedRosterOlder: its roster is older than the one served or the one
	// in force (HTTP 409).
	RefusedRosterOlder Refusal = "roster_older"
	// RefusedRosterGenerationReused: its roster has the generation of the
	// one served (or in force) with other names (HTTP 409).
	RefusedRosterGenerationReused Refusal = "roster_generation_reused"
	// RefusedDeltaBase: a declaration delta whose roster delta does not
	// apply to the roster in force (ErrDeltaBase, HTTP 409): the
	// controller sends the whole declaration.
	RefusedDeltaBase Refusal = "delta_base"
)

// refusals lists every Refusal, for the metric's labels.
var refusals = []Refusal{RefusedInvalid, RefusedTooLarge, RefusedOtherMachine, RefusedOlder,
	RefusedGenerationReused, RefusedRosterOlder, RefusedRosterGenerationReused, RefusedDeltaBase}

// ErrConflict is matched (errors.Is) by every refusal of a declaration that
// contradicts what is in force (a *ConflictError): the push endpoint
// answers 409. A generation names one declaration, and one roster: a
// changed one needs a newer generation, or a machine would silently keep
// what the controller believes it changed.
var ErrConflict = errors.New("the declaration contradicts what is in force")

// ConflictError refuses a declaration that contradicts what is in force,
// each fault naming a path of the refused document. It matches ErrConflict,
// and ErrStale when the declaration or its roster is older (RefusedOlder,
// RefusedRosterOlder).
type ConflictError struct {
	Refusal Refusal
	Faults  []*spec.FieldError
}

func (e *ConflictError) Error() string {
	s := make([]string, len(e.Faults))
	for i, f := range e.Faults {
		s[i] = f.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the faults, so that every one is reported.
func (e *ConflictError) Unwrap() []error {
	out := make([]error, len(e.Faults))
	for i, f := range e.Faults {
		out[i] = f
	}
	return out
}

// Is matches ErrConflict, and ErrStale for an older declaration or roster.
func (e *ConflictError) Is(target error) bool {
	return target == ErrConflict || target == ErrStale && (e.Refusal == RefusedOlder || e.Refusal == RefusedRosterOlder)
}

// refused is a refusal other than a conflict or a fault of the document,
// and why.
type refused struct {
	why Refusal
	err error
}

func (r *refused) Error() string { return r.err.Error() }
func (r *refused) Unwrap() error { return r.err }

// refusalOf classifies an error of Offer.
func refusalOf(err error) Refusal {
	var ce *ConflictError
	var r *refused
	switch {
	case errors.As(err, &ce):
		return ce.Refusal
	case errors.As(err, &r):
		return r.why
	case errors.Is(err, ErrDeltaBase):
		return RefusedDeltaBase
	}
	return RefusedInvalid
}

// maxFaults bounds the faults a conflict lists, as every error's
// (spec.MaxFaults); the last says how many more.
const maxFaults = spec.MaxFaults

type faultList []*spec.FieldError

func (l *faultList) add(path, format string, args ...any) {
	*l = append(*l, &spec.FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// bounded returns the list, at most maxFaults long.
func (l faultList) bounded() []*spec.FieldError {
	if len(l) <= maxFaults {
		return l
	}
	more := len(l) - maxFaults + 1
	return append(l[:maxFaults-1:maxFaults-1], &spec.FieldError{Reason: fmt.Sprintf("and %d more differences", more)})
}

// checkGenerations judges d against cur, the declaration in force (nil:
// none), and served, the roster the resolver serves (nil: unknown). It
// returns same when d is cur again (the same push twice, which is not a
// fault), and a *ConflictError when d contradicts them.
func checkGenerations(d, cur *spec.Declaration, srv served) (same bool, err error) {
	if cur != nil {
		switch {
		case d.Generation < cur.Generation:
			return false, olderThan(d.Generation, cur.Generation)
		case d.Generation == cur.Generation:
			diffs := declarationDifferences(cur, d)
			if len(diffs) == 0 {
				return true, nil
			}
			faults := faultList{{
				Path:   "generation",
				Reason: fmt.Sprintf("%d is in force with other content; a changed declaration needs a newer generation", d.Generation),
			}}
			return false, &ConflictError{Refusal: RefusedGenerationReused, Faults: append(faults, diffs...).bounded()}
		}
	}
	// The roster's generation names one roster too, and never goes back:
	// judged against the one served and the one of the declaration in
	// force (a roster the guard holds is in force, not served).
	type known struct {
		gen    uint64
		roster func() *spec.Roster // read only when the generations are equal
		what   string
	}
	var knowns []known
	if srv.gen != 0 && (cur == nil || srv.gen != cur.Roster.Generation) {
		// The served roster is read only when it is not the one in force
		// (then judged as that one): rarely, and at a cost.
		knowns = append(knowns, known{srv.gen, srv.roster, "served"})
	}
	if cur != nil {
		what := fmt.Sprintf("in force in declaration %d", cur.Generation)
		if srv.gen == cur.Roster.Generation {
			what = "served"
		}
		knowns = append(knowns, known{cur.Roster.Generation, func() *spec.Roster { return cur.Roster }, what})
	}
	for _, k := range knowns {
		switch g := d.Roster.Generation; {
		case g < k.gen:
			return false, &ConflictError{Refusal: RefusedRosterOlder, Faults: []*spec.FieldError{{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("%d is older than roster generation %d, %s; rosters never go back (a roster that moved back would leave names at old addresses)", g, k.gen, k.what),
			}}}
		case g == k.gen:
			var r *spec.Roster
			if k.roster != nil {
				r = k.roster()
			}
			if r == nil {
				continue // cannot be read: judged by its generation only
			}
			diffs := rosterDifferences(r, d.Roster, "roster")
			if len(diffs) == 0 {
				continue
			}
			faults := faultList{{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("roster generation %d is %s with other names; a changed roster needs a newer generation", g, k.what),
			}}
			return false, &ConflictError{Refusal: RefusedRosterGenerationReused, Faults: append(faults, diffs...).bounded()}
		}
	}
	return false, nil
}

// olderThan refuses declaration generation gen, older than inForce.
func olderThan(gen, inForce uint64) *ConflictError {
	return &ConflictError{Refusal: RefusedOlder, Faults: []*spec.FieldError{{
		Path:   "generation",
		Reason: fmt.Sprintf("%d is older than generation %d, which is in force; generations never go back", gen, inForce),
	}}}
}

// declarationDifferences returns what differs from cur to d (the same
// generation), each named by its path in d. It never shows env or label
// values: a container's field is named, not its value.
func declarationDifferences(cur, d *spec.Declaration) faultList {
	var out faultList
	in := fmt.Sprintf("generation %d in force", cur.Generation)
	if d.Schema != cur.Schema {
		out.add("schema", "%d here, %d in %s", d.Schema, cur.Schema, in)
	}
	if d.MeshNames != cur.MeshNames {
		out.add("mesh_names", "%q here, %q in %s", d.MeshNames, cur.MeshNames, in)
	}
	if d.Roster.Generation != cur.Roster.Generation {
		out.add("roster.generation", "%d here, %d in %s", d.Roster.Generation, cur.Roster.Generation, in)
	} else {
		out = append(out, rosterDifferences(cur.Roster, d.Roster, "roster")...)
	}
	old := map[string]spec.Container{}
	for _, c := range cur.Containers {
		old[c.Name] = c
	}
	here := map[string]bool{}
	for i, c := range d.Containers {
		here[c.Name] = true
		path := fmt.Sprintf("containers[%d]", i)
		o, ok := old[c.Name]
		if !ok {
			out.add(path, "%q is not in %s", c.Name, in)
			continue
		}
		for _, field := range containerDifferences(o, c) {
			out.add(path+"."+field, "differs from %s", in)
		}
	}
	for _, c := range cur.Containers {
		if !here[c.Name] {
			out.add("containers", "%q of %s is not here", c.Name, in)
		}
	}
	return out
}

// containerDifferences names the fields of a and b that differ, in the
// declaration's terms, in order.
func containerDifferences(a, b spec.Container) []string {
	ja, errA := fieldsOf(a)
	jb, errB := fieldsOf(b)
	if errA != nil || errB != nil {
		return []string{"(unreadable)"}
	}
	var out []string
	for k, v := range jb {
		if w, ok := ja[k]; !ok || string(w) != string(v) {
			out = append(out, k)
		}
	}
	for k := range ja {
		if _, ok := jb[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func fieldsOf(c spec.Container) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	return m, json.Unmarshal(b, &m)
}

// rosterDifferences returns the names added, removed or moved from a (in
// force) to b (here), and the zones when they differ, each named by its
// path under prefix; nil when both name the same addresses. Generations
// are the caller's. Both are normalized (specjson's, or the resolver's).
func rosterDifferences(a, b *spec.Roster, prefix string) faultList {
	var out faultList
	if !slices.Equal(a.Zones, b.Zones) {
		out.add(prefix+".zones", "%v here, %v in force", b.Zones, a.Zones)
	}
	if len(a.Names) == len(b.Names) && len(out) == 0 && sameNames(a, b) {
		return nil
	}
	var names []string
	for n, addrs := range b.Names {
		if old, ok := a.Names[n]; !ok || !slices.Equal(old, addrs) {
			names = append(names, n)
		}
	}
	for n := range a.Names {
		if _, ok := b.Names[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for i, n := range names {
		if i == maxFaults {
			out.add(prefix+".names", "and %d more names differ", len(names)-i)
			break
		}
		path := fmt.Sprintf("%s.names[%q]", prefix, n)
		old, inA := a.Names[n]
		new, inB := b.Names[n]
		switch {
		case !inA:
			out.add(path, "not in the roster in force")
		case !inB:
			out.add(path, "in the roster in force (%s), not here", addrList(old))
		default:
			out.add(path, "%s here, %s in force", addrList(new), addrList(old))
		}
	}
	return out
}

func sameNames(a, b *spec.Roster) bool {
	for n, addrs := range b.Names {
		if old, ok := a.Names[n]; !ok || !slices.Equal(old, addrs) {
			return false
		}
	}
	return true
}

func addrList(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
