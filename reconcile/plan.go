package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// Plan compares desired, the rendered declaration of this machine, with what
// the runtime reports, and returns what Apply should do and why. It costs one
// List call: a container's digest and record come from its labels. Only a
// container meshhost cannot judge from labels (one holding a declared name
// without meshhost's labels, or labelled with a digest version this meshhost
// does not know) is inspected, to be compared field by field; once adopted
// it is not inspected again by this Reconciler.
//
// The Plan refers to desired's elements; desired must not change until the
// Plan has been applied. A rendering is a value: to change one, render it
// again (spec.Render makes new lists and maps), never change its lists or
// maps in place, since the Reconciler remembers what it planned to
// recognise it in the next plan without encoding it again.
func (r *Reconciler) Plan(ctx context.Context, desired []spec.Rendered) (*Plan, error) {
	sh, err := r.shapeOf(desired)
	if err != nil {
		return nil, err
	}
	observed, err := r.rt.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("planning: listing containers: %w", err)
	}
	return r.planObserved(ctx, desired, sh, observed)
}

// PlanObserved is Plan from a List the caller already made (the agent lists
// once per pass, for the migration gate and the plan alike), so a pass with
// nothing to do still costs one List call.
func (r *Reconciler) PlanObserved(ctx context.Context, desired []spec.Rendered, observed []Observed) (*Plan, error) {
	sh, err := r.shapeOf(desired)
	if err != nil {
		return nil, err
	}
	return r.planObserved(ctx, desired, sh, observed)
}

// A plan of a machine where little changed costs what changed, plus a few
// comparisons per container: the Reconciler remembers its last plan (memo)
// and the next one reuses what it finds unchanged. The full path
// (Reconciler.fullPath, for tests) remembers nothing: it is a plan with an
// empty memo, and must decide exactly the same.

// memo is what a plan leaves for the next. It is never changed once
// published (Reconciler.memo): a plan builds its own and swaps it in, so
// plans made at the same time each read a whole one.
type memo struct {
	shape *shape
	// entries are by index in shape; nil where nothing is known.
	entries []*entry
}

// shape is what a plan needs of the declared names alone: validated,
// indexed and ordered. It is the same while the names and their
// dependencies are, which is most passes; finding it again costs a
// comparison per container instead of a map of 10,000 names and a sort.
type shape struct {
	names    []string
	deps     [][]string
	declared map[string]int // index in desired, by name
	order    []int          // indices in desired, dependenciesFirst's order
}

// entry is what a plan learnt of one declared container: its rendering's
// record label (digest.Key.Record), most of a plan's cost when encoded anew,
// and how the container then holding its name was judged by its labels.
// Labels are create-time settings, which the runtime never changes
// (Runtime): the same container ID has the same labels, so they are read
// once, not every pass.
type entry struct {
	rendered spec.Rendered // as given: a rendering is never changed in place
	label    string        // the Reconciler's digest.Key.Record(rendered)
	// cid is the container that held the name; empty if none did.
	cid      string
	labelled bool     // ManagedBy its labels
	id       identity // from its labels alone (no adoption)
	// current: labelled, and its record label is label. An adoption
	// overrides it (the planner judges an adopted container by what the
	// adoption recorded).
	current bool
}

// shapeOf returns desired's shape: the last plan's when desired declares
// the same names in the same order with the same dependencies, or a new
// one, from desired that checkDesired accepts.
func (r *Reconciler) shapeOf(desired []spec.Rendered) (*shape, error) {
	if last := r.memo.Load(); last != nil && !r.fullPath && last.shape.is(desired) {
		return last.shape, nil
	}
	declared, err := checkDesired(desired)
	if err != nil {
		return nil, err
	}
	sh := &shape{names: make([]string, len(desired)), deps: make([][]string, len(desired)), declared: declared}
	for i := range desired {
		sh.names[i], sh.deps[i] = desired[i].Name, slices.Clone(desired[i].DependsOn)
	}
	sh.order = make([]int, 0, len(desired))
	for _, name := range dependenciesFirst(declared, func(i int) []string { return desired[i].DependsOn }) {
		sh.order = append(sh.order, declared[name])
	}
	return sh, nil
}

// is reports whether desired has shape sh: the same names in the same
// order, with the same dependencies. (It then passes checkDesired, as it
// did when sh was made.)
func (sh *shape) is(desired []spec.Rendered) bool {
	if len(desired) != len(sh.names) {
		return false
	}
	for i := range desired {
		if desired[i].Name != sh.names[i] || !slices.Equal(desired[i].DependsOn, sh.deps[i]) {
			return false
		}
	}
	return true
}

