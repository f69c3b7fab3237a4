package natssource

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshhost/meshhost/spec"
)

// Change is what one applied commit changed in the roster in force: the
// delta from the roster applied before it. Its maps and slices are the
// watcher's own; read them, do not modify them.
type Change struct {
	Generation uint64 // the generation now in force
	Previous   uint64 // the generation before (0: none)
	Revision   uint64 // the commit's Revision
	// Set holds every name added or whose addresses changed, with its
	// addresses (sorted); Removed every name gone.
	Set     map[string][]netip.Addr
	Removed []string
	// Zones are the zones in force now; ZonesChanged says whether they
	// differ from the previous generation's.
	Zones        []string
	ZonesChanged bool
	Names        int // names in the roster now
	// Full is set when the change was computed against a re-read of the
	// whole bucket (the first read, or a resynchronisation), in time
	// proportional to the roster rather than to the change.
	Full bool
}

// Refusal reasons, the values of CommitError.Reason and of the
// commits_total metric's result label.
const (
	reasonStale        = "stale"        // generation not newer, or revision behind, the one in force
	reasonInvalid      = "invalid"      // the record or a name it covers is malformed
	reasonInconsistent = "inconsistent" // what was read does not add up to the record's names and digest
)

// CommitError says why a commit record was not applied. The roster in
// force stays.
type CommitError struct {
	Generation uint64 // the record's, 0 when unreadable
	Revision   uint64 // where the record is in the bucket
	Reason     string // stale, invalid or inconsistent
	Err        error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("roster commit generation %d (revision %d) refused, %s: %v", e.Generation, e.Revision, e.Reason, e.Err)
}

func (e *CommitError) Unwrap() error { return e.Err }

// version is one value of a name key.
type version struct {
	rev   uint64
	addrs []netip.Addr // nil: the name was deleted
	err   error        // why the value is not a valid entry
}

// seenCommit is a commit record read and not evaluated yet.
type seenCommit struct {
	c   Commit
	rev uint64
	err error
}

// rosterState is the roster side of a watcher, apart from NATS: it is fed
// the roster bucket's entries in revision order (observe), and puts a
// commit in force (evaluate) only when what it read adds up to it. It is
// not safe for concurrent use.
type rosterState struct {
	// The roster in force.
	gen, through uint64
	commitRev    uint64 // the revision of its commit record
	zones        []string
	names        view
	sum          digest

	// pending holds, per name, the values read above through, oldest
	// first: the changes no applied commit covers yet.
	pending map[string][]version
	next    *seenCommit // the newest commit record read, not evaluated yet
	lastRev uint64      // the last revision read
	// lastCommit is the revision of the newest commit record read,
	// applied or not: a watch resumed on a server that lost writes and
	// reused their revisions is noticed by it (see Watcher.session).
	lastCommit uint64
	// full is set after a reset: the next evaluation rebuilds the roster
	// from what was read instead of applying pending to the one in force.
	full bool
	// rebuild is set by distrust: the commit record in force, read again,
	// is evaluated (rebuilt from what was read) instead of skipped.
	rebuild bool
}

func newRosterState() *rosterState {
	return &rosterState{pending: map[string][]version{}, full: true}
}

// seed puts a snapshot in force, as if its commit had been applied here:
// a watcher started from another's snapshot (or its own, saved) resumes
// reading after s.Revision.
func (s *rosterState) seed(sn *Snapshot) {
	s.gen, s.through, s.commitRev, s.zones = sn.Generation, sn.Revision, sn.CommitRevision, sn.Zones
	s.names = view{base: sn.Names, n: len(sn.Names)}
	s.sum = sn.digest
	s.lastRev = sn.Revision
	s.lastCommit = sn.CommitRevision
	s.full = false
}

// snapshot returns the roster in force, nil before the first commit.
func (s *rosterState) snapshot() *Snapshot {
	if s.gen == 0 {
		return nil
	}
	return &Snapshot{Generation: s.gen, Revision: s.through, CommitRevision: s.commitRev, Zones: s.zones, Names: s.names.freeze(), digest: s.sum}
}

// reset forgets everything read, but not the roster in force: the bucket
// is read again from the start (a recreated bucket, a stream that went
// backwards, a commit that did not add up).
func (s *rosterState) reset() {
	s.pending = map[string][]version{}
	s.next = nil
	s.lastRev = 0
	s.lastCommit = 0
	s.full = true
}

