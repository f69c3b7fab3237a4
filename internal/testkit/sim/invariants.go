package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// An invariant is checked after every step; each returns why it does not
// hold, or nil.
type invariant struct {
	name  string
	check func(w *world) error
}

var invariants = []invariant{
	{"AtMostOneRunningPerName", func(w *world) error { return atMostOneRunningPerName(w.rt.Containers()) }},
	{"NothingUnownedTouched", func(w *world) error { return nothingUnownedTouched(w, w.rt.Containers()) }},
	{"NoVolumeOnTwoRunning", func(w *world) error { return noVolumeOnTwoRunning(w.rt.Containers()) }},
	{"GenerationsNeverGoBackwards", generationsNeverGoBackwards},
	{"RestartServesNewestSaved", restartServesNewestSaved},
	{"ResolverServesARosterTaken", resolverServesARosterTaken},
	{"GuardHoldsShrinks", guardHoldsShrinks},
	{"ResolveModeRosterChangeReplacesNothing", resolveModeRosterChangeReplacesNothing},
	{"RefusedInputChangesNothing", refusedInputChangesNothing},
	{"FailsClosed", func(w *world) error { return failsClosed(w, w.rt.Containers()) }},
	{"JournalInOrder", journalInOrder},
	{"NamesNeverForwarded", namesNeverForwarded},
	{"JournalIsTheAcceptedInputs", journalIsTheAcceptedInputs},
}

// violate records the first violation a step or a hook saw.
func (w *world) violate(name string, err error) {
	if w.hookErr == nil {
		w.hookErr = &violation{name, err}
	}
}

// check runs every invariant, then remembers what this step left for the
// next one's monotonic checks.
func (w *world) check() *violation {
	if w.hookErr != nil {
		return w.hookErr
	}
	for _, inv := range invariants {
		if err := inv.check(w); err != nil {
			return &violation{inv.name, err}
		}
	}
	if h, ok := w.m.source.Head(); ok {
		w.headGen, w.declaredRoster = h.Declaration.Generation, h.Declaration.Roster.Generation
	}
	// Nothing served (a restart lost an unsaved first roster) is 0.
	w.served, w.servedGen = w.m.srv.Roster(), 0
	if w.served != nil {
		w.servedGen = w.served.Generation
	}
	w.savedGen = savedGeneration(w)
	return nil
}

// watch runs after every runtime call, with the containers as the call
// left them: the invariants on containers hold at every step of a pass,
// not only between passes.
func (w *world) watch(call memory.Call, now []memory.Container) {
	if w.hookErr != nil {
		return
	}
	at := func(err error) error {
		return fmt.Errorf("after a %s call (%s%s): %w", call.Method, call.ID, call.Name, err)
	}
	if err := atMostOneRunningPerName(now); err != nil {
		w.violate("AtMostOneRunningPerName", at(err))
	}
	if err := noVolumeOnTwoRunning(now); err != nil {
		w.violate("NoVolumeOnTwoRunning", at(err))
	}
	w.created = ""
	if call.Method == "Create" {
		for _, c := range now { // IDs are a counter, of fixed width: the newest is the largest
			if c.Name == call.Name && c.ID > w.created {
				w.created = c.ID
			}
		}
	}
	if err := failsClosed(w, now); err != nil {
		w.violate("FailsClosed", at(err))
	}
	if err := frozenChangesNothing(w, call, now); err != nil {
		w.violate("FrozenChangesNothing", at(err))
	}
	if err := pauseSwitchesNothingToResolve(w, call, now); err != nil {
		w.violate("PauseSwitchesNothingToResolve", at(err))
	}
	if err := dnsServersListened(w, now); err != nil {
		w.violate("DNSServersListened", at(err))
	}
	if call.Method != "List" && call.Method != "Inspect" {
		for name, id := range w.foreign {
			if call.ID == id {
				w.violate("NothingUnownedTouched", at(fmt.Errorf("a %s of %q, someone else's container", call.Method, name)))
			}
		}
	}
}

