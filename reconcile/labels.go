package reconcile

import (
	"maps"
	"strings"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// Labels meshhost puts on every container it creates, besides
// digest.LabelDigest and digest.LabelRecord. A container is managed by a
// Reconciler exactly when it carries LabelManaged="true" and LabelOwner equal
// to the Reconciler's Config.Owner (ManagedBy), or was adopted by it: only
// managed containers are ever stopped, replaced or removed.
const (
	LabelManaged = spec.LabelPrefix + "managed"
	// LabelOwner names the reconciler owning the container (the agent sets
	// its machine's name), so that two reconcilers sharing a runtime, as
	// tests running side by side do, never remove each other's containers.
	LabelOwner = spec.LabelPrefix + "owner"
	// LabelDependsOn lists the container's dependencies, comma-separated,
	// so that removing containers no longer declared can go dependants first.
	LabelDependsOn = spec.LabelPrefix + "depends-on"
)

// AsideSuffix is appended to a container's name while it is replaced: the
// old container waits under NAME+AsideSuffix, stopped, until its replacement
// runs (and is healthy). The name is fixed so that a pass after a crash finds
// it and finishes or rolls back the replacement. Only a container this
// Reconciler manages is ever taken for one: anyone else's container under
// that name is left alone (and blocks replacing NAME, see Conflict).
// Declarations may not use it: spec.ParseDeclaration refuses such names.
const AsideSuffix = spec.AsideSuffix

// labelled returns r with meshhost's labels added, as Create receives it:
// its digest keyed with key, and its record's env and label values hashed
// with it.
func labelled(r spec.Rendered, owner string, key *digest.Key) spec.Rendered {
	out := r
	out.Labels = make(map[string]string, len(r.Labels)+5)
	maps.Copy(out.Labels, r.Labels)
	out.Labels[LabelManaged] = "true"
	if owner != "" {
		out.Labels[LabelOwner] = owner
	}
	out.Labels[digest.LabelDigest] = key.Of(r)
	out.Labels[digest.LabelRecord] = key.Record(r)
	if len(r.DependsOn) > 0 {
		out.Labels[LabelDependsOn] = strings.Join(r.DependsOn, ",")
	}
	return out
}

// identity is how the planner sees a container: its own labels,
// or what an earlier adoption recorded for it.
type identity struct {
	managed        bool
	digest, record string
}

func identityOf(o *Observed, adopted map[string]Adoption, owner string) identity {
	return identityLabelled(o, adopted, ManagedBy(*o, owner))
}

// identityScan returns ManagedBy(*o, owner) and o's identity by its labels
// alone (identityOf without adoptions), reading o's labels once instead of
// looking each label up.
func identityScan(o *Observed, owner string) (labelled bool, id identity) {
	var managed, own string
	for k, v := range o.Labels {
		switch k {
		case LabelManaged:
			managed = v
		case LabelOwner:
			own = v
		case digest.LabelDigest:
			id.digest = v
		case digest.LabelRecord:
			id.record = v
		}
	}
	// As ManagedBy: a missing owner label reads as "", an owner too.
	labelled = managed == "true" && own == owner
	id.managed = labelled
	return labelled, id
}

// identityLabelled is identityOf for a container whose labels say whether
// this Reconciler manages it (ManagedBy).
func identityLabelled(o *Observed, adopted map[string]Adoption, labelled bool) identity {
	if a, ok := adopted[o.ID]; ok {
		return identity{managed: true, digest: a.Digest, record: a.Record}
	}
	return identity{
		managed: labelled,
		digest:  o.Labels[digest.LabelDigest],
		record:  o.Labels[digest.LabelRecord],
	}
}

func dependsOnLabel(o *Observed) []string {
	s := o.Labels[LabelDependsOn]
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// ManagedBy reports whether o carries the labels of a container the
// Reconciler of owner (Config.Owner; empty is an owner too) created:
// LabelManaged="true" and LabelOwner=owner. It is the one test of
// ownership: the planner, the migration gate and the demo all use it.
func ManagedBy(o Observed, owner string) bool {
	return o.Labels[LabelManaged] == "true" && o.Labels[LabelOwner] == owner
}
