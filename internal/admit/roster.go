package admit

import (
	"fmt"

	"github.com/meshhost/meshhost/spec"
)

// DeclarationDelta judges a declaration delta (a pushed document: the
// declaration in force with generation gen, its roster changed by rd)
// against cur, the declaration in force, and srv. diffs returns what
// differs between the roster rd would make and the roster in force, each
// named by its path in the delta document; it is called only when gen is
// cur's and rd.To is the roster generation in force (none: the same push
// twice, Same).
func DeclarationDelta(gen uint64, rd *spec.RosterDelta, cur *spec.Declaration, srv Served, diffs func() Faults) Decision {
	if cur == nil {
		return refuse(DeltaBase, &spec.FieldError{Reason: fmt.Sprintf("generation %d: no declaration is in force to apply a roster delta to; send the whole declaration: %v", gen, ErrDeltaBase)})
	}
	switch {
	case gen < cur.Generation:
		return olderThan(gen, cur.Generation)
	case gen == cur.Generation:
		if rd.To != cur.Roster.Generation {
			return refuse(GenerationReused, &spec.FieldError{
				Path:   "generation",
				Reason: fmt.Sprintf("%d is in force with roster generation %d, not %d; a changed declaration needs a newer generation", gen, cur.Roster.Generation, rd.To),
			})
		}
		if d := diffs(); len(d) > 0 {
			faults := Faults{{
				Path:   "generation",
				Reason: fmt.Sprintf("%d is in force with roster generation %d, which this delta would make otherwise; a changed declaration needs a newer generation", gen, rd.To),
			}}
			return refuse(GenerationReused, append(faults, d...).Bounded()...)
		}
		return same // the same push twice is not a fault
	case rd.From != cur.Roster.Generation:
		return deltaFrom(rd.From, cur.Roster.Generation)
	}
	return deltaServed(rd, cur, srv)
}

// RosterDelta judges rd, a roster delta that moves apart from the
// declaration (the NATS source's roster commit) and was made under
// declaration generation declGen, against cur and srv. It applies to the
// roster in force whatever the declaration in force (an older declGen: a
// local rollback is in force, and the roster moves under it); a newer
// declGen is a declaration the agent lacks (DeltaBase: put it whole).
// diffs is as for DeclarationDelta, called when rd.To is the roster
// generation in force. A delta to an older roster is from another base
// (DeltaBase), as a pushed one is.
func RosterDelta(declGen uint64, rd *spec.RosterDelta, cur *spec.Declaration, srv Served, diffs func() Faults) Decision {
	if cur == nil {
		return refuse(DeltaBase, &spec.FieldError{Reason: fmt.Sprintf("roster generation %d: no declaration is in force to apply a roster delta to; put the whole declaration: %v", rd.To, ErrDeltaBase)})
	}
	switch {
	case declGen > cur.Generation:
		return refuse(DeltaBase, &spec.FieldError{Reason: fmt.Sprintf("generation %d: the declaration in force is generation %d; a roster delta changes no declaration, put the whole one: %v", declGen, cur.Generation, ErrDeltaBase)})
	case rd.To == cur.Roster.Generation:
		if d := diffs(); len(d) > 0 {
			faults := Faults{{
				Path:   "roster_delta.to",
				Reason: fmt.Sprintf("roster generation %d is in force, and this delta would make it otherwise; a changed roster needs a newer generation", rd.To),
			}}
			return refuse(RosterGenerationReused, append(faults, d...).Bounded()...)
		}
		return same // the same change again
	case rd.From != cur.Roster.Generation:
		// A delta to an older roster is from another base too, and is
		// judged so on every path, as a pushed one is.
		return deltaFrom(rd.From, cur.Roster.Generation)
	}
	return deltaServed(rd, cur, srv)
}

func deltaFrom(from, inForce uint64) Decision {
	return refuse(DeltaBase, &spec.FieldError{
		Path:   "roster_delta.from",
		Reason: fmt.Sprintf("%d, but the roster in force is generation %d; send the whole declaration, or a delta from %d", from, inForce, inForce),
	})
}

// deltaServed refuses rd, a delta from the roster in force, when the
// resolver serves a newer roster than that (an agent started on an older
// saved declaration): a delta from the older one cannot be judged against
// it by its names.
func deltaServed(rd *spec.RosterDelta, cur *spec.Declaration, srv Served) Decision {
	if srv.Generation != 0 && rd.To <= srv.Generation && srv.Generation != cur.Roster.Generation {
		return refuse(RosterOlder, &spec.FieldError{
			Path:   "roster_delta.to",
			Reason: fmt.Sprintf("%d is not newer than roster generation %d, served; rosters never go back: send the whole declaration", rd.To, srv.Generation),
		})
	}
	return accept
}

// ServedRoster judges r, a whole roster put to the resolver (its control
// socket's PUT, `meshhost resolver`'s roster file), against the
// generation served (0: none). what names r in the faults (`roster
// "/etc/roster.json"`, say). diffs returns, bounded, how r differs from the
// roster served; called only when r has its generation.
func ServedRoster(what string, r *spec.Roster, served uint64, diffs func() []string) Decision {
	switch {
	case served == 0 || r.Generation > served:
		return accept
	case r.Generation < served:
		return refuse(RosterOlder, &spec.FieldError{Path: what, Reason: fmt.Sprintf("generation %d is older than generation %d, which is served; rosters never go back (write a newer generation)", r.Generation, served)})
	}
	if d := diffs(); len(d) > 0 {
		return refuse(RosterGenerationReused, &spec.FieldError{Path: what, Reason: fmt.Sprintf("generation %d is served with other names (%s); a changed roster needs a newer generation", r.Generation, joinSemi(d))})
	}
	return same
}

// ServedDelta judges rd, a roster delta put to the resolver (its control
// socket's PATCH), against the generation served (0: none). diffs returns,
// bounded, how the names rd sets and removes differ from the roster
// served; called only when rd.To is the generation served: none is the
// same delta again (Same), as far as the names it carries tell. A delta
// to an older generation is from another base (DeltaBase), as the agent's
// push judges it.
func ServedDelta(rd *spec.RosterDelta, served uint64, diffs func() []string) Decision {
	switch {
	case served != 0 && rd.To == served:
		if d := diffs(); len(d) > 0 {
			return refuse(RosterGenerationReused, &spec.FieldError{Path: "roster_delta.to", Reason: fmt.Sprintf("generation %d is served with other names (%s); a changed roster needs a newer generation", rd.To, joinSemi(d))})
		}
		return same
	case served == 0 && rd.From != 0:
		return refuse(DeltaBase, &spec.FieldError{Path: "roster_delta.from", Reason: fmt.Sprintf("%d, and no roster is served; send the whole roster", rd.From)})
	case served != 0 && rd.From != served:
		return refuse(DeltaBase, &spec.FieldError{Path: "roster_delta.from", Reason: fmt.Sprintf("%d, but generation %d is served; send the whole roster, or a delta from %d", rd.From, served, served)})
	}
	return accept
}

func joinSemi(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}