// frozenChangesNothing: while the machine is frozen, no container of this
// machine is created, stopped or removed, but to finish or roll back a
// replacement a crash interrupted (its old container set aside).
func frozenChangesNothing(w *world, call memory.Call, now []memory.Container) error {
	defer func() {
		clear(w.running)
		for _, c := range now {
			if c.State == reconcile.StateRunning {
				w.running[c.ID] = c.Name
			}
		}
	}()
	if !w.frozen {
		return nil
	}
	aside := func(name string) bool {
		return slices.ContainsFunc(now, func(c memory.Container) bool { return c.Name == baseName(name)+spec.AsideSuffix })
	}
	switch call.Method {
	case "Create":
		if !aside(call.Name) {
			return fmt.Errorf("frozen, and %q was created", call.Name)
		}
	case "Stop", "Remove":
		if name, ok := w.running[call.ID]; ok && !strings.HasSuffix(name, spec.AsideSuffix) && !aside(name) {
			return fmt.Errorf("frozen, and running %q (%s) got a %s", name, call.ID, call.Method)
		}
	}
	return nil
}

// pauseSwitchesNothingToResolve: while the migration is paused, no
// container that has its copy is replaced by one in resolve mode (a name
// no container holds gets the gate's mode: Gate.Pause).
func pauseSwitchesNothingToResolve(w *world, call memory.Call, now []memory.Container) error {
	defer func() {
		// The containers there are now, by declared name: one set aside
		// answers for its name until a container holds the name itself.
		clear(w.modes)
		for _, c := range now {
			if c.Labels[reconcile.LabelOwner] != Machine {
				continue
			}
			if _, ok := w.modes[baseName(c.Name)]; !ok || c.Name == baseName(c.Name) {
				w.modes[baseName(c.Name)] = c.Settings.Mode
			}
		}
	}()
	if !w.paused || call.Method != "Create" {
		return nil
	}
	for _, c := range now {
		if c.Name == call.Name && c.Settings.Mode == spec.Resolve && w.modes[c.Name] == spec.Copy {
			return fmt.Errorf("paused, and %q had its copy: its replacement %s is in resolve mode", c.Name, c.ID)
		}
	}
	return nil
}

// dnsServersListened: every DNS server of a running resolve-mode
// container of this machine is an address the resolver listens on (port
// 53), as the agent's Exposer made it. Checked at every runtime call:
// the agent exposes the resolver (the gate's step) before its pass calls
// the runtime, so a new incarnation's first pass is judged too, and the
// window between a start and that pass, when nothing listens, is not.
func dnsServersListened(w *world, cs []memory.Container) error {
	if w.m == nil || (w.probeFailed || w.probeFailedBefore) && !w.strictDNS {
		// Booting; or the latest probe failed: a network the gate rolled
		// back is exposed by no new incarnation (Gate.Strategies), while
		// a container still runs on it in resolve mode, its replacement
		// blocked or deferred (sim2-note.md, defect 5; -sim.strictdns
		// judges it).
		return nil
	}
	for _, c := range cs {
		if c.Labels[reconcile.LabelOwner] != Machine || c.Settings.Mode != spec.Resolve || c.State != reconcile.StateRunning {
			continue
		}
		for _, a := range c.Settings.DNS.Servers {
			if !w.m.listens[netip.AddrPortFrom(a, 53)] {
				return fmt.Errorf("%q (%s) is in resolve mode with the DNS server %s, where the resolver does not listen (it listens on %v)", c.Name, c.ID, a, slices.SortedFunc(maps.Keys(w.m.listens), netip.AddrPort.Compare))
			}
		}
	}
	return nil
}

// failsClosed: no container of this machine is in resolve mode unless
// the gate has a passed probe of its network; and while the latest probe
// failed, no name joins resolve mode (a replacement of a container in
// resolve mode may stay in it: the gate rolls back after RollbackAfter).
func failsClosed(w *world, cs []memory.Container) error {
	if w.proven {
		if !w.probeFailed || w.created == "" {
			return nil
		}
		for _, c := range cs {
			if c.ID == w.created && c.Labels[reconcile.LabelOwner] == Machine && c.Settings.Mode == spec.Resolve && w.modes[c.Name] != spec.Resolve {
				return fmt.Errorf("%q (%s) was created in resolve mode, joining it (its container had %q), and the latest probe failed", c.Name, c.ID, w.modes[c.Name])
			}
		}
		return nil
	}
	for _, c := range cs {
		if c.Labels[reconcile.LabelOwner] == Machine && c.Settings.Mode == spec.Resolve {
			return fmt.Errorf("%q (%s) is in resolve mode, and no probe ever passed", c.Name, c.ID)
		}
	}
	return nil
}

