package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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
	declared, err := checkDesired(desired)
	if err != nil {
		return nil, err
	}
	observed, err := r.rt.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("planning: listing containers: %w", err)
	}
	return r.planObserved(ctx, desired, declared, observed)
}

// PlanObserved is Plan from a List the caller already made (the agent lists
// once per pass, for the migration gate and the plan alike), so a pass with
// nothing to do still costs one List call.
func (r *Reconciler) PlanObserved(ctx context.Context, desired []spec.Rendered, observed []Observed) (*Plan, error) {
	declared, err := checkDesired(desired)
	if err != nil {
		return nil, err
	}
	return r.planObserved(ctx, desired, declared, observed)
}

// planObserved is PlanObserved for desired that checkDesired accepted,
// with the index it returned.
func (r *Reconciler) planObserved(ctx context.Context, desired []spec.Rendered, declared map[string]int, observed []Observed) (_ *Plan, err error) {
	p := planner{desired: desired, declared: declared, observed: make(map[string]*seen, len(observed)), owner: r.cfg.Owner, noInPlace: r.cfg.NoInPlaceUpdates, order: &r.order, full: r.fullPath}
	p.adopted, p.updated = r.state.snapshot(observed)
	// Each container's identity, once: the planner asks for it several
	// times per container.
	all := make([]seen, len(observed))
	for i := range observed {
		o := &observed[i]
		s := &all[i]
		s.Observed = o
		s.labelled, s.id = identityScan(o, p.adopted, p.owner)
		if o.State == StateRemoving && s.id.managed {
			// It can only be removed: its name is as good as free.
			p.removing = append(p.removing, o)
			continue
		}
		p.observed[o.Name] = s
		if base, ok := strings.CutSuffix(o.Name, AsideSuffix); ok {
			if p.asides == nil {
				p.asides = map[string]*seen{}
			}
			p.asides[base] = s
		}
	}
	p.records, p.nextRecords = r.records.begin(len(desired))
	if ids := p.toInspect(); len(ids) > 0 {
		if p.inspected, err = r.inspectAll(ctx, ids); err != nil {
			r.records.end(p.nextRecords)
			return nil, err
		}
	}
	plan := p.plan()
	r.records.end(p.nextRecords)
	return plan, nil
}

// records remembers, per declared container, the rendering last planned
// and its record label (digest.Record): a pass in which a container
// renders as before reuses it instead of encoding the rendering again,
// which was most of a plan's cost. spec.Rendered.Equal decides "as
// before", strictly; a rendering given again unchanged (the agent's pass
// renders again only what changed) compares without being read.
type records struct {
	// mu guards the fields below.
	mu sync.Mutex
	m  map[string]*record
	// spare is the map before m, emptied, for the next plan to fill:
	// 10,000 entries are worth not allocating (and collecting) each plan.
	spare map[string]*record
}

type record struct {
	rendered spec.Rendered // as given: a rendering is never changed in place
	label    string
}

// begin returns the last plan's records, to read, and an empty map for
// this plan's.
func (rs *records) begin(n int) (last, next map[string]*record) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	next, rs.spare = rs.spare, nil
	if next == nil {
		next = make(map[string]*record, n)
	}
	return rs.m, next
}

// end keeps this plan's records for the next, and the last plan's map as
// the spare.
func (rs *records) end(next map[string]*record) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	last := rs.m
	rs.m = next
	if last != nil {
		clear(last)
		rs.spare = last
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
	declared  map[string]int            // index in desired, by name
	observed  map[string]*seen          // by name
	adopted   map[string]Adoption       // by container ID
	updated   map[string]spec.Resources // by container ID: resources set in place
	inspected map[string]Inspected      // by container ID
	removing  []*Observed               // managed containers in StateRemoving; not in observed
	owner     string                    // Config.Owner
	noInPlace bool                      // Config.NoInPlaceUpdates
	asides    map[string]*seen          // by the name it was set aside from: NAME+AsideSuffix
	order     *orderMemo                // the Reconciler's
	full      bool                      // no fast path: Reconciler.fullPath
	// records are the last plan's records (read only); nextRecords this
	// plan's, for the next one.
	records, nextRecords map[string]*record
}

// seen is an observed container as the planner judges it.
type seen struct {
	*Observed
	labelled bool     // ManagedBy its labels
	id       identity // identityOf
	// current: it is managed, holds a declared name, and its record is the
	// declared container's (digest.Record): it matches, in the current
	// digest version. toInspect finds out.
	current bool
}

// record returns digest.Record(*d), from the last plan's when d renders
// as it did then.
func (p *planner) record(d *spec.Rendered) string {
	if p.full {
		return digest.Record(*d)
	}
	if m := p.nextRecords[d.Name]; m != nil {
		return m.label // asked already in this plan
	}
	if m := p.records[d.Name]; m != nil && m.rendered.Equal(d) {
		p.nextRecords[d.Name] = m
		return m.label
	}
	m := &record{rendered: *d, label: digest.Record(*d)}
	p.nextRecords[d.Name] = m
	return m.label
}

