package sim

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// A step kind and its weight in the schedule.
type stepKind struct {
	name   string
	weight int
	do     func(w *world) error
}

var stepKinds = []stepKind{
	{"pass", 24, func(w *world) error { w.pass("scheduled"); return nil }},
	{"good whole", 12, (*world).goodWhole},
	{"good delta", 10, (*world).goodDelta},
	{"nats roster commit", 5, (*world).rosterCommit},
	{"duplicate", 2, (*world).duplicate},
	{"bad input", 10, (*world).badInput},
	{"rollback", 3, (*world).rollback},
	{"approve", 4, (*world).approve},
	{"freeze", 2, func(w *world) error { return w.control("freeze") }},
	{"unfreeze", 3, func(w *world) error { return w.control("unfreeze") }},
	{"roster accept", 4, (*world).accept},
	{"runtime fault", 8, (*world).runtimeFault},
	{"crash mid-pass", 4, (*world).crashMidPass},
	{"restart", 2, func(w *world) error { return w.restart("between steps") }},
	{"clock jump", 4, (*world).clockJump},
	{"migrate pause", 2, func(w *world) error { return w.migrate(true) }},
	{"migrate resume", 2, func(w *world) error { return w.migrate(false) }},
	{"podman down", 2, (*world).podmanDown},
	{"disk full", 2, func(w *world) error {
		if w.fill != nil && w.release == nil {
			w.savedByRetry() // what the resolver saved while the disk had room
			w.release = w.fill()
			w.logf("disk full")
			if w.rng.IntN(2) == 0 {
				// A roster commit reaches the resolver on a full disk
				// (the one input whose roster is in force without a
				// save of the declaration first): served, not saved.
				return w.rosterCommit()
			}
		}
		return nil
	}},
	{"disk freed", 3, func(w *world) error {
		full := w.release != nil
		w.freeDisk()
		if full && w.rng.IntN(2) == 0 {
			// Long enough for the resolver to retry a save that failed
			// while the disk was full (resolver.SaveRetryInterval).
			d := resolver.SaveRetryInterval + time.Second
			time.Sleep(d)
			w.logf("clock +%s", d)
		}
		return nil
	}},
	{"podman up", 3, func(w *world) error { w.rt.Recover(); w.logf("podman's API is back (faults disarmed)"); return nil }},
	{"quiesce", 2, func(w *world) error { w.logf("quiesce"); return w.quiesce() }},
}

var totalWeight = func() int {
	n := 0
	for _, k := range stepKinds {
		n += k.weight
	}
	return n
}()

func (w *world) doStep() error {
	w.restarted, w.refusedInput = false, nil
	n := w.rng.IntN(totalWeight)
	for _, k := range stepKinds {
		if n < k.weight {
			return k.do(w)
		}
		n -= k.weight
	}
	panic("unreachable")
}

// path draws the entry path of a document: Offer, the push endpoint's
// handler, or the seed's watched path (a file or a directory, read as
// the watcher reads it on a change).
func (w *world) path() string {
	return []string{"offer", "http", w.watched}[w.rng.IntN(3)]
}

// offerVia offers doc by path, and reports whether it was accepted (the
// Source took it, or it was the declaration in force again).
func (w *world) offerVia(path string, doc []byte) (bool, string) {
	src := w.m.source
	switch path {
	case "offer":
		_, err := src.Offer(doc, "push")
		if err != nil {
			return false, firstLine(err.Error())
		}
		return true, ""
	case "put":
		d, err := parseDoc(doc)
		if err == nil {
			err = src.Put(d, "nats")
		}
		if err != nil {
			return false, firstLine(err.Error())
		}
		w.natsDecl, _ = src.Current()
		return true, ""
	case "http":
		req := httptest.NewRequest(http.MethodPut, "/v1/declaration", bytes.NewReader(doc))
		rec := httptest.NewRecorder()
		src.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return false, fmt.Sprintf("HTTP %d", rec.Code)
		}
		return true, ""
	case "file", "dir":
		_, before := src.Snapshot()
		d0, _ := src.Current()
		target := filepath.Join(w.in, "declaration.json")
		read := target
		if path == "dir" {
			read = filepath.Join(w.in, "decl.d")
			target = filepath.Join(read, fmt.Sprintf("gen-%06d.json", w.step))
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return false, err.Error()
		}
		if err := os.WriteFile(target, doc, 0o600); err != nil {
			return false, err.Error()
		}
		src.ReadPath(read)
		d1, after := src.Snapshot()
		// The same declaration again is taken without a Change.
		if after != before || (d0 != nil && fingerprintDecl(d0) == fingerprintDecl(d1) && sameAsDoc(d1, doc)) {
			return true, ""
		}
		return false, "not taken"
	}
	panic(path)
}