// journalIsTheAcceptedInputs: every declaration the journal records is
// one an input made, document and all (journal.RecordDeclaration's form:
// the roster without its names), at its generation. With JournalInOrder
// (generations increasing) and journalHoldsApplied (a converged pass's
// declaration is recorded), the journal's history is the accepted inputs
// the agent applied, in the order accepted; one superseded before any
// pass applied it is not in it.
func journalIsTheAcceptedInputs(w *world) error {
	entries, err := w.journal()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !slices.Contains(w.accepted[e.Generation], string(e.Declaration)) {
			return fmt.Errorf("the journal records declaration %d (roster %d, %d containers), which no accepted input made (%d accepted at that generation)", e.Generation, e.RosterGeneration, e.Containers, len(w.accepted[e.Generation]))
		}
	}
	return nil
}

// journalHoldsApplied: after a pass that applied d and converged, with
// room on the disk, the journal's newest declaration is d's generation.
func journalHoldsApplied(w *world, d *spec.Declaration) error {
	entries, err := w.journal()
	if err != nil {
		return err
	}
	if len(entries) == 0 || entries[len(entries)-1].Generation != d.Generation {
		last := any("none")
		if len(entries) > 0 {
			last = entries[len(entries)-1].Generation
		}
		return fmt.Errorf("a converged pass applied declaration %d; the journal's newest is %v", d.Generation, last)
	}
	return nil
}

// journal is the journal's declaration entries, read once a step (and
// again after a pass).
func (w *world) journal() ([]journal.DeclarationEntry, error) {
	if w.jnlRead != nil && w.jnlStep == w.step && w.jnlPasses == w.st.Passes {
		return w.jnlRead, nil
	}
	entries, err := w.m.jnl.Declarations()
	if err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	w.jnlRead, w.jnlStep, w.jnlPasses = entries, w.step, w.st.Passes
	return entries, nil
}

// journalDoc is d as the journal records it: its roster without names.
func journalDoc(d *spec.Declaration) string {
	doc := *d
	if d.Roster != nil {
		r := *d.Roster
		r.Names = nil
		doc.Roster = &r
	}
	b, err := json.Marshal(&doc)
	if err != nil {
		return "unmarshalable: " + err.Error()
	}
	return string(b)
}

// journalInOrder: the journal's declarations are in the order they were
// applied, each newer than the one before, none newer than the one saved.
func journalInOrder(w *world) error {
	entries, err := w.journal()
	if err != nil {
		return err
	}
	saved := savedGeneration(w)
	for i, e := range entries {
		if i > 0 && e.Generation <= entries[i-1].Generation {
			return fmt.Errorf("the journal records declaration %d after %d", e.Generation, entries[i-1].Generation)
		}
		if e.Generation > saved {
			return fmt.Errorf("the journal records declaration %d; the one saved is %d", e.Generation, saved)
		}
	}
	return nil
}

// baseName is a container's declared name: its own, or the one an
// interrupted replacement set it aside from.
func baseName(name string) string {
	base, _ := strings.CutSuffix(name, spec.AsideSuffix)
	return base
}

// atMostOneRunningPerName: no two running containers of this machine
// answer for one declared name (NAME and NAME.meshhost-old included).
func atMostOneRunningPerName(cs []memory.Container) error {
	running := map[string][]string{}
	for _, c := range cs {
		if c.State == reconcile.StateRunning && c.Labels[reconcile.LabelOwner] == Machine {
			running[baseName(c.Name)] = append(running[baseName(c.Name)], c.Name+"/"+c.ID)
		}
	}
	for name, ids := range running {
		if len(ids) > 1 {
			return fmt.Errorf("%d containers run for %q: %s", len(ids), name, strings.Join(ids, ", "))
		}
	}
	return nil
}

