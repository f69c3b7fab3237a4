// Package declsource receives the machine's declaration: from a file or a
// directory watched for changes, and from an HTTP endpoint the controller
// pushes to, on a unix socket or a loopback address only. Every document is
// parsed strictly by specjson.ParseDeclaration; a faulty one is refused whole and
// the previous declaration stays in force.
//
// A document is a whole declaration, or a declaration delta
// (specjson.ParseDeclarationDelta): a new generation whose roster is the
// roster in force changed by a few names. A delta applies only on top of
// the roster generation it names; else it is refused (ErrDeltaBase, HTTP
// 409) and the controller sends the whole declaration. The Source keeps
// the declared roster as its own and changes it in place, so a delta costs
// what it changes; a whole declaration costs reading it and finding what
// changed. Either way the Source records each declaration it takes as a
// Change (the roster's delta, and its undo), which its reader takes in
// order (ChangesSince): a pass costs what changed, not the roster.
package declsource

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ErrStale is matched by the refusal of a declaration whose generation is
// older than the one in force (admit.ErrStale).
var ErrStale = admit.ErrStale

// ErrDeltaBase is returned for a declaration delta that does not apply to
// the declaration in force: its roster delta is from another roster
// generation, or no declaration is in force yet (admit.ErrDeltaBase; it
// matches spec.ErrDeltaBase too).
var ErrDeltaBase = admit.ErrDeltaBase

// Source holds the newest valid declaration and tells a listener when it
// changes.
type Source struct {
	logger  *slog.Logger
	machine string // declarations for any other machine are refused
	reader  specjson.Reader
	changed chan struct{}
	refused *prometheus.CounterVec // by Refusal

	// changeMu serializes changes of the declaration in force; it is held
	// while the names of current's roster are read or changed (which only
	// changes do, and the copies of Current and Roster), so that mu is
	// held only briefly.
	changeMu sync.Mutex

	// mu guards the fields below.
	mu sync.Mutex
	// current is the declaration in force. Its Roster is the Source's
	// own: deltas change it in place, so it is never handed out (Current
	// and Roster copy it; Head leaves the names out).
	current *spec.Declaration
	raw     []byte       // the last whole document taken; nil for none (or the initial one)
	rawGen  uint64       // its generation
	origin  string       // where current came from: a path, or "push"
	names   int          // the names of current's roster (Head's, read without changeMu)
	seq     uint64       // declarations taken since New; the initial one is 0
	served  admit.Served // the roster the resolver serves (SetServed)
	// changes are the last declarations taken, oldest first: at most
	// maxChanges, and (but for the last) maxChangeNames names changed.
	changes     []Change
	changeNames int
	// files are the files of a watched directory offered, with the size
	// and modification time they had then: a file is offered again only
	// when new or rewritten, whatever its name sorts like.
	files map[string]fileStamp
}

// fileStamp is what tells a rewritten file of a watched directory.
type fileStamp struct {
	size int64
	mod  time.Time
}

// Change is one declaration the Source took, as a change from the one
// before it. Its deltas are never changed once recorded.
type Change struct {
	Seq        uint64 // 1 for the first declaration taken after New, and so on
	Generation uint64 // the declaration's generation
	// Roster is the declared roster's change from the declaration before
	// (From 0 when there was none); Undo takes it back.
	Roster, Undo *spec.RosterDelta
	// Whole: the declaration came whole (Document holds it, until the next
	// whole one); else as a delta.
	Whole bool
}

// Bounds of the changes a Source keeps for its reader.
const (
	maxChanges     = 4096
	maxChangeNames = 1 << 16
)

// Config is what a Source needs; the zero Config accepts any machine's
// declarations.
type Config struct {
	// Machine names this machine: declarations for another are refused.
	// Empty accepts any machine's.
	Machine string
	// Initial, if not nil, is in force until a newer one arrives (the
	// agent passes the declaration it saved last time).
	Initial *spec.Declaration
	// Reader parses every document; its Busy lets a large roster's parse
	// step aside for the in-process resolver's queries.
	Reader specjson.Reader
	// Logger receives what the Source accepts and refuses; nil discards.
	Logger *slog.Logger
	// Registerer receives meshhost_agent_declarations_refused_total. Nil
	// registers none.
	Registerer prometheus.Registerer
}