// distrust is reset, trusting the roster in force no further than the
// bucket: the next commit record that adds up is put in force rebuilt from
// what was read, even the record in force (whose change then has the same
// Generation as Previous). After a recovered panic, which may have left
// the roster in force half changed.
func (s *rosterState) distrust() {
	s.reset()
	s.rebuild = true
}

// observe takes one entry of the roster bucket. Revisions at or below the
// last one read are ignored (a redelivery). A stale commit record is
// refused at once, whatever comes after it; the others wait for evaluate.
func (s *rosterState) observe(key string, rev uint64, deleted bool, value []byte) error {
	if rev <= s.lastRev {
		return nil
	}
	s.lastRev = rev
	if key == CommitKey {
		s.lastCommit = rev
		if rev < s.commitRev || rev == s.commitRev && !s.rebuild {
			return nil // history of the record in force (a re-read)
		}
		if deleted {
			return &CommitError{Revision: rev, Reason: reasonInvalid, Err: errors.New("the commit record was deleted; the roster in force stays")}
		}
		c, err := parseCommit(value)
		if err != nil {
			// Kept for evaluate unless a good record is waiting: a
			// malformed record after a good one must not hide it.
			if s.next == nil || s.next.err != nil {
				s.next = &seenCommit{rev: rev, err: err}
			}
			return nil
		}
		if err := s.stale(c, rev); err != nil {
			return err
		}
		if s.next != nil && s.next.err == nil && c.Generation <= s.next.c.Generation {
			return &CommitError{Generation: c.Generation, Revision: rev, Reason: reasonStale,
				Err: fmt.Errorf("written after generation %d (revision %d); generations never go backwards", s.next.c.Generation, s.next.rev)}
		}
		s.next = &seenCommit{c: c, rev: rev}
		return nil
	}
	name, ok := nameOf(key)
	if !ok {
		return nil // not a key of this protocol version: ignored
	}
	v := version{rev: rev}
	if !deleted {
		v.addrs, v.err = decodeName(name, value)
	}
	s.pending[name] = append(s.pending[name], v)
	return nil
}

// stale refuses a record that does not move the roster in force
// forward. The same record read again (a resumed watch) is not stale.
func (s *rosterState) stale(c Commit, rev uint64) error {
	switch {
	case s.gen == 0:
		return nil
	case c.Generation < s.gen:
		return &CommitError{Generation: c.Generation, Revision: rev, Reason: reasonStale,
			Err: fmt.Errorf("generation %d is in force; generations never go backwards", s.gen)}
	case c.Generation == s.gen && c.Revision != s.through:
		return &CommitError{Generation: c.Generation, Revision: rev, Reason: reasonStale,
			Err: fmt.Errorf("generation %d is in force already, committed through revision %d, not %d", s.gen, s.through, c.Revision)}
	case c.Revision < s.through:
		return &CommitError{Generation: c.Generation, Revision: rev, Reason: reasonStale,
			Err: fmt.Errorf("covers revisions up to %d, behind the %d of generation %d in force", c.Revision, s.through, s.gen)}
	}
	return nil
}