// entriesFor returns m's entries for the names of sh, in a slice of the
// plan's own to fill.
func (m *memo) entriesFor(sh *shape) []*entry {
	switch {
	case m == nil:
		return make([]*entry, len(sh.names))
	case m.shape == sh:
		return slices.Clone(m.entries)
	}
	byName := make(map[string]*entry, len(m.entries))
	for i, e := range m.entries {
		if e != nil {
			byName[m.shape.names[i]] = e
		}
	}
	out := make([]*entry, len(sh.names))
	for i, name := range sh.names {
		out[i] = byName[name]
	}
	return out
}

// planObserved is PlanObserved for desired of shape sh.
func (r *Reconciler) planObserved(ctx context.Context, desired []spec.Rendered, sh *shape, observed []Observed) (_ *Plan, err error) {
	p := planner{desired: desired, shape: sh, owner: r.cfg.Owner, noInPlace: r.cfg.NoInPlaceUpdates, full: r.fullPath, key: r.cfg.HashKey}
	p.adopted, p.updated = r.state.snapshot(observed)
	if !p.full {
		p.entries = r.memo.Load().entriesFor(sh)
	} else {
		p.entries = (*memo)(nil).entriesFor(sh)
	}
	// Each container by the name it holds: at, by index in desired, for
	// a declared name, in the order the next steps read them; others, for
	// the rest. A declared name's holder is judged (its identity) with its
	// entry, by toInspect.
	p.at = r.takeSeen(len(desired))
	defer r.putSeen(p.at)
	for i := range observed {
		o := &observed[i]
		if o.State == StateRemoving {
			if _, id := p.identity(o); id.managed {
				// It can only be removed: its name is as good as free.
				p.removing = append(p.removing, o)
				continue
			}
		}
		if j, ok := sh.declared[o.Name]; ok {
			p.at[j] = seen{Observed: *o, held: true}
			continue
		}
		s := seen{Observed: *o}
		s.labelled, s.id = p.identity(o)
		p.others = append(p.others, s)
	}
	for i := range p.others {
		s := &p.others[i]
		if base, ok := strings.CutSuffix(s.Name, AsideSuffix); ok {
			if p.asides == nil {
				p.asides = map[string]*seen{}
			}
			p.asides[base] = s
		}
	}
	if ids := p.toInspect(); len(ids) > 0 {
		if p.inspected, err = r.inspectAll(ctx, ids); err != nil {
			p.remember(r)
			return nil, err
		}
	}
	plan := p.plan()
	p.remember(r)
	return plan, nil
}

// takeSeen returns a buffer for planner.at of n elements, empty: the
// last plan's when it is free. 10,000 copies of containers are worth not
// allocating (and collecting) every plan.
func (r *Reconciler) takeSeen(n int) []seen {
	if b := r.spareSeen.Swap(nil); b != nil && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]seen, n)
}

// putSeen empties at, so that it keeps no container alive, for the next
// plan (takeSeen). Nothing a plan returns refers to it.
func (r *Reconciler) putSeen(at []seen) {
	clear(at)
	r.spareSeen.Store(&at)
}

// remember publishes this plan's entries for the next plan (not the full
// path's: it is the fast path's reference).
func (p *planner) remember(r *Reconciler) {
	if !p.full {
		r.memo.Store(&memo{shape: p.shape, entries: p.entries})
	}
}

// checkDesired refuses desired containers without a name, with a name
// meshhost reserves, or declared twice, and returns each one's index by
// name.
func checkDesired(desired []spec.Rendered) (map[string]int, error) {
	index := make(map[string]int, len(desired))
	for i := range desired {
		d := &desired[i]
		switch {
		case d.Name == "":
			return nil, errors.New("planning: a desired container has no name")
		case strings.HasSuffix(d.Name, AsideSuffix):
			return nil, fmt.Errorf("planning: container name %q ends with %q, which meshhost reserves for replacements", d.Name, AsideSuffix)
		}
		if _, dup := index[d.Name]; dup {
			return nil, fmt.Errorf("planning: container %q is declared twice", d.Name)
		}
		index[d.Name] = i
	}
	return index, nil
}