// New returns a Source for cfg. It panics if cfg.Registerer already holds
// the Source's metric (one Source per registry).
func New(cfg Config) *Source {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	initial := cfg.Initial
	if initial != nil && cfg.Machine != "" && initial.Machine != cfg.Machine {
		initial = nil // saved for another machine name: not ours to apply
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshhost_agent_declarations_refused_total",
		Help: "Declarations refused (pushed, read from a file or put by a roster source), by reason: invalid, too_large, other_machine, older_generation, generation_reused, roster_older, roster_generation_reused, delta_base.",
	}, []string{"reason"})
	for _, r := range admit.Reasons { // every reason at 0 from the start
		refused.WithLabelValues(string(r))
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(refused)
	}
	s := &Source{logger: logger.With("component", "declsource"), machine: cfg.Machine, reader: cfg.Reader,
		changed: make(chan struct{}, 1), refused: refused, current: initial}
	if initial != nil {
		s.names = len(initial.Roster.Names)
	}
	return s
}

// SetServed tells the Source which roster generation the resolver serves,
// and how to read that roster (the caller's: called rarely, and its result
// only read); the agent calls it whenever that changes. A declaration whose
// roster is older, or has its generation with other names, is refused
// (ErrConflict). The Source keeps no names of it: the agent changes its
// roster in place as deltas arrive.
func (s *Source) SetServed(gen uint64, roster func() *spec.Roster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served = admit.Served{Generation: gen, Roster: roster}
}

// Current returns the declaration in force (nil before the first), whole,
// and where it came from. Its roster is a copy, the caller's: this costs
// the roster's size; a pass reads Head and ChangesSince instead.
func (s *Source) Current() (*spec.Declaration, string) {
	d, origin, _ := s.copyInForce()
	return d, origin
}

// Roster returns a copy of the roster in force (nil before the first
// declaration), the caller's, and the last Change it includes: this costs
// the roster's size.
func (s *Source) Roster() (*spec.Roster, uint64) {
	d, _, seq := s.copyInForce()
	if d == nil {
		return nil, seq
	}
	return d.Roster, seq
}

// Snapshot is Current with the last Change it includes instead of where it
// came from.
func (s *Source) Snapshot() (*spec.Declaration, uint64) {
	d, _, seq := s.copyInForce()
	return d, seq
}

// copyInForce returns the declaration in force with a copy of its roster
// (nil before the first), where it came from, and the last Change it
// includes. changeMu keeps the roster from changing while it is copied.
func (s *Source) copyInForce() (*spec.Declaration, string, uint64) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, origin, seq := s.current, s.origin, s.seq
	s.mu.Unlock()
	if cur == nil {
		return nil, origin, seq
	}
	d := *cur
	d.Roster = copyRoster(cur.Roster)
	return &d, origin, seq
}

func copyRoster(r *spec.Roster) *spec.Roster {
	out := &spec.Roster{Generation: r.Generation, Zones: r.Zones, Names: make(map[string][]netip.Addr, len(r.Names))}
	maps.Copy(out.Names, r.Names) // address lists are never changed in place
	return out
}

// Head is the declaration in force without its roster's names: what a
// pass reads every time, at no cost proportional to the roster.
type Head struct {
	// Declaration is the declaration in force; its Roster has the
	// generation and zones of the roster, and no names (nil Names).
	Declaration *spec.Declaration
	Names       int    // the roster's names
	Origin      string // where it came from: a path, or "push"
	// Seq is the last Change it includes (0: the initial declaration).
	Seq uint64
}

// Head returns the declaration in force without its roster's names, and
// false before the first declaration.
func (s *Source) Head() (Head, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return Head{}, false
	}
	return Head{Declaration: headOf(s.current), Names: s.names, Origin: s.origin, Seq: s.seq}, true
}

// headOf is d without its roster's names.
func headOf(d *spec.Declaration) *spec.Declaration {
	h := *d
	h.Roster = &spec.Roster{Generation: d.Roster.Generation, Zones: d.Roster.Zones}
	return &h
}