// sameAsDoc reports whether doc is d (whole, or a delta to d's roster).
func sameAsDoc(d *spec.Declaration, doc []byte) bool {
	other, err := parseDoc(doc)
	return err == nil && other != nil && fingerprintDecl(other) == fingerprintDecl(d)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// current is the declaration in force, or the one the schedule starts
// from.
func (w *world) current() *spec.Declaration {
	if d, _ := w.m.source.Current(); d != nil {
		return d
	}
	names := map[string][]netip.Addr{}
	for i := range 10 {
		names[fmt.Sprintf("svc%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 89, 0, byte(10 + i)})}
	}
	flag := spec.FlagOff
	if w.rng.IntN(4) != 0 {
		flag = spec.FlagOn
	}
	d := &spec.Declaration{Schema: spec.SchemaVersion, Machine: Machine, MeshNames: flag,
		Roster: &spec.Roster{Generation: 0, Zones: []string{"internal"}, Names: names}}
	for i := range 3 {
		d.Containers = append(d.Containers, container(i, 1))
	}
	return d
}

func container(i, version int) spec.Container {
	name := fmt.Sprintf("app%d", i)
	return spec.Container{Name: name, Image: fmt.Sprintf("img%d:v%d", i, version), Env: map[string]string{"N": fmt.Sprint(i)},
		Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "vol-" + name, Target: "/data"}}}
}

// next returns a new declaration after d: a newer generation, its
// containers and roster changed at random (roster may stay as it is).
func (w *world) next(d *spec.Declaration) *spec.Declaration {
	n := *d
	w.offered++
	if w.rng.IntN(5) == 0 {
		w.offered += uint64(1 + w.rng.IntN(3)) // the controller skips some
	}
	n.Generation = w.offered
	n.Containers = slices.Clone(d.Containers)
	switch r := w.rng.IntN(10); {
	case r < 3: // one container's create-time field changes: a replacement
		if len(n.Containers) > 0 {
			i := w.rng.IntN(len(n.Containers))
			c := n.Containers[i]
			c.Image = strings.TrimRight(c.Image, "0123456789") + fmt.Sprint(w.rng.IntN(1000))
			n.Containers[i] = c
		}
	case r < 4 && len(n.Containers) < 6: // one more container
		for i := range 6 {
			if _, ok := n.Container(fmt.Sprintf("app%d", i)); !ok {
				n.Containers = append(n.Containers, container(i, 1))
				break
			}
		}
	case r < 5 && len(n.Containers) > 1: // one less
		i := w.rng.IntN(len(n.Containers))
		n.Containers = slices.Delete(n.Containers, i, i+1)
	case r < 6: // many change at once: beyond the hold
		for i := range n.Containers {
			c := n.Containers[i]
			c.Env = map[string]string{"N": fmt.Sprint(i), "V": fmt.Sprint(n.Generation)}
			n.Containers[i] = c
		}
	}
	if w.rng.IntN(12) == 0 {
		n.MeshNames = []spec.MeshNamesFlag{spec.FlagOff, spec.FlagOn, spec.FlagAuto}[w.rng.IntN(3)]
	}
	if d.Roster.Generation == 0 || w.rng.IntN(3) != 0 {
		n.Roster = w.nextRoster(d.Roster)
	}
	return &n
}

// nextRoster returns r changed: a newer generation, names added, moved
// and removed; now and then a drop the guard holds.
func (w *world) nextRoster(r *spec.Roster) *spec.Roster {
	w.rosterGen = max(w.rosterGen, r.Generation) + 1
	n := &spec.Roster{Generation: w.rosterGen, Zones: r.Zones, Names: make(map[string][]netip.Addr, len(r.Names)+2)}
	for k, v := range r.Names {
		n.Names[k] = v
	}
	names := slices.Sorted(mapKeys(n.Names))
	switch x := w.rng.IntN(10); {
	case x < 1 && len(names) >= 8: // a drop of more than a quarter
		for _, k := range names[:len(names)/2] {
			delete(n.Names, k)
		}
	case x < 4 && len(names) > 0:
		delete(n.Names, names[w.rng.IntN(len(names))])
	case x < 7 && len(names) > 0:
		n.Names[names[w.rng.IntN(len(names))]] = []netip.Addr{w.addr()}
	}
	for range 1 + w.rng.IntN(2) {
		n.Names[fmt.Sprintf("svc%d.internal", w.rng.IntN(40))] = []netip.Addr{w.addr()}
	}
	return n
}

func (w *world) addr() netip.Addr {
	return netip.AddrFrom4([4]byte{10, 89, byte(w.rng.IntN(4)), byte(1 + w.rng.IntN(250))})
}

func marshal(d *spec.Declaration) []byte {
	doc, err := d.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return doc
}

// goodWhole offers the next whole declaration by a path drawn.
func (w *world) goodWhole() error {
	d := w.next(w.current())
	path := w.path()
	if w.rng.IntN(5) == 0 {
		path = "put" // as natssource puts a whole declaration
	}
	return w.expectAccepted(fmt.Sprintf("whole gen=%d roster=%d via %s", d.Generation, d.Roster.Generation, path), path, marshal(d), d.Roster)
}

// goodDelta offers a declaration delta from the roster in force.
func (w *world) goodDelta() error {
	cur := w.current()
	if cur.Roster.Generation == 0 {
		return w.goodWhole()
	}
	w.offered++
	nr := w.nextRoster(cur.Roster)
	dd := &spec.DeclarationDelta{Schema: spec.SchemaVersion, Machine: Machine, Generation: w.offered, Roster: deltaOf(cur.Roster, nr)}
	doc, err := dd.MarshalJSON()
	if err != nil {
		return err
	}
	path := w.path()
	return w.expectAccepted(fmt.Sprintf("delta gen=%d roster %d->%d via %s", dd.Generation, cur.Roster.Generation, nr.Generation, path), path, doc, nr)
}

// rosterCommit puts a roster change as natssource does with a roster
// commit (Source.PutRosterDelta): made under the controller's declaration
// generation, which a local rollback may have left behind the one in
// force. Now and then one every source must refuse: from another base, to
// an older roster, or under a declaration generation the agent lacks.
func (w *world) rosterCommit() error {
	cur, _ := w.m.source.Current()
	if cur == nil {
		return w.goodWhole()
	}
	declGen := cur.Generation - min(cur.Generation-1, w.rng.Uint64N(3))
	nr := w.nextRoster(cur.Roster)
	d := deltaOf(cur.Roster, nr)
	bad := ""
	switch w.rng.IntN(6) {
	case 0:
		d.From, bad = cur.Roster.Generation+1, "from another base"
	case 1:
		declGen, bad = cur.Generation+1, "under a newer declaration"
	case 2:
		if cur.Roster.Generation > 1 {
			d.From, d.To, bad = cur.Roster.Generation-1, cur.Roster.Generation-1, "to an older roster"
		}
	}
	before := w.snapshot()
	err := w.m.source.PutRosterDelta(Machine, declGen, d, "nats")
	what := fmt.Sprintf("roster commit %d->%d under declaration %d (in force %d)", d.From, d.To, declGen, cur.Generation)
	if bad != "" {
		what += ", " + bad
	}
	w.logf("%s: %v", what, firstLine(fmt.Sprint(err)))
	switch {
	case bad == "" && err != nil:
		w.violate("GoodInputAccepted", fmt.Errorf("a roster commit %d->%d under declaration %d was refused: %v", d.From, d.To, declGen, err))
	case bad != "" && err == nil:
		w.violate("BadInputRefused", fmt.Errorf("a roster commit %s was accepted", bad))
	case bad != "":
		w.st.Refused++
		w.refusedInput = before
	default:
		w.st.Accepted++
		w.natsDecl, _ = w.m.source.Current()
		w.took()
	}
	return nil
}

// deltaOf is the delta from a to b.
func deltaOf(a, b *spec.Roster) *spec.RosterDelta {
	d := &spec.RosterDelta{From: a.Generation, To: b.Generation, Set: map[string][]netip.Addr{}}
	for k, v := range b.Names {
		if !slices.Equal(a.Names[k], v) {
			d.Set[k] = v
		}
	}
	for k := range a.Names {
		if _, ok := b.Names[k]; !ok {
			d.Remove = append(d.Remove, k)
		}
	}
	slices.Sort(d.Remove)
	return d
}

// duplicate offers the declaration in force again: no fault, no change.
func (w *world) duplicate() error {
	d, _ := w.m.source.Current()
	if d == nil {
		return w.goodWhole()
	}
	path := w.path()
	return w.expectAccepted(fmt.Sprintf("the same gen=%d again via %s", d.Generation, path), path, marshal(d), d.Roster)
}

// expectAccepted offers a good document and records its roster.
func (w *world) expectAccepted(what, path string, doc []byte, roster *spec.Roster) error {
	ok, why := w.offerVia(path, doc)
	w.logf("%s: accepted=%v %s", what, ok, why)
	if !ok {
		w.violate("GoodInputAccepted", fmt.Errorf("%s was refused: %s", what, why))
		return nil
	}
	w.st.Accepted++
	w.took()
	return nil
}

// took records the roster the Source took, and runs Run's roster loop
// (most of the time: now and then the agent crashes, or a pass comes,
// before it).
func (w *world) took() {
	if d, _ := w.m.source.Current(); d != nil {
		if doc := journalDoc(d); !slices.Contains(w.accepted[d.Generation], doc) {
			w.accepted[d.Generation] = append(w.accepted[d.Generation], doc)
		}
	}
	if r, _ := w.m.source.Roster(); r != nil {
		w.rosters[r.Generation] = fingerprintRoster(r)
	}
	if w.rng.IntN(4) != 0 {
		err := w.m.agent.RosterNow()
		w.logf("roster loop: %v", err)
	}
}

// badInput offers a document every path must refuse, and remembers what
// must not change.
func (w *world) badInput() error {
	cur, _ := w.m.source.Current()
	if cur == nil {
		return w.goodWhole()
	}
	path := w.path()
	var what string
	var doc []byte
	switch k := w.rng.IntN(8); k {
	case 7: // a newer declaration with an older roster
		if cur.Roster.Generation < 2 {
			return w.goodWhole()
		}
		d := w.next(cur)
		r := *w.nextRoster(cur.Roster)
		r.Generation = 1 + w.rng.Uint64N(cur.Roster.Generation-1)
		d.Roster = &r
		what, doc = fmt.Sprintf("gen=%d with older roster gen=%d (in force %d)", d.Generation, r.Generation, cur.Roster.Generation), marshal(d)
	case 0: // an older generation
		if cur.Generation < 2 {
			return w.goodWhole()
		}
		d := w.next(cur)
		w.offered--
		d.Generation = 1 + w.rng.Uint64N(cur.Generation-1)
		what, doc = fmt.Sprintf("older gen=%d (in force %d)", d.Generation, cur.Generation), marshal(d)
	case 1: // the generation in force, other containers
		d := *cur
		d.Containers = append(slices.Clone(cur.Containers), container(9, 1))
		what, doc = fmt.Sprintf("gen=%d reused with other containers", d.Generation), marshal(&d)
	case 2: // the roster generation in force, other names
		d := *cur
		w.offered++
		d.Generation = w.offered
		r := *cur.Roster
		r.Names = map[string][]netip.Addr{}
		for k, v := range cur.Roster.Names {
			r.Names[k] = v
		}
		r.Names[fmt.Sprintf("intruder%d.internal", w.step)] = []netip.Addr{w.addr()} // a name not in force
		d.Roster = &r
		what, doc = fmt.Sprintf("gen=%d with roster gen=%d reused with other names", d.Generation, r.Generation), marshal(&d)
	case 3: // a delta from another base
		w.offered++
		from := cur.Roster.Generation + 1 + w.rng.Uint64N(3)
		if w.rng.IntN(2) == 0 && cur.Roster.Generation > 1 {
			from = cur.Roster.Generation - 1
		}
		w.rosterGen++
		dd := &spec.DeclarationDelta{Schema: spec.SchemaVersion, Machine: Machine, Generation: w.offered,
			Roster: &spec.RosterDelta{From: from, To: w.rosterGen, Set: map[string][]netip.Addr{"late.internal": {w.addr()}}}}
		doc, _ = dd.MarshalJSON()
		what = fmt.Sprintf("delta gen=%d from roster %d (in force %d)", dd.Generation, from, cur.Roster.Generation)
	case 4: // another machine's
		d := w.next(cur)
		d.Machine = "elsewhere"
		what, doc = fmt.Sprintf("gen=%d for another machine", d.Generation), marshal(d)
	case 5: // invalid: a reserved name
		d := w.next(cur)
		d.Containers = append(d.Containers, spec.Container{Name: "app0" + spec.AsideSuffix, Image: "x:1"})
		doc = marshal(d)
		what = fmt.Sprintf("gen=%d naming a reserved container name", d.Generation)
	case 6: // oversize: by file (the size is checked before reading) or HTTP
		return w.oversize()
	}
	before := w.snapshot()
	ok, why := w.offerVia(path, doc)
	w.logf("bad: %s via %s: accepted=%v %s", what, path, ok, why)
	if ok {
		w.violate("BadInputRefused", fmt.Errorf("%s via %s was accepted", what, path))
		return nil
	}
	w.st.Refused++
	w.refusedInput = before
	return nil
}

// oversize offers a document over spec.MaxDocumentBytes: as a sparse
// file, or as an HTTP body said to be that long (both refused before
// reading).
func (w *world) oversize() error {
	before := w.snapshot()
	refused := true
	if w.rng.IntN(2) == 0 {
		target := filepath.Join(w.in, "declaration.json")
		if err := os.MkdirAll(w.in, 0o700); err != nil {
			return err
		}
		f, err := os.Create(target)
		if err != nil {
			return err
		}
		f.WriteString(`{"schema": 1, `)
		err = f.Truncate(spec.MaxDocumentBytes + 1)
		f.Close()
		if err != nil {
			return err
		}
		_, seq := w.m.source.Snapshot()
		w.m.source.ReadPath(target)
		_, seq2 := w.m.source.Snapshot()
		refused = seq == seq2
		w.logf("bad: oversize file: refused=%v", refused)
	} else {
		req := httptest.NewRequest(http.MethodPut, "/v1/declaration", strings.NewReader(`{"schema": 1}`))
		req.ContentLength = spec.MaxDocumentBytes + 1
		rec := httptest.NewRecorder()
		w.m.source.Handler().ServeHTTP(rec, req)
		refused = rec.Code == http.StatusRequestEntityTooLarge
		w.logf("bad: oversize HTTP body: HTTP %d", rec.Code)
	}
	if !refused {
		w.violate("BadInputRefused", fmt.Errorf("an oversize document was not refused as too large"))
		return nil
	}
	w.st.Refused++
	w.refusedInput = before
	return nil
}

// rollback re-issues a journaled declaration as a new generation, as
// `meshhost rollback GEN` does: from the saved declaration, its roster
// kept, the generation above every one in force or journaled, pushed.
func (w *world) rollback() error {
	cur, err := agent.LoadDeclaration(w.dir)
	if err != nil || cur == nil {
		w.logf("rollback: nothing saved (%v)", err)
		return nil
	}
	entries, err := w.m.jnl.Declarations()
	if err != nil || len(entries) == 0 {
		w.logf("rollback: nothing journaled (%v)", err)
		return nil
	}
	e := entries[w.rng.IntN(len(entries))]
	old, err := w.m.jnl.Declaration(e.Generation)
	if err != nil {
		w.logf("rollback %d: %v", e.Generation, err)
		return nil
	}
	gen := cur.Generation
	for _, e := range entries {
		gen = max(gen, e.Generation)
	}
	next := *old
	next.Generation = gen + 1
	next.Roster = cur.Roster
	next.Schema = spec.SchemaVersion
	if err := next.Validate(); err != nil {
		w.logf("rollback %d: %v", e.Generation, err)
		return nil
	}
	w.offered = max(w.offered, next.Generation)
	ok, why := w.offerVia("http", marshal(&next))
	w.logf("rollback to %d as gen=%d roster=%d: accepted=%v %s", e.Generation, next.Generation, next.Roster.Generation, ok, why)
	if ok {
		w.st.Accepted++
		w.took()
	}
	return nil
}

// approve approves the held declaration, or now and then one not held.
func (w *world) approve() error {
	gen := w.offered
	if rep := w.m.agent.LastReport(); rep != nil && rep.Held.Held() && w.rng.IntN(4) != 0 {
		gen = rep.Held.Generation
	}
	err := agent.ApproveDeclaration(w.dir, gen)
	w.logf("approve %d: %v", gen, err)
	return nil
}

// control freezes or unfreezes the machine.
func (w *world) control(what string) error {
	var f *agent.Freeze
	if what == "freeze" {
		f = &agent.Freeze{Since: time.Now(), Reason: "sim"}
	}
	err := agent.SetFrozen(w.dir, f)
	w.logf("%s: %v", what, err) // fails on a full disk, as the command does
	if err == nil {
		w.frozen = f != nil
	}
	return nil
}

// accept accepts the held roster (any generation the hold covers), or
// one not held, which must be refused and change nothing.
func (w *world) accept() error {
	h, _ := agent.LoadRosterHold(w.dir)
	if h != nil && w.rng.IntN(4) != 0 {
		gen := h.Served + 1 + w.rng.Uint64N(h.Newest-h.Served)
		err := agent.AcceptRoster(w.dir, gen)
		w.logf("roster accept %d (held %d..%d): %v", gen, h.Served, h.Newest, err)
		return nil
	}
	before := w.snapshot()
	gen := w.rosterGen + 1 // not declared yet
	if h != nil && h.Served > 0 && w.rng.IntN(2) == 0 {
		gen = 1 + w.rng.Uint64N(h.Served) // served already
	}
	err := agent.AcceptRoster(w.dir, gen)
	w.logf("roster accept %d (not held): %v", gen, firstLine(fmt.Sprint(err)))
	if err == nil {
		w.violate("BadInputRefused", fmt.Errorf("roster accept %d of a generation not held succeeded", gen))
		return nil
	}
	w.refusedInput = before
	return nil
}

var methods = []string{"List", "Inspect", "Create", "Start", "Stop", "Rename", "Remove", "Update"}

// runtimeFault arms a runtime call to fail: before taking effect, or
// after (the reply lost); a Remove now and then cut short.
func (w *world) runtimeFault() error {
	f := memory.Fault{Method: methods[w.rng.IntN(len(methods))], N: 1 + w.rng.IntN(3), After: w.rng.IntN(2) == 0}
	w.rt.Inject(f)
	w.st.Faults++
	w.logf("fault: %s call %d fails (after=%v)", f.Method, f.N, f.After)
	return nil
}

// crashMidPass arms a crash at a runtime call (the agent dies there: no
// later call reaches the runtime), runs a pass into it, and restarts.
func (w *world) crashMidPass() error {
	f := memory.Fault{Method: methods[2+w.rng.IntN(len(methods)-2)], N: 1 + w.rng.IntN(2), After: w.rng.IntN(2) == 0, Crash: true}
	if f.Method == "Remove" && w.rng.IntN(2) == 0 {
		f.Cut = true
	}
	w.rt.Inject(f)
	w.st.Faults++
	w.logf("fault: crash at %s call %d (after=%v cut=%v)", f.Method, f.N, f.After, f.Cut)
	w.pass("into the crash")
	return w.restart("crashed mid-pass")
}

// migrate pauses or resumes the migration as `meshhost migrate pause`
// does: through a gate of its own on the agent's state file.
func (w *world) migrate(pause bool) error {
	g, err := migrations.OpenGate(migrations.GateConfig{Path: w.dir.Migrations(), Owner: Machine, Now: w.clock()})
	if err != nil {
		w.logf("migrate: %v", err)
		return nil
	}
	change := g.Resume
	if pause {
		change = g.Pause
	}
	err = change()
	w.logf("migrate pause=%v: %v", pause, err)
	if err == nil {
		w.paused = pause
	}
	return nil
}

// podmanDown takes podman's API down: every call fails, from the next
// one on, until "podman up" (or a restart, or a quiesce).
func (w *world) podmanDown() error {
	w.rt.Inject(memory.Fault{Method: methods[w.rng.IntN(len(methods))], N: 1, Crash: true, Err: errors.New("connection refused")})
	w.st.Faults++
	w.logf("podman's API goes down")
	return nil
}

// clockJump moves the clock on: budget windows pass, proofs age. One
// jump in four sets the wall clock back instead, while the agent is down
// (a wrong RTC at boot, NTP stepping it before the agent starts): the
// agent restarts with the gate's and the reconciler's clock (Config.Now)
// set back, and finds in the state directory times in its future (the
// budget's charges, the proofs). synctest's clock only moves on, so the
// rest of the process (timers, the resolver, the journal's stamps) does
// not see the step.
func (w *world) clockJump() error {
	d := time.Duration(1+w.rng.IntN(60)) * time.Duration(w.rng.IntN(3)*4+1) * time.Minute / 2
	if w.rng.IntN(4) == 0 {
		w.back += d
		return w.restart(fmt.Sprintf("the wall clock set back %s", d))
	}
	time.Sleep(d)
	w.logf("clock +%s", d)
	return nil
}
