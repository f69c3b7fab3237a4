package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// Adoption records that a container meshhost did not label (or labelled
// with a digest version it does not know) was found to match a declared
// container field by field, and is managed from then on as if it carried
// these labels. Podman cannot relabel a container, so the Reconciler keeps
// adoptions itself (Reconciler.Adoptions, Config.Adoptions); a Reconciler
// that does not know an adoption compares the container again, at the cost
// of one Inspect.
type Adoption struct {
	ID     string
	Name   string
	Digest string // digest.Key.Of the settings it runs with, as declared (digest.Of before v2)
	Record string // digest.Key.Record of the same
	// Version is the AdoptionVersion of the Reconciler that adopted it.
	Version int
}

// AdoptionVersion is the version of what an Adoption records, which
// Reconciler.Adoptions sets. A Reconciler restores adoptions of an older
// version only where it can trust them (see Config.Adoptions).
//
// History:
//
//	0: (unset) the first: an adoption records the declared settings it
//	   matched. On a runtime without durable in-place updates
//	   (Config.NoInPlaceUpdates) an adoption whose resources differed
//	   applied them in place and recorded them as in force, and the
//	   container lost them at its next start: such a record may name
//	   limits the container no longer has.
//	1: an adoption records the settings the container runs with: on such
//	   a runtime, its own resources (the next pass replaces it for the
//	   declared ones).
const AdoptionVersion = 1

// compareFields judges a container that labels cannot judge, from its
// inspection: it is adopted when every create-time field matches, replaced
// when it is managed (a digest version this meshhost does not know) and
// differs, and left alone, as a conflict, when it is not managed.
//
// A managed container whose digest was keyed with another key (the state
// directory's hash.key was lost and made anew) is judged the same way,
// its reason saying "hash key changed": one inspection, and it is kept
// (adopted, with the digest of the machine's key) when its settings match,
// rather than replaced with every other container of the machine for a
// key alone. Its record still names every field, and the keys of its env
// and labels: a difference there replaces it without the inspection's
// judgement (which cannot tell an env variable no longer declared from
// one of the image).
func (p *planner) compareFields(a Action, o *Observed, id identity) Action {
	why, otherKey := "has no meshhost labels", false
	if id.managed {
		v, _ := digest.VersionOf(id.digest)
		why = fmt.Sprintf("has digest version %q, which this meshhost does not know", v)
		if errors.Is(p.key.Judges(id.digest), digest.ErrOtherKey) {
			otherKey = true
			why = "hash key changed: its digest label was made with another key than the state directory's hash.key (made anew since)"
			all, err := p.key.ExplainRecord(id.record, *a.Desired)
			if replace, _ := splitChanges(all); len(replace) > 0 && (err == nil || errors.Is(err, digest.ErrOtherKey)) {
				a.Kind, a.Changes = Replace, replace
				a.StopTimeout = recordStopTimeout(id.record)
				a.Reason = joinChanges(replace) + "; " + why
				return a
			}
		}
	}
	ins, ok := p.inspected[o.ID]
	if !ok { // not inspected: cannot happen through Reconciler.Plan
		a.Kind, a.Reason = Conflict, "cannot be judged without inspecting it"
		return a
	}
	a.StopTimeout = ins.Settings.StopTimeout
	replace, inPlace := splitChanges(p.key.Explain(declaredOnly(ins, a.Desired), *a.Desired))
	switch {
	case len(replace) == 0:
		a.Kind, a.Changes = Adopt, inPlace
		a.Reason = why + "; its settings match the declaration"
		switch {
		case len(inPlace) > 0 && p.noInPlace:
			// An update would hold until the container's next start only,
			// and the adoption would record it as in force: adopt what
			// runs, and let the next pass replace it within the budget.
			res := ins.Settings.Resources
			a.adoptAs = &res
			a.Reason += "; " + joinChanges(inPlace) + ": adopted with the limits it has, and replaced in a later pass within the budget (this runtime does not keep in-place updates across restarts)"
		case len(inPlace) > 0:
			a.Reason += "; updating " + joinChanges(inPlace)
		}
	case id.managed:
		a.Kind, a.Changes = Replace, replace
		a.Reason = joinChanges(replace)
		if otherKey {
			a.Reason += "; " + why
		}
	default:
		a.Kind, a.Changes = Conflict, replace
		a.Reason = fmt.Sprintf("held by a container that %s and differs (%s); meshhost never touches it: remove or rename it", why, joinChanges(replace))
	}
	return a
}