// nothingUnownedTouched: every container no reconciler of this machine
// owns is still there, under its name, running.
func nothingUnownedTouched(w *world, cs []memory.Container) error {
	byID := map[string]memory.Container{}
	for _, c := range cs {
		byID[c.ID] = c
	}
	for name, id := range w.foreign {
		c, ok := byID[id]
		switch {
		case !ok:
			return fmt.Errorf("someone else's container %q (%s) is gone", name, id)
		case c.Name != name:
			return fmt.Errorf("someone else's container %q (%s) was renamed %q", name, id, c.Name)
		case c.State != reconcile.StateRunning:
			return fmt.Errorf("someone else's container %q (%s) is %s", name, id, c.State)
		}
	}
	return nil
}

// noVolumeOnTwoRunning: no named volume is mounted by two running
// containers (each declared container has a volume of its own, so two
// would be a replacement's old and new running at once).
func noVolumeOnTwoRunning(cs []memory.Container) error {
	by := map[string]string{}
	for _, c := range cs {
		if c.State != reconcile.StateRunning {
			continue
		}
		for _, m := range c.Settings.Mounts {
			if m.Type != spec.MountVolume {
				continue
			}
			if other, ok := by[m.Source]; ok {
				return fmt.Errorf("volume %q is mounted by running %s and %s", m.Source, other, c.Name+"/"+c.ID)
			}
			by[m.Source] = c.Name + "/" + c.ID
		}
	}
	return nil
}

// savedGeneration is the generation of the declaration saved in the state
// directory (0: none).
func savedGeneration(w *world) uint64 {
	d, err := agent.LoadDeclaration(w.dir)
	if err != nil || d == nil {
		return 0
	}
	return d.Generation
}

// generationsNeverGoBackwards: the declaration in force, the roster the
// resolver serves and the declaration saved never go to an older
// generation (across a restart, the one in force restarts from the saved
// one: RestartServesNewestSaved).
func generationsNeverGoBackwards(w *world) error {
	if h, ok := w.m.source.Head(); ok && !w.restarted && h.Declaration.Generation < w.headGen {
		return fmt.Errorf("the declaration in force went from generation %d to %d", w.headGen, h.Declaration.Generation)
	}
	if h, ok := w.m.source.Head(); ok && !w.restarted && h.Declaration.Roster.Generation < w.declaredRoster {
		return fmt.Errorf("the declared roster went from generation %d to %d", w.declaredRoster, h.Declaration.Roster.Generation)
	}
	// Across a restart, a roster served but not saved may be lost
	// (RestartServesNewestSaved says what must serve then).
	if r := w.m.srv.Roster(); w.servedGen != 0 && !(w.restarted && w.unsavedAtCrash) && (r == nil || r.Generation < w.servedGen) {
		return fmt.Errorf("the resolver went from roster generation %d to %v", w.servedGen, genOf(r))
	}
	if g := savedGeneration(w); g < w.savedGen {
		return fmt.Errorf("the saved declaration went from generation %d to %d", w.savedGen, g)
	}
	return nil
}

func genOf(r *spec.Roster) any {
	if r == nil {
		return "none"
	}
	return r.Generation
}

// restartServesNewestSaved: after a restart the agent has in force the
// declaration whose save returned last, and the resolver serves the
// roster it served before the crash, names and all (or, when that one's
// save failed, the newest whose save succeeded).
func restartServesNewestSaved(w *world) error {
	if !w.restarted {
		return nil
	}
	if w.bootHead != w.lastSaved {
		return fmt.Errorf("restarted with declaration %d in force; the newest saved was %d", w.bootHead, w.lastSaved)
	}
	was, why := w.servedAtCrash, "served before the crash"
	if w.unsavedAtCrash {
		// Served, but its save failed: the newest whose save succeeded.
		was, why = w.savedAtCrash, "the newest roster whose save succeeded"
	}
	if was != nil {
		r := w.bootServed
		if r == nil || fingerprintRoster(r) != fingerprintRoster(was) {
			return fmt.Errorf("restarted serving roster %v; %s is %d (or has other names)", genOf(r), why, was.Generation)
		}
	}
	return nil
}

