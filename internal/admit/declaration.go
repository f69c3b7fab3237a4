package admit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Served is the roster the resolver serves: its generation (0: unknown),
// and how to read it (costly: read only when an input carries that
// generation and the declaration in force another; nil: cannot be read).
type Served struct {
	Generation uint64
	Roster     func() *spec.Roster
}

// Machine judges machine, the machine an input is for, against agent (the
// machine the agent runs; empty: any) and cur, the declaration in force
// (nil: none).
func Machine(agent string, cur *spec.Declaration, machine string) Decision {
	if agent != "" && machine != agent {
		return refuse(OtherMachine, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; this agent runs %q", machine, agent)})
	}
	if cur != nil && machine != cur.Machine {
		return refuse(OtherMachine, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; the declaration in force is for %q", machine, cur.Machine)})
	}
	return accept
}

// Declaration judges d, a whole declaration that carries its roster (a
// push, a watched file), against cur, the declaration in force (nil:
// none), and srv, the roster served. Same when d is cur again; refused
// when d is older, reuses cur's generation with other content, or carries
// a roster older than the one served or in force, or of its generation
// with other names.
func Declaration(d, cur *spec.Declaration, srv Served) Decision {
	if cur != nil {
		switch {
		case d.Generation < cur.Generation:
			return olderThan(d.Generation, cur.Generation)
		case d.Generation == cur.Generation:
			diffs := differences(cur, d)
			if len(diffs) == 0 {
				return same
			}
			return generationReused(d.Generation, diffs)
		}
	}
	return rosterAgainst(d.Roster, cur, srv)
}

// rosterAgainst judges r, the roster of a newer declaration, against the
// roster served and the one of the declaration in force (a roster the
// guard holds is in force, not served): its generation never goes back,
// and names one roster.
func rosterAgainst(r *spec.Roster, cur *spec.Declaration, srv Served) Decision {
	type known struct {
		gen    uint64
		roster func() *spec.Roster // read only when the generations are equal
		what   string
	}
	var knowns []known
	if srv.Generation != 0 && (cur == nil || srv.Generation != cur.Roster.Generation) {
		// The served roster is read only when it is not the one in force
		// (then judged as that one): rarely, and at a cost.
		knowns = append(knowns, known{srv.Generation, srv.Roster, "served"})
	}
	if cur != nil {
		what := fmt.Sprintf("in force in declaration %d", cur.Generation)
		if srv.Generation == cur.Roster.Generation {
			what = "served"
		}
		knowns = append(knowns, known{cur.Roster.Generation, func() *spec.Roster { return cur.Roster }, what})
	}
	for _, k := range knowns {
		switch g := r.Generation; {
		case g < k.gen:
			return refuse(RosterOlder, &spec.FieldError{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("%d is older than roster generation %d, %s; rosters never go back (a roster that moved back would leave names at old addresses)", g, k.gen, k.what),
			})
		case g == k.gen:
			var was *spec.Roster
			if k.roster != nil {
				was = k.roster()
			}
			if was == nil {
				continue // cannot be read: judged by its generation only
			}
			diffs := RosterDifferences(was, r, "roster")
			if len(diffs) == 0 {
				continue
			}
			faults := Faults{{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("roster generation %d is %s with other names; a changed roster needs a newer generation", g, k.what),
			}}
			return refuse(RosterGenerationReused, append(faults, diffs...).Bounded()...)
		}
	}
	return accept
}

// Parts judges d, a declaration built from parts that travel apart (the
// NATS source: the roster from one bucket, the rest from another), against
// cur and srv. It is newer when its generation is higher, or equal with a
// higher roster generation: the roster moves without the rest. An older
// declaration with a roster newer than the one in force is Accepted
// RosterOnly: the declaration in force (a local rollback) stays and the
// roster moves (issue 22 defect 4: refused whole, it froze the machine's
// names for good). An older one with no newer roster is refused, as is a
// roster older than the one in force or served, or of the generation of
// either with other names; the same again is Same.
func Parts(d, cur *spec.Declaration, srv Served) Decision {
	rosterOnly := false
	if cur != nil {
		gen := d.Generation
		if gen == cur.Generation {
			// The rest is judged as Declaration judges it, the roster
			// below.
			rest := *d
			rest.Roster = cur.Roster
			if diffs := differences(cur, &rest); len(diffs) > 0 {
				return generationReused(gen, diffs)
			}
		}
		if gen < cur.Generation {
			if d.Roster.Generation <= cur.Roster.Generation {
				return olderThan(gen, cur.Generation)
			}
			rosterOnly, gen = true, cur.Generation
		}
		switch {
		case gen == cur.Generation && d.Roster.Generation < cur.Roster.Generation:
			return refuse(RosterOlder, &spec.FieldError{
				Path:   "roster.generation",
				Reason: fmt.Sprintf("%d is older than roster generation %d, in force in declaration %d; rosters never go back", d.Roster.Generation, cur.Roster.Generation, cur.Generation),
			})
		case gen == cur.Generation && d.Roster.Generation == cur.Roster.Generation:
			return same
		}
	}
	// The roster is judged as Declaration judges it: never older than the
	// one served or in force, and of their generation only with their
	// names.
	if dec := rosterAgainst(d.Roster, cur, srv); dec.Verdict == Refused {
		return dec
	}
	return Decision{Verdict: Accepted, RosterOnly: rosterOnly}
}

// Contents judges d against cur by their declaration generations and
// contents alone, rosters aside: what judges a declaration that travels
// without its roster (the NATS machines bucket: its watcher, and publish
// against what the bucket holds). Same when d is cur again.
func Contents(d, cur *spec.Declaration) Decision {
	if cur == nil || d.Generation > cur.Generation {
		return accept
	}
	if d.Generation < cur.Generation {
		return olderThan(d.Generation, cur.Generation)
	}
	a, b := *cur, *d
	a.Roster, b.Roster = &spec.Roster{}, &spec.Roster{}
	if diffs := differences(&a, &b); len(diffs) > 0 {
		return generationReused(d.Generation, diffs)
	}
	return same
}

func generationReused(gen uint64, diffs Faults) Decision {
	faults := Faults{{
		Path:   "generation",
		Reason: fmt.Sprintf("%d is in force with other content; a changed declaration needs a newer generation", gen),
	}}
	return refuse(GenerationReused, append(faults, diffs...).Bounded()...)
}

// olderThan refuses declaration generation gen, older than inForce.
func olderThan(gen, inForce uint64) Decision {
	return refuse(Older, &spec.FieldError{
		Path:   "generation",
		Reason: fmt.Sprintf("%d is older than generation %d, which is in force; generations never go back", gen, inForce),
	})
}

// differences returns what differs from cur to d (the same generation),
// each named by its path in d. It never shows env or label values: a
// container's field is named, not its value.
func differences(cur, d *spec.Declaration) Faults {
	var out Faults
	in := fmt.Sprintf("generation %d in force", cur.Generation)
	if d.Schema != cur.Schema {
		out.Add("schema", "%d here, %d in %s", d.Schema, cur.Schema, in)
	}
	if d.MeshNames != cur.MeshNames {
		out.Add("mesh_names", "%q here, %q in %s", d.MeshNames, cur.MeshNames, in)
	}
	if d.Roster.Generation != cur.Roster.Generation {
		out.Add("roster.generation", "%d here, %d in %s", d.Roster.Generation, cur.Roster.Generation, in)
	} else {
		out = append(out, RosterDifferences(cur.Roster, d.Roster, "roster")...)
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
			out.Add(path, "%q is not in %s", c.Name, in)
			continue
		}
		for _, field := range containerDifferences(o, c) {
			out.Add(path+"."+field, "differs from %s", in)
		}
	}
	for _, c := range cur.Containers {
		if !here[c.Name] {
			out.Add("containers", "%q of %s is not here", c.Name, in)
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

// RosterDifferences returns the names added, removed or moved from a (in
// force) to b (here), and the zones when they differ, each named by its
// path under prefix; nil when both name the same addresses. Generations
// are the caller's. Both are normalized (specjson's, or the resolver's).
func RosterDifferences(a, b *spec.Roster, prefix string) Faults {
	var out Faults
	if !slices.Equal(a.Zones, b.Zones) {
		out.Add(prefix+".zones", "%v here, %v in force", b.Zones, a.Zones)
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
			out.Add(prefix+".names", "and %d more names differ", len(names)-i)
			break
		}
		path := fmt.Sprintf("%s.names[%q]", prefix, n)
		old, inA := a.Names[n]
		new, inB := b.Names[n]
		switch {
		case !inA:
			out.Add(path, "not in the roster in force")
		case !inB:
			out.Add(path, "in the roster in force (%s), not here", AddrList(old))
		default:
			out.Add(path, "%s here, %s in force", AddrList(new), AddrList(old))
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

// AddrList writes addresses as a fault shows them: comma-separated.
func AddrList(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