// declaredOnly returns the inspected settings with what runtimes add on their
// own taken out, so that only declared fields are compared: environment an
// image adds (keys the declaration does not set), labels the runtime or an
// image adds, meshhost's own labels, and the image's or runtime's defaults
// for what the declaration leaves unset (podman reports working dir "/",
// the image's command and entrypoint and healthcheck, the address it
// assigned). Declared capabilities are judged by what the container holds
// (see Inspected.Capabilities).
func declaredOnly(ins Inspected, want *spec.Rendered) spec.Rendered {
	got := ins.Settings
	out := got
	out.Name = want.Name
	if want.WorkingDir == "" {
		out.WorkingDir = ""
	}
	if want.User == "" {
		out.User = ""
	}
	if len(want.Command) == 0 {
		out.Command = nil
	}
	if len(want.Entrypoint) == 0 {
		out.Entrypoint = nil
	}
	if want.Healthcheck == nil {
		out.Healthcheck = nil
	}
	out.Networks = make([]spec.NetworkAttachment, len(got.Networks))
	for i, n := range got.Networks {
		out.Networks[i] = n
		for _, w := range want.Networks {
			if w.Name != n.Name {
				continue
			}
			if !w.IPv4.IsValid() {
				out.Networks[i].IPv4 = netip.Addr{}
			}
			if !w.IPv6.IsValid() {
				out.Networks[i].IPv6 = netip.Addr{}
			}
		}
	}
	out.Env = keepKeys(got.Env, want.Env)
	out.Labels = keepKeys(got.Labels, want.Labels)
	out.StopSignal = spec.CanonicalSignal(got.StopSignal)
	if out.StopTimeout == 0 {
		out.StopTimeout = spec.DefaultStopTimeout
	}
	if out.Restart.Name == "" {
		out.Restart.Name = "no"
	}
	if ins.Capabilities != nil {
		out.CapAdd, out.CapDrop = heldCaps(ins.Capabilities, got, want)
	}
	return out
}

// heldCaps returns the capabilities added and dropped as the declaration
// would say them, judged by the bounding set held: what the runtime reports
// (against its defaults), plus each declared add the container holds and
// each declared drop it does not. A declared drop of "ALL" holds when the
// container holds nothing but declared adds.
func heldCaps(held []string, got spec.Rendered, want *spec.Rendered) (add, drop []string) {
	add = slices.Clone(got.CapAdd)
	for _, c := range want.CapAdd {
		if slices.Contains(held, c) {
			add = append(add, c)
		}
	}
	if slices.Contains(want.CapDrop, "ALL") {
		if !slices.ContainsFunc(held, func(c string) bool { return !slices.Contains(want.CapAdd, c) }) {
			return compactSorted(add), slices.Clone(want.CapDrop)
		}
	}
	drop = slices.Clone(got.CapDrop)
	for _, c := range want.CapDrop {
		if c != "ALL" && !slices.Contains(held, c) {
			drop = append(drop, c)
		}
	}
	return compactSorted(add), compactSorted(drop)
}

func compactSorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// keepKeys returns the entries of got whose keys want has, leaving out
// meshhost's labels.
func keepKeys(got, want map[string]string) map[string]string {
	out := maps.Clone(got)
	maps.DeleteFunc(out, func(k, _ string) bool {
		_, declared := want[k]
		return !declared || strings.HasPrefix(k, spec.LabelPrefix)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}