// ChangesSince returns the declarations taken after the change seq (0:
// the initial declaration), oldest first, and false when the Source no
// longer keeps them all (its reader then starts again from Roster).
func (s *Source) ChangesSince(seq uint64) ([]Change, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case seq == s.seq:
		return nil, true
	case seq > s.seq || len(s.changes) == 0 || s.changes[0].Seq > seq+1:
		return nil, false
	}
	return slices.Clone(s.changes[seq+1-s.changes[0].Seq:]), true
}

// Document returns the last whole document taken and its declaration
// generation (nil when none was: the initial declaration). Deltas taken
// after it are Changes.
func (s *Source) Document() ([]byte, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw, s.rawGen
}

// recordLocked records a change and puts next in force.
func (s *Source) recordLocked(next *spec.Declaration, origin string, c Change) {
	syncs.AssertLocked(&s.mu)
	s.seq++
	c.Seq = s.seq
	s.current, s.origin = next, origin
	s.names = len(next.Roster.Names) // every change holds changeMu
	s.changes = append(s.changes, c)
	s.changeNames += c.Roster.Len() + c.Undo.Len()
	for len(s.changes) > 1 && (len(s.changes) > maxChanges || s.changeNames > maxChangeNames) {
		s.changeNames -= s.changes[0].Roster.Len() + s.changes[0].Undo.Len()
		s.changes[0] = Change{}
		s.changes = s.changes[1:]
	}
}

// Changed is signalled (coalesced) whenever a new declaration is in force.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Offer parses data, a whole declaration or a declaration delta, and puts
// it in force if it is valid and newer. The same declaration again (the
// generation in force, the same content; for a delta, the generations in
// force and a change that makes the roster in force) changes nothing and
// is no fault.
// The error names every fault, and matches ErrConflict (ErrStale too, for
// an older generation) when the declaration contradicts what is in force:
// an older generation; the generation in force with other content; a
// roster older than the one served (or in force), or with its generation
// and other names. A delta that does not apply to the roster in force
// matches ErrDeltaBase. On error nothing changes, and the refusal is
// counted by its Refusal. It returns the declaration in force without its
// roster's names (as Head).
func (s *Source) Offer(data []byte, origin string) (*spec.Declaration, error) {
	d, err := s.offer(data, origin)
	if err != nil {
		s.refused.WithLabelValues(string(refusalOf(err))).Inc()
	}
	return d, err
}

func (s *Source) offer(data []byte, origin string) (*spec.Declaration, error) {
	if err := specjson.CheckSize(int64(len(data))); err != nil {
		return nil, &refused{RefusedTooLarge, err}
	}
	if specjson.IsDeclarationDelta(data) {
		return s.offerDelta(data, origin)
	}
	d, err := s.reader.ParseDeclaration(data)
	if err != nil {
		return nil, err
	}
	return s.take(d, data, origin)
}