// resolverServesARosterTaken: the resolver serves a roster the Source
// took, exactly (names and addresses of that generation), and after a
// pass that put the declared roster in force (nothing held, no error),
// the declared one.
func resolverServesARosterTaken(w *world) error {
	r := w.m.srv.Roster()
	if r == nil {
		return nil
	}
	want, ok := w.rosters[r.Generation]
	if !ok {
		return fmt.Errorf("the resolver serves roster generation %d, which no input declared", r.Generation)
	}
	if got := fingerprintRoster(r); got != want {
		return fmt.Errorf("the resolver serves roster generation %d with other names than declared:\n got %s\nwant %s", r.Generation, got, want)
	}
	if rep := w.lastPass; rep != nil && w.passedSinceBoot && w.lastPassErr == nil && rep.RosterHeld == "" {
		if d, _ := w.m.source.Roster(); d != nil && d.Generation > r.Generation && rep.RosterGeneration == d.Generation {
			return fmt.Errorf("the pass put roster %d in force; the resolver serves %d", d.Generation, r.Generation)
		}
	}
	return nil
}

// guardHoldsShrinks: the resolver never moves to a roster that drops more
// names than the guard lets through, unless the operator accepted a
// generation the hold covers.
func guardHoldsShrinks(w *world) error {
	r, prev := w.m.srv.Roster(), w.served
	if w.restarted {
		// What the restarted resolver serves is judged by
		// RestartServesNewestSaved; the guard judges what moved it since.
		prev = w.bootServed
	}
	if r == nil || prev == nil || r.Generation == prev.Generation {
		return nil
	}
	if err := rosterguard.Check(prev, r, Guard); err != nil {
		w.st.AcceptedShrinks++
		// The rule stated here, not called (pass.AcceptCovers): a mutant of
		// the rule must not change what the invariant asks.
		if acc := agent.AcceptedRoster(w.dir); !(prev.Generation < acc && acc <= r.Generation) {
			return fmt.Errorf("roster %d -> %d served though the guard holds it (accepted %d): %v", prev.Generation, r.Generation, acc, err)
		}
	}
	return nil
}

// resolveModeRosterChangeReplacesNothing: in resolve mode, a pass whose
// declaration changed only its roster since a converged pass creates,
// replaces and removes nothing.
func resolveModeRosterChangeReplacesNothing(w *world) error {
	rep := w.lastPass
	if rep == nil || !w.cleanBefore || w.prevDecl == nil || w.passDecl == nil || rep.Result == nil {
		return nil
	}
	if w.passDecl.Roster.Generation == w.prevDecl.Roster.Generation || !sameContainers(w.prevDecl, w.passDecl) {
		return nil
	}
	for _, r := range []*agent.Report{rep, w.prevRep} {
		for _, m := range r.Modes {
			if m != "resolve" {
				return nil
			}
		}
	}
	if len(rep.Modes) == 0 {
		return nil
	}
	w.st.ResolveChecks++
	for _, o := range rep.Result.Outcomes {
		if o.Kind != reconcile.Keep && (o.Kind != reconcile.Conflict || w.foreign[o.Name+spec.AsideSuffix] == "") {
			return fmt.Errorf("roster %d -> %d in resolve mode: %s %q (%s)", w.prevDecl.Roster.Generation, w.passDecl.Roster.Generation, o.Kind, o.Name, o.Reason)
		}
	}
	w.cleanBefore = false // checked once per pass
	return nil
}

// sameContainers reports whether a and b declare the same containers and
// flag.
func sameContainers(a, b *spec.Declaration) bool {
	x, y := *a, *b
	x.Generation, y.Generation = 0, 0
	x.Roster, y.Roster = &spec.Roster{Generation: 1}, &spec.Roster{Generation: 1}
	return bytes.Equal(marshal(&x), marshal(&y))
}

// snapshot is what a refused input must leave as it was.
type snapshot struct {
	decl      string
	seq       uint64
	served    string
	events    int
	saved     []byte
	savedLog  []byte
	accepted  uint64
	approved  uint64
	frozen    bool
	hasSource bool
}