// evaluate applies the newest commit record read, if any, when the names
// it covers add up to its count and digest, and returns what changed (nil
// when nothing did). On error nothing changes: the roster in force stays,
// and what was read stays pending for the next record.
func (s *rosterState) evaluate() (*Change, error) {
	sc := s.next
	if sc == nil {
		return nil, nil
	}
	s.next = nil
	if sc.err != nil {
		return nil, &CommitError{Revision: sc.rev, Reason: reasonInvalid, Err: sc.err}
	}
	c := sc.c
	if err := s.stale(c, sc.rev); err != nil {
		return nil, err
	}
	if s.gen != 0 && c.Generation == s.gen && !s.rebuild {
		return nil, nil // the record in force, read again
	}
	fail := func(reason string, err error) error {
		return &CommitError{Generation: c.Generation, Revision: sc.rev, Reason: reason, Err: err}
	}

	// What the commit covers: each pending name's newest value at or
	// below c.Revision.
	type update struct {
		name  string
		addrs []netip.Addr // nil: absent
	}
	var updates []update
	var faults []error
	for name, vs := range s.pending {
		i := covered(vs, c.Revision)
		if i < 0 {
			continue
		}
		if vs[i].err != nil {
			faults = append(faults, vs[i].err)
			continue
		}
		updates = append(updates, update{name, vs[i].addrs})
	}
	if len(faults) > 0 {
		return nil, fail(reasonInvalid, spec.JoinFaults(faults...))
	}

	ch := &Change{Generation: c.Generation, Previous: s.gen, Revision: c.Revision, Set: map[string][]netip.Addr{}, Zones: c.Zones,
		ZonesChanged: !slices.Equal(c.Zones, s.zones), Full: s.full}
	sum, n := s.sum, s.names.n
	if s.full {
		// Everything read is the whole bucket: the roster in force is
		// compared with it name by name.
		sum, n = digest{}, 0
		seen := make(map[string]bool, len(updates))
		for _, u := range updates {
			seen[u.name] = true
			if u.addrs == nil {
				continue
			}
			sum.toggle(entryDigest(u.name, u.addrs))
			n++
			if old, ok := s.names.get(u.name); !ok || !slices.Equal(old, u.addrs) {
				ch.Set[u.name] = u.addrs
			}
		}
		s.names.each(func(name string, _ []netip.Addr) {
			if !seen[name] {
				ch.Removed = append(ch.Removed, name)
			}
		})
		for _, u := range updates {
			if _, ok := s.names.get(u.name); ok && u.addrs == nil {
				ch.Removed = append(ch.Removed, u.name)
			}
		}
	} else {
		for _, u := range updates {
			old, had := s.names.get(u.name)
			switch {
			case had && u.addrs != nil && slices.Equal(old, u.addrs):
				continue
			case had:
				sum.toggle(entryDigest(u.name, old))
				n--
			}
			if u.addrs == nil {
				if had {
					ch.Removed = append(ch.Removed, u.name)
				}
				continue
			}
			sum.toggle(entryDigest(u.name, u.addrs))
			n++
			ch.Set[u.name] = u.addrs
		}
	}
	want, _ := parseDigest(c.Digest) // checked by parseCommit
	if n != c.Names || sum != want {
		return nil, fail(reasonInconsistent, fmt.Errorf("read %d names with digest %s up to revision %d; the record says %d names, digest %s", n, sum, c.Revision, c.Names, c.Digest))
	}

	// Apply.
	for _, name := range ch.Removed {
		s.names.set(name, nil)
	}
	for name, addrs := range ch.Set {
		s.names.set(name, addrs)
	}
	for name, vs := range s.pending {
		i := covered(vs, c.Revision)
		if i < 0 {
			continue
		}
		if i == len(vs)-1 {
			delete(s.pending, name)
		} else {
			s.pending[name] = slices.Clone(vs[i+1:])
		}
	}
	s.gen, s.through, s.commitRev, s.zones, s.sum, s.full, s.rebuild = c.Generation, c.Revision, sc.rev, c.Zones, sum, false, false
	slices.Sort(ch.Removed)
	ch.Names = s.names.n
	return ch, nil
}

// covered returns the index of the newest of vs at or below rev, or -1.
func covered(vs []version, rev uint64) int {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].rev <= rev {
			return i
		}
	}
	return -1
}

// view is a roster's names as an immutable base (which snapshots share)
// and the changes made since.
type view struct {
	base map[string][]netip.Addr // never modified
	over map[string][]netip.Addr // changes from base; a nil list: removed
	n    int                     // names in the view
}

func (v *view) get(name string) ([]netip.Addr, bool) {
	if a, ok := v.over[name]; ok {
		return a, a != nil
	}
	a, ok := v.base[name]
	return a, ok
}

// set gives name addrs, or removes it when addrs is nil.
func (v *view) set(name string, addrs []netip.Addr) {
	_, had := v.get(name)
	if v.over == nil {
		v.over = map[string][]netip.Addr{}
	}
	if _, inBase := v.base[name]; !inBase && addrs == nil {
		delete(v.over, name)
	} else {
		v.over[name] = addrs
	}
	switch {
	case had && addrs == nil:
		v.n--
	case !had && addrs != nil:
		v.n++
	}
}

func (v *view) each(f func(string, []netip.Addr)) {
	for name, a := range v.over {
		if a != nil {
			f(name, a)
		}
	}
	for name, a := range v.base {
		if _, changed := v.over[name]; !changed {
			f(name, a)
		}
	}
}

// freeze returns the names as one map that is never modified again, and
// makes it the base: a roster handed out shares it, and the changes after
// it cost only what they change.
func (v *view) freeze() map[string][]netip.Addr {
	if len(v.over) == 0 && v.base != nil {
		return v.base
	}
	m := make(map[string][]netip.Addr, v.n)
	v.each(func(name string, a []netip.Addr) { m[name] = a })
	v.base, v.over = m, nil
	return m
}