// take puts d, parsed and valid, in force if it is newer and agrees with
// what is in force (admit.Declaration); data is its document (nil when it
// came in parts: Put). d's roster becomes the Source's own.
func (s *Source) take(d *spec.Declaration, data []byte, origin string) (*spec.Declaration, error) {
	if err := s.checkMachine(d.Machine); err != nil {
		return nil, err
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, raw, rawGen, srv := s.current, s.raw, s.rawGen, s.served
	s.mu.Unlock()
	var from *spec.Roster
	if cur != nil {
		if err := admit.Machine("", cur, d.Machine).Err(); err != nil {
			return nil, err
		}
		if data != nil && d.Generation == cur.Generation && rawGen == cur.Generation && bytes.Equal(data, raw) {
			return headOf(cur), nil // the same push twice
		}
		from = cur.Roster
	}
	// Judged under changeMu only (a roster of 100,000 names takes
	// milliseconds to compare): Head does not wait for it.
	dec := admit.Declaration(d, cur, srv)
	if err := dec.Err(); err != nil {
		return nil, err
	}
	if dec.Verdict == admit.Same {
		return headOf(cur), nil
	}
	// What changed: the cost of reading the roster once more.
	delta, undo := spec.DiffRosters(from, d.Roster)
	s.mu.Lock()
	if data != nil {
		s.raw, s.rawGen = data, d.Generation
	}
	s.recordLocked(d, origin, Change{Generation: d.Generation, Roster: delta, Undo: undo, Whole: data != nil})
	s.mu.Unlock()
	s.logger.Info("declaration accepted", "origin", origin, "machine", d.Machine, "declaration_generation", d.Generation,
		"roster_generation", d.Roster.Generation, "containers", len(d.Containers), "mesh_names", d.MeshNames,
		"names_changed", delta.Len())
	s.signal()
	return headOf(d), nil
}

func (s *Source) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// checkMachine refuses a declaration for another machine than the agent's.
func (s *Source) checkMachine(machine string) error {
	return admit.Machine(s.machine, nil, machine).Err()
}

// offerDelta puts a declaration delta in force: the declaration in force,
// with the next generation and its roster changed in place. It costs what
// the delta changes.
func (s *Source) offerDelta(data []byte, origin string) (*spec.Declaration, error) {
	dd, err := specjson.ParseDeclarationDelta(data)
	if err != nil {
		return nil, err
	}
	if err := s.checkMachine(dd.Machine); err != nil {
		return nil, err
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, srv := s.current, s.served
	s.mu.Unlock()
	if cur != nil {
		if err := admit.Machine("", cur, dd.Machine).Err(); err != nil {
			return nil, err
		}
	}
	rd := dd.Roster
	dec := admit.DeclarationDelta(dd.Generation, rd, cur, srv, func() admit.Faults { return s.deltaDifferencesLocked(cur, rd) })
	if err := dec.Err(); err != nil {
		return nil, err
	}
	if dec.Verdict == admit.Same {
		return headOf(cur), nil // the same push twice is not a fault
	}
	next, err := s.applyDeltaLocked(cur, dd.Generation, rd, origin)
	if err != nil {
		return nil, err
	}
	s.logger.Info("declaration delta accepted", "origin", origin, "machine", dd.Machine, "declaration_generation", dd.Generation,
		"roster_generation", rd.To, "set", len(rd.Set), "removed", len(rd.Remove))
	s.signal()
	return headOf(next), nil
}

// applyDeltaLocked puts rd, a roster delta from the roster in force (cur's),
// in force in place as declaration generation gen, and records the change;
// rd is admitted already (admit.DeclarationDelta, admit.RosterDelta). It
// refuses rd when it removes a name the roster lacks. The caller holds
// changeMu.
func (s *Source) applyDeltaLocked(cur *spec.Declaration, gen uint64, rd *spec.RosterDelta, origin string) (*spec.Declaration, error) {
	syncs.AssertLocked(&s.changeMu)
	var faults spec.FaultList // bounded: a delta may name a million names the roster lacks
	for i, name := range rd.Remove {
		if _, ok := cur.Roster.Names[name]; !ok {
			faults.Add(fmt.Sprintf("roster_delta.remove[%d]", i), "%q is not in roster generation %d", name, cur.Roster.Generation)
		}
	}
	if faults.Len() > 0 {
		return nil, faults.Err()
	}
	next := *cur
	next.Generation = gen
	// The names change in place (the roster is the Source's own, read
	// under changeMu); its generation and zones in a roster of its own, as
	// Head reads them under mu alone.
	roster := *cur.Roster
	next.Roster = &roster
	undo, err := next.Roster.Apply(rd)
	var fe *spec.FieldError
	if errors.As(err, &fe) { // a fault of the delta (too many names): its path in the document
		return nil, &spec.FieldError{Path: "roster_delta." + fe.Path, Reason: fe.Reason}
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.recordLocked(&next, origin, Change{Generation: gen, Roster: rd, Undo: undo})
	s.mu.Unlock()
	return &next, nil
}

// deltaDifferencesLocked returns what differs between the roster rd, a
// roster delta to the roster generation in force (cur's), would make and
// the roster in force, each named by its path in the delta document; none
// when rd is the change in force again (the same push twice). The roster
// rd applies to is the one before the last change, which that change's
// Undo gives back: this costs the two changes, not the roster. Without
// that change (the declaration in force since the Source was made, or
// its last change kept the roster), rd's own names are judged against the
// roster in force. The caller holds changeMu.
func (s *Source) deltaDifferencesLocked(cur *spec.Declaration, rd *spec.RosterDelta) faultList {
	syncs.AssertLocked(&s.changeMu)
	in := cur.Roster
	var last *Change
	s.mu.Lock()
	if n := len(s.changes); n > 0 {
		// Never changed once recorded. One that kept the roster's
		// generation (a declaration that changed only its containers)
		// does not say what the roster was made from.
		if c := &s.changes[n-1]; c.Roster.To == in.Generation && c.Roster.From != c.Roster.To {
			last = c
		}
	}
	s.mu.Unlock()
	var out faultList
	if last != nil && rd.From != last.Roster.From {
		out.Add("roster_delta.from", "%d here; roster generation %d in force was made from generation %d", rd.From, in.Generation, last.Roster.From)
		return out
	}
	switch {
	case rd.Zones != nil && !slices.Equal(rd.Zones, in.Zones):
		out.Add("roster_delta.zones", "%v here, %v in force", rd.Zones, in.Zones)
	case rd.Zones == nil && last != nil && last.Undo.Zones != nil:
		out.Add("roster_delta.zones", "not here (%v, as in generation %d), %v in force", last.Undo.Zones, rd.From, in.Zones)
	}
	removed := make(map[string]int, len(rd.Remove)) // name -> index in Remove
	for i, n := range rd.Remove {
		removed[n] = i
	}
	// before is a name's addresses in the roster rd applies to (nil: not
	// in it).
	before := func(n string) []netip.Addr {
		if last != nil {
			if a, ok := last.Undo.Set[n]; ok {
				return a
			}
			if _, ok := slices.BinarySearch(last.Undo.Remove, n); ok {
				return nil
			}
		}
		return in.Names[n]
	}
	names := slices.Collect(maps.Keys(rd.Set))
	names = append(names, rd.Remove...)
	if last != nil { // names the change in force changed, which rd may not
		names = append(names, slices.Collect(maps.Keys(last.Roster.Set))...)
		names = append(names, last.Roster.Remove...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	differ := 0
	for _, n := range names {
		after, set := rd.Set[n]
		i, gone := removed[n]
		if !set && !gone {
			after = before(n)
		}
		now := in.Names[n]
		if slices.Equal(after, now) {
			continue
		}
		if differ++; differ > spec.MaxFaults {
			continue // counted
		}
		switch {
		case set && now == nil:
			out.Add(fmt.Sprintf("roster_delta.set[%q]", n), "%s here; not in roster generation %d in force", addrList(after), in.Generation)
		case set:
			out.Add(fmt.Sprintf("roster_delta.set[%q]", n), "%s here, %s in force", addrList(after), addrList(now))
		case gone:
			out.Add(fmt.Sprintf("roster_delta.remove[%d]", i), "%q is removed here; roster generation %d in force has it (%s)", n, in.Generation, addrList(now))
		case now == nil:
			out.Add("roster_delta", "does not remove %q (%s); roster generation %d in force removed it", n, addrList(after), in.Generation)
		case after == nil:
			out.Add("roster_delta", "does not set %q; roster generation %d in force has it at %s", n, in.Generation, addrList(now))
		default:
			out.Add("roster_delta", "does not set %q (%s before); roster generation %d in force has it at %s", n, addrList(after), in.Generation, addrList(now))
		}
	}
	if differ > spec.MaxFaults {
		out.Add("roster_delta", "and %d more names differ", differ-spec.MaxFaults)
	}
	return out
}

// ReadPath reads the declaration at path (a file, or a directory of
// declaration files) now, as WatchPath does on a change: on SIGHUP, say.
func (s *Source) ReadPath(path string) {
	info, err := os.Stat(path)
	if err != nil {
		s.logger.Error("declaration path unreachable; the declaration in force stays", "path", path, "err", err)
		return
	}
	s.readPath(path, info.IsDir())
}

// WatchPath reads the declaration at path, a file or a directory, and again
// whenever it changes, until ctx ends. In a directory the *.json files are
// read in name order (so a controller writes gen-000042.json, then
// gen-000043.json), each once: a whole declaration, or a declaration delta
// that applies to the one before. At the start, reading begins at the
// newest whole declaration. A faulty or stale file is logged and ignored;
// the previous declaration stays.
func (s *Source) WatchPath(ctx context.Context, path string) error {
	info, err := os.Stat(path)
	if err != nil {
		// An unreachable source (a directory not mounted yet, a file not
		// written yet) is no reason to stop the agent: the declaration in
		// force stays, and the path is tried again until it appears.
		s.logger.Error("declaration path unreachable; the declaration in force stays, retrying every second", "path", path, "err", err)
		for err != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			info, err = os.Stat(path)
		}
		s.logger.Info("declaration path is back", "path", path)
	}
	w, err := filewatch.New(path)
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	s.readPath(path, info.IsDir())
	w.Run(ctx, 100*time.Millisecond, func() { s.readPath(path, info.IsDir()) })
	return nil
}

func (s *Source) readPath(path string, isDir bool) {
	if !isDir {
		s.offerFile(path)
		return
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		s.logger.Error("reading declaration directory", "path", path, "err", err)
		return
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	s.mu.Lock()
	first := s.files == nil
	if first {
		s.files = map[string]fileStamp{}
	}
	type pendingFile struct {
		name  string
		stamp fileStamp
		gen   uint64
		delta bool
	}
	var pending []pendingFile
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(path, name))
		if err != nil {
			continue
		}
		st := fileStamp{fi.Size(), fi.ModTime()}
		if old, ok := s.files[name]; ok && old.size == st.size && old.mod.Equal(st.mod) {
			continue
		}
		pending = append(pending, pendingFile{name: name, stamp: st})
	}
	s.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	// The files new or rewritten since, in the order of the generation
	// inside them, not of their names (gen-10.json sorts before
	// gen-9.json): deltas apply one after the other. The first time,
	// from the newest whole declaration on (older files are older
	// declarations).
	for i := range pending {
		data, err := os.ReadFile(filepath.Join(path, pending[i].name))
		if err != nil {
			continue
		}
		var head struct {
			Generation uint64 `json:"generation"`
		}
		_ = json.Unmarshal(data, &head) // a bad file is refused when offered
		pending[i].gen, pending[i].delta = head.Generation, specjson.IsDeclarationDelta(data)
	}
	slices.SortStableFunc(pending, func(a, b pendingFile) int { return cmp.Compare(a.gen, b.gen) })
	if first {
		start := 0
		for i := len(pending) - 1; i >= 0; i-- {
			if !pending[i].delta && pending[i].gen != 0 {
				start = i
				break
			}
		}
		s.mu.Lock()
		for _, f := range pending[:start] { // older declarations: never offered
			s.files[f.name] = f.stamp
		}
		s.mu.Unlock()
		pending = pending[start:]
	}
	for _, f := range pending {
		s.offerFile(filepath.Join(path, f.name))
		s.mu.Lock()
		s.files[f.name] = f.stamp
		s.mu.Unlock()
	}
}

func (s *Source) offerFile(file string) {
	if fi, err := os.Stat(file); err == nil {
		if err := specjson.CheckSize(fi.Size()); err != nil { // refused before it is read
			s.refused.WithLabelValues(string(RefusedTooLarge)).Inc()
			s.logger.Error("declaration refused; the previous one stays in force", "path", file, "err", err)
			return
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.logger.Error("reading declaration", "path", file, "err", err)
		}
		return
	}
	if _, err := s.Offer(data, file); err != nil {
		level := slog.LevelError
		if errors.Is(err, ErrStale) {
			level = slog.LevelWarn // an old file left in the directory
		}
		s.logger.Log(context.Background(), level, "declaration refused; the previous one stays in force", "path", file, "refusal", refusalOf(err), "err", err)
	}
}