func (r *Reconciler) inspectAll(ctx context.Context, ids []string) (map[string]Inspected, error) {
	out := make([]Inspected, len(ids))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Concurrency)
	for i, id := range ids {
		g.Go(func() error {
			return r.safely(ctx, "inspecting "+id, func() error {
				ins, err := r.rt.Inspect(ctx, id)
				if err != nil {
					return fmt.Errorf("planning: inspecting container %s to compare it field by field: %w", id, err)
				}
				out[i] = ins
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	m := make(map[string]Inspected, len(ids))
	for i, id := range ids {
		m[id] = out[i]
	}
	return m, nil
}

// planner holds one pass's inputs.
type planner struct {
	desired   []spec.Rendered
	shape     *shape
	at        []seen                    // by index in desired: the container holding its name, if held
	others    []seen                    // the containers holding names not declared
	adopted   map[string]Adoption       // by container ID
	updated   map[string]spec.Resources // by container ID: resources set in place
	inspected map[string]Inspected      // by container ID
	removing  []*Observed               // managed containers in StateRemoving; not in at or others
	owner     string                    // Config.Owner
	noInPlace bool                      // Config.NoInPlaceUpdates
	asides    map[string]*seen          // by the name it was set aside from: NAME+AsideSuffix
	full      bool                      // no fast path: Reconciler.fullPath
	key       *digest.Key               // Config.HashKey
	// entries are by index in desired: the last plan's, replaced by this
	// plan's where it learns something new; the next plan's memo.
	entries []*entry
}

// seen is an observed container as the planner judges it.
type seen struct {
	// Observed is a copy: the planner reads the containers by index in
	// desired, and a copy at hand costs less than one fetched from
	// anywhere in List's answer.
	Observed
	held     bool     // in planner.at: a container holds the name
	labelled bool     // ManagedBy its labels
	id       identity // identityOf
	adopted  bool     // id is its adoption's, not its labels'
	// current: it is managed, holds a declared name, and its record is the
	// declared container's (digest.Key.Record): it matches, in the current
	// digest version. toInspect finds out.
	current bool
}

// identity returns ManagedBy(*o, p.owner) and identityOf(o, p.adopted,
// p.owner), reading o's labels once.
func (p *planner) identity(o *Observed) (labelled bool, id identity) {
	labelled, id = identityScan(o, p.owner)
	id, _ = p.adoptedAs(o.ID, id)
	return labelled, id
}

// adoptedAs returns what this Reconciler's adoption of container cid
// recorded, if it adopted it, and otherwise id (its labels').
func (p *planner) adoptedAs(cid string, id identity) (_ identity, adopted bool) {
	if a, ok := p.adopted[cid]; ok {
		return identity{managed: true, digest: a.Digest, record: a.Record}, true
	}
	return id, false
}

// entry returns the entry of the declared container at index j, held by
// s: the last plan's when both are as they were then.
func (p *planner) entry(j int, s *seen) *entry {
	d := &p.desired[j]
	e := p.entries[j]
	if e != nil && e.cid == s.ID && e.rendered.Equal(d) {
		return e
	}
	n := &entry{rendered: *d, cid: s.ID}
	if e != nil && e.rendered.Equal(d) {
		n.label = e.label // another container: the same rendering
	} else {
		n.label = p.key.Record(*d)
	}
	if e != nil && e.cid == s.ID {
		n.labelled, n.id = e.labelled, e.id // the same container: the same labels
	} else {
		n.labelled, n.id = identityScan(&s.Observed, p.owner)
	}
	n.current = n.labelled && n.id.record == n.label
	p.entries[j] = n
	return n
}

// record returns p.key.Record(*d), from d's entry when it renders as it
// did then.
func (p *planner) record(d *spec.Rendered) string {
	if j, ok := p.shape.declared[d.Name]; ok {
		if e := p.entries[j]; e != nil && e.rendered.Equal(d) {
			return e.label
		}
	}
	return p.key.Record(*d)
}

// toInspect returns the IDs of containers holding a declared name that
// labels cannot judge. On its way it notes the containers whose record is
// their declared container's (seen.current): most of them, on most
// passes, which decide then keeps as they are.
func (p *planner) toInspect() []string {
	var ids []string
	for j := range p.at {
		s := &p.at[j]
		if !s.held {
			continue
		}
		e := p.entry(j, s)
		// Labels are read once per container (its entry's), adoptions
		// every time: one made in the last pass counts.
		s.labelled = e.labelled
		s.id, s.adopted = p.adoptedAs(s.ID, e.id)
		if s.State == StateRemoving || p.aside(p.desired[j].Name) != nil {
			continue
		}
		current := e.current
		if s.adopted {
			current = s.id.managed && s.id.record == e.label
		}
		if !p.full && current {
			s.current = true
			continue
		}
		if !s.id.managed || p.key.Judges(s.id.digest) != nil {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

func (p *planner) plan() *Plan {
	plan := &Plan{Actions: make([]Action, 0, len(p.removing)+len(p.others)+len(p.desired))}
	plan.Actions = append(plan.Actions, p.unfinished()...)
	plan.Actions = append(plan.Actions, p.removals(&plan.Unmanaged)...)
	for _, j := range p.shape.order {
		plan.Actions = append(plan.Actions, p.actionFor(j))
	}
	return plan
}

// removals returns a Remove for every managed container not declared,
// dependants first, and counts the unmanaged ones left alone.
func (p *planner) removals(unmanaged *int) []Action {
	gone := map[string]*Observed{}
	for i := range p.others {
		o := &p.others[i]
		if base, aside := strings.CutSuffix(o.Name, AsideSuffix); aside {
			if _, ok := p.shape.declared[base]; ok && p.aside(base) != nil {
				continue
			}
		}
		if o.labelled {
			gone[o.Name] = &o.Observed
		} else {
			*unmanaged++
		}
	}
	if len(gone) == 0 {
		return nil
	}
	order := dependenciesFirst(gone, dependsOnLabel)
	dependants := map[string][]string{}
	for name, o := range gone {
		for _, dep := range dependsOnLabel(o) {
			if gone[dep] != nil {
				dependants[dep] = append(dependants[dep], name)
			}
		}
	}
	out := make([]Action, 0, len(order))
	for i := len(order) - 1; i >= 0; i-- {
		o := gone[order[i]]
		reason := "no longer declared"
		if base, aside := strings.CutSuffix(o.Name, AsideSuffix); aside {
			reason = fmt.Sprintf("left aside by an interrupted replacement of %q, which is no longer declared", base)
		}
		out = append(out, Action{
			Kind: Remove, Name: o.Name, ID: o.ID, Running: o.State == StateRunning,
			StopTimeout: recordStopTimeout(o.Labels[digest.LabelRecord]),
			Reason:      reason, DependsOn: sortedCopy(dependants[o.Name]),
		})
	}
	return out
}

// unfinished returns a Remove for every managed container whose removal
// began and was cut short (StateRemoving), whatever its name: declared,
// aside or gone, it can never run again, and until it is removed it holds
// its name. Removals run before every other action, so a declared name it
// holds is free by the time its container is created.
func (p *planner) unfinished() []Action {
	out := make([]Action, 0, len(p.removing))
	for _, o := range p.removing {
		reason := "its removal began and was cut short (as when podman's API service stops in the middle of one): finishing it"
		if base, aside := strings.CutSuffix(o.Name, AsideSuffix); aside {
			reason = fmt.Sprintf("the old container of a replacement of %q, whose removal (the replacement's last step) was cut short: finishing it", base)
		}
		out = append(out, Action{Kind: Remove, Name: o.Name, ID: o.ID, Removing: true, Reason: reason})
	}
	slices.SortFunc(out, func(a, b Action) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// aside returns the container an interrupted replacement of name left
// aside, NAME+AsideSuffix, when this Reconciler manages it, and nil
// otherwise: anyone else's container under that name is no replacement of
// meshhost's, and is never touched.
func (p *planner) aside(name string) *Observed {
	if o := p.asides[name]; o != nil && o.id.managed {
		return &o.Observed
	}
	return nil
}

// actionFor decides what to do for the declared container at index j.
func (p *planner) actionFor(j int) Action {
	d := &p.desired[j]
	var s *seen
	if p.at[j].held {
		s = &p.at[j]
	}
	a := p.decide(d, s)
	if a.Kind != Replace {
		return a
	}
	// A replacement sets the old container aside under NAME+AsideSuffix; a
	// container meshhost does not manage holds that name.
	if f := p.asides[d.Name]; f != nil && p.aside(d.Name) == nil {
		blocked := fmt.Sprintf("%s; but %q, which the replacement needs for the old container, is held by a container meshhost does not manage (%.12s), which it never touches: rename or remove that one", a.Reason, f.Name, f.ID)
		a.StopTimeout = 0
		if a.Running {
			a.Kind, a.Reason = Conflict, blocked
			return a
		}
		a.Kind, a.Reason = Start, blocked+"; starting the old one as it is meanwhile"
	}
	return a
}

// decide decides what to do for one declared container, held by s (nil:
// by none), as if nothing but meshhost's own containers could hold
// NAME+AsideSuffix (actionFor checks that).
func (p *planner) decide(d *spec.Rendered, s *seen) Action {
	a := Action{Name: d.Name, Desired: d, DependsOn: d.DependsOn}
	var o *Observed
	if s != nil {
		o = &s.Observed
	}
	if aside := p.aside(d.Name); aside != nil {
		return p.recover(a, o, aside)
	}
	if o == nil {
		a.Kind, a.Reason = Create, "not present"
		return a
	}
	a.ID, a.Running = o.ID, o.State == StateRunning
	if o.State == StateRemoving { // not managed: those are in p.removing
		a.Kind = Conflict
		a.Reason = "held by a container meshhost does not manage whose removal began and was cut short; meshhost never touches it: remove it (podman rm)"
		return a
	}
	if s.current {
		return keepOrStart(a) // judge's first case: the record is the declaration's
	}
	id := s.id
	if !id.managed || p.key.Judges(id.digest) != nil {
		// No digest to judge it by: a version this meshhost does not know,
		// or one keyed with another key than the machine's.
		return p.compareFields(a, o, id)
	}
	switch match, record := p.judge(d, o, id); {
	case !match:
		a.Kind = Replace
		a.StopTimeout = recordStopTimeout(id.record)
		a.Changes, a.Reason = p.explainReplace(id.record, d)
		return a
	case record.Resources != d.Resources && p.updated[o.ID] != d.Resources:
		a.Kind = Update
		a.Changes = []digest.Change{p.resourcesChange(record.Resources, d.Resources)}
		a.Reason = joinChanges(a.Changes)
		if p.noInPlace {
			a.Kind = Replace
			a.StopTimeout = recordStopTimeout(id.record)
			a.Reason += " (this runtime does not keep in-place updates across restarts)"
		}
		return a
	}
	return keepOrStart(a)
}

func keepOrStart(a Action) Action {
	if a.Running {
		a.Kind = Keep
		return a
	}
	a.Kind, a.Reason = Start, "not running"
	return a
}

// judge reports whether the container o, labelled id, matches d by its
// digest, and the settings its record holds (resources in particular). The
// fast path compares the record label with d's current record and hashes
// nothing; a record of an older (known) version is judged by its version,
// and so is one of an older form (values in clear, or hashed with another
// key): its digest decides, never the record's form.
func (p *planner) judge(d *spec.Rendered, o *Observed, id identity) (bool, spec.Rendered) {
	if id.record == p.record(d) {
		return true, *d
	}
	ok, err := p.key.Matches(id.digest, *d)
	if err != nil || !ok {
		return false, spec.Rendered{}
	}
	rec, err := digest.ParseRecord(id.record)
	if err != nil {
		// The digest matches but the record is unreadable: the resources
		// are unknown, so set them (an update in place is harmless).
		rec = *d
		rec.Resources = spec.Resources{MemoryBytes: -1}
	}
	return true, rec
}

// explainReplace names the fields that differ between the container's
// record label and d.
func (p *planner) explainReplace(record string, d *spec.Rendered) ([]digest.Change, string) {
	all, err := p.key.ExplainRecord(record, *d)
	if err != nil && !errors.Is(err, digest.ErrOtherKey) {
		return nil, fmt.Sprintf("digest differs from the declaration (its record label is unreadable: %v)", err)
	}
	changes, _ := splitChanges(all)
	const otherKey = "its record's env and label values were hashed with another key (the state directory's hash.key was made anew), and are not compared"
	switch {
	case len(changes) == 0 && err != nil:
		return nil, "digest differs from the declaration; " + otherKey
	case len(changes) == 0:
		// The digest's version covers something its record does not show.
		return nil, "digest differs from the declaration"
	case err != nil:
		return changes, joinChanges(changes) + "; " + otherKey
	}
	return changes, joinChanges(changes)
}

func (p *planner) resourcesChange(old, new spec.Resources) digest.Change {
	a, b := spec.Rendered{}, spec.Rendered{}
	a.Resources, b.Resources = old, new
	for _, c := range p.key.Explain(a, b) {
		if c.Field == "resources" {
			return c
		}
	}
	return digest.Change{Field: "resources", Mutability: spec.UpdateInPlace}
}

func recordStopTimeout(record string) time.Duration {
	rec, err := digest.ParseRecord(record)
	if err != nil {
		return 0 // unknown: Apply inspects the container first
	}
	return rec.StopTimeout
}