// toInspect returns the IDs of containers holding a declared name that
// labels cannot judge. On its way it notes the containers whose record is
// their declared container's (seen.current): most of them, on most
// passes, which decide then keeps as they are.
func (p *planner) toInspect() []string {
	var ids []string
	for i := range p.desired {
		d := &p.desired[i]
		o := p.observed[d.Name]
		if o == nil || o.State == StateRemoving || p.aside(d.Name) != nil {
			continue
		}
		if !p.full && o.id.managed && o.id.record == p.record(d) {
			o.current = true
			continue
		}
		if !o.id.managed || !knownVersion(o.id.digest) {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

func knownVersion(label string) bool {
	if strings.HasPrefix(label, digest.Current+":") {
		return true // what every container created since carries
	}
	_, err := digest.VersionOf(label)
	return err == nil
}

func (p *planner) plan() *Plan {
	plan := &Plan{Actions: make([]Action, 0, len(p.desired))}
	plan.Actions = append(plan.Actions, p.unfinished()...)
	plan.Actions = append(plan.Actions, p.removals(&plan.Unmanaged)...)
	order := p.order.of
	if p.full {
		order = (&orderMemo{}).of
	}
	for _, i := range order(p.desired, p.declared) {
		plan.Actions = append(plan.Actions, p.actionFor(&p.desired[i]))
	}
	return plan
}

// orderMemo remembers the order of the last plan's desired containers
// (dependenciesFirst's), which sorting and walking 10,000 names costs a
// good part of a plan to find: it is the same while the names and their
// dependencies are.
type orderMemo struct {
	// mu guards the fields below.
	mu    sync.Mutex
	names []string
	deps  [][]string
	order []int // indices into desired
}

// of returns the indices of desired, dependencies first and otherwise in
// name order, as dependenciesFirst orders them.
func (m *orderMemo) of(desired []spec.Rendered, declared map[string]int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.names) == len(desired) {
		same := true
		for i := range desired {
			if desired[i].Name != m.names[i] || !slices.Equal(desired[i].DependsOn, m.deps[i]) {
				same = false
				break
			}
		}
		if same {
			return m.order
		}
	}
	byName := make(map[string]int, len(desired))
	maps.Copy(byName, declared)
	order := make([]int, 0, len(desired))
	for _, name := range dependenciesFirst(byName, func(i int) []string { return desired[i].DependsOn }) {
		order = append(order, declared[name])
	}
	m.names, m.deps, m.order = make([]string, len(desired)), make([][]string, len(desired)), order
	for i := range desired {
		m.names[i], m.deps[i] = desired[i].Name, slices.Clone(desired[i].DependsOn)
	}
	return order
}

// removals returns a Remove for every managed container not declared,
// dependants first, and counts the unmanaged ones left alone.
func (p *planner) removals(unmanaged *int) []Action {
	gone := map[string]*Observed{}
	for name, o := range p.observed {
		if _, ok := p.declared[name]; ok {
			continue // the declared container's own action deals with it
		}
		if base, aside := strings.CutSuffix(name, AsideSuffix); aside {
			if _, ok := p.declared[base]; ok && p.aside(base) != nil {
				continue
			}
		}
		if o.labelled {
			gone[name] = o.Observed
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
		return o.Observed
	}
	return nil
}

// actionFor decides what to do for one declared container.
func (p *planner) actionFor(d *spec.Rendered) Action {
	a := p.decide(d)
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

// decide decides what to do for one declared container, as if nothing but
// meshhost's own containers could hold NAME+AsideSuffix (actionFor checks
// that).
func (p *planner) decide(d *spec.Rendered) Action {
	a := Action{Name: d.Name, Desired: d, DependsOn: d.DependsOn}
	s := p.observed[d.Name]
	var o *Observed
	if s != nil {
		o = s.Observed
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
	if !id.managed || !knownVersion(id.digest) {
		return p.compareFields(a, o, id)
	}
	switch match, record := p.judge(d, o, id); {
	case !match:
		a.Kind = Replace
		a.StopTimeout = recordStopTimeout(id.record)
		a.Changes, a.Reason = explainReplace(id.record, d)
		return a
	case record.Resources != d.Resources && p.updated[o.ID] != d.Resources:
		a.Kind = Update
		a.Changes = []digest.Change{resourcesChange(record.Resources, d.Resources)}
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
// nothing; a record of an older (known) version is judged by its version.
func (p *planner) judge(d *spec.Rendered, o *Observed, id identity) (bool, spec.Rendered) {
	if id.record == p.record(d) {
		return true, *d
	}
	ok, err := digest.Matches(id.digest, *d)
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
func explainReplace(record string, d *spec.Rendered) ([]digest.Change, string) {
	old, err := digest.ParseRecord(record)
	if err != nil {
		return nil, fmt.Sprintf("digest differs from the declaration (its record label is unreadable: %v)", err)
	}
	changes, _ := splitChanges(digest.Explain(old, *d))
	if len(changes) == 0 {
		// The digest's version covers something its record does not show.
		return nil, "digest differs from the declaration"
	}
	return changes, joinChanges(changes)
}

func resourcesChange(old, new spec.Resources) digest.Change {
	a, b := spec.Rendered{}, spec.Rendered{}
	a.Resources, b.Resources = old, new
	for _, c := range digest.Explain(a, b) {
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