func (w *world) snapshot() *snapshot {
	d, seq := w.m.source.Snapshot()
	s := &snapshot{seq: seq, events: len(w.rt.Events()), accepted: agent.AcceptedRoster(w.dir), approved: agent.ApprovedDeclaration(w.dir)}
	if d != nil {
		s.decl, s.hasSource = fingerprintDecl(d), true
	}
	if r := w.m.srv.Roster(); r != nil {
		s.served = fingerprintRoster(r)
	}
	s.saved, _ = os.ReadFile(w.dir.Declaration())
	s.savedLog, _ = os.ReadFile(w.dir.DeclarationLog())
	f, _ := agent.Frozen(w.dir)
	s.frozen = f != nil
	return s
}

// refusedInputChangesNothing: an input refused (a stale, reused,
// off-base, oversize, invalid or other machine's declaration; an accept
// of a roster not held) left the declaration in force, the roster served,
// the containers, the state directory and the controls as they were.
func refusedInputChangesNothing(w *world) error {
	before := w.refusedInput
	if before == nil {
		return nil
	}
	after := w.snapshot()
	var diffs []string
	if before.decl != after.decl || before.seq != after.seq {
		diffs = append(diffs, fmt.Sprintf("the declaration in force (change %d -> %d)", before.seq, after.seq))
	}
	if before.served != after.served {
		diffs = append(diffs, "the roster served")
	}
	if before.events != after.events {
		diffs = append(diffs, "the containers")
	}
	if !bytes.Equal(before.saved, after.saved) || !bytes.Equal(before.savedLog, after.savedLog) {
		diffs = append(diffs, "the saved declaration")
	}
	if before.accepted != after.accepted || before.approved != after.approved || before.frozen != after.frozen {
		diffs = append(diffs, "the operator's controls")
	}
	if len(diffs) > 0 {
		return errors.New("a refused input changed " + strings.Join(diffs, ", "))
	}
	return nil
}

// convergedState: after quiescing, every declared container runs once
// under its name, nothing of this machine's runs undeclared or set aside,
// and the resolver serves the declared roster.
func (w *world) convergedState() error {
	d, _ := w.m.source.Current()
	if d == nil {
		return nil
	}
	declared := map[string]bool{}
	for _, c := range d.Containers {
		declared[c.Name] = true
	}
	running := map[string]int{}
	for _, c := range w.rt.Containers() {
		if c.Labels[reconcile.LabelOwner] != Machine || w.foreign[c.Name] == c.ID {
			continue
		}
		switch {
		case !declared[c.Name]:
			return fmt.Errorf("converged, and %q (%s, %s) is left, undeclared", c.Name, c.ID, c.State)
		case c.State == reconcile.StateRunning:
			running[c.Name]++
		}
	}
	for name := range declared {
		if running[name] != 1 {
			return fmt.Errorf("converged, and %d containers run for %q", running[name], name)
		}
	}
	r := w.m.srv.Roster()
	if r == nil || fingerprintRoster(r) != fingerprintRoster(d.Roster) {
		return fmt.Errorf("converged, and the resolver serves roster %v, not the declared %d", genOf(r), d.Roster.Generation)
	}
	return nil
}

// fingerprintRoster is r's generation, zones and names, canonically.
func fingerprintRoster(r *spec.Roster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %v", r.Generation, r.Zones)
	for _, k := range slices.Sorted(mapKeys(r.Names)) {
		fmt.Fprintf(&b, " %s=%v", k, r.Names[k])
	}
	return b.String()
}

// fingerprintDecl is d, canonically.
func fingerprintDecl(d *spec.Declaration) string {
	head, _ := json.Marshal(struct {
		G       uint64
		M, Flag string
	}{d.Generation, d.Machine, string(d.MeshNames)})
	return string(head) + string(marshalContainers(d)) + fingerprintRoster(d.Roster)
}

func marshalContainers(d *spec.Declaration) []byte {
	x := *d
	x.Generation = 1
	x.Roster = &spec.Roster{Generation: 1}
	return marshal(&x)
}

// parseDoc parses a whole declaration document; nil for a delta.
func parseDoc(doc []byte) (*spec.Declaration, error) {
	if specjson.IsDeclarationDelta(doc) {
		return nil, nil
	}
	return specjson.ParseDeclaration(doc)
}
