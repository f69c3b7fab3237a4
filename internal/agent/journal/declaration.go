package journal

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// DeclarationEntry records one declaration the machine applied.
type DeclarationEntry struct {
	Version          int       `json:"version"`
	Time             time.Time `json:"time"`
	Machine          string    `json:"machine"`
	Generation       uint64    `json:"generation"`
	RosterGeneration uint64    `json:"roster_generation"`
	MeshNames        string    `json:"mesh_names"`
	Containers       int       `json:"containers"`
	// RosterDiff is the roster's change from the declaration recorded
	// before this one.
	RosterDiff Diff `json:"roster_diff"`
	// RosterServed is set when the roster guard held RosterGeneration as
	// the declaration was applied: the roster generation that kept serving
	// (meshhost roster accept releases it). Added in format 4; 0 for none.
	RosterServed uint64 `json:"roster_served,omitempty"`
	// Declaration is the declaration, in the format
	// specjson.ParseDeclaration reads: whole in version 1 entries; from
	// version 2 on without its roster's names (the roster's history is
	// the chain of RosterDiff), so that it costs the containers, not the
	// roster. It holds values of env and labels, which is why the
	// journal's files are the owner's alone (0600, in directories of mode
	// 0700). Summary leaves it out.
	Declaration json.RawMessage `json:"declaration,omitempty"`
}

// Summary is e without the declaration's document: what `meshhost history`
// shows. The document holds env and label values, which may be secrets,
// and a roster of up to a million names.
func (e DeclarationEntry) Summary() DeclarationEntry {
	e.Declaration = nil
	return e
}

// RecordDeclaration records d (its roster's names are not read) as applied
// at time at, with diff, its roster's change from the declaration recorded
// last (Diff.Unknown when the caller could not tell). It costs what
// changed, not the roster. Recording the generation last recorded again
// does nothing and returns that entry; an older generation is refused,
// since generations never go backwards.
func (j *Journal) RecordDeclaration(d *spec.Declaration, diff Diff, at time.Time) (DeclarationEntry, error) {
	return j.RecordDeclarationServing(d, diff, at, 0)
}

// RecordDeclarationServing is RecordDeclaration for a declaration whose
// roster the roster guard holds while roster generation served keeps
// serving (0: none held): the entry says so (RosterServed), and never
// shows the roster held as in force.
func (j *Journal) RecordDeclarationServing(d *spec.Declaration, diff Diff, at time.Time, served uint64) (DeclarationEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	last, any, err := j.lastLocked(declarationsDir)
	if err != nil {
		return DeclarationEntry{}, err
	}
	if any {
		switch {
		case d.Generation == last:
			var e DeclarationEntry
			err := j.read(declarationsDir, last, &e)
			return e, err
		case d.Generation < last:
			return DeclarationEntry{}, fmt.Errorf("recording declaration %d: the journal already holds %d: %w", d.Generation, last, ErrOlderGeneration)
		}
	}
	doc := *d
	if d.Roster != nil {
		r := *d.Roster
		r.Names = nil // the roster's history is RosterDiff's chain
		doc.Roster = &r
	}
	raw, err := json.Marshal(&doc)
	if err != nil {
		return DeclarationEntry{}, fmt.Errorf("recording declaration %d: %w", d.Generation, err)
	}
	e := DeclarationEntry{
		Version: Version, Time: at.UTC(), Machine: d.Machine, Generation: d.Generation,
		MeshNames: string(d.MeshNames), Containers: len(d.Containers), RosterDiff: diff,
		RosterServed: served, Declaration: raw,
	}
	if d.Roster != nil {
		e.RosterGeneration = d.Roster.Generation
	}
	return e, j.writeLocked(declarationsDir, d.Generation, e)
}

// LastGeneration returns the generation of the newest declaration
// recorded, and false when none is.
func (j *Journal) LastGeneration() (uint64, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastLocked(declarationsDir)
}

// Declaration returns the declaration of generation gen, as recorded: its
// containers and migration flag, and its roster's generation and zones;
// the roster's names only from an entry of version 1 (meshhost rollback
// re-issues the containers with the roster in force).
func (j *Journal) Declaration(gen uint64) (*spec.Declaration, error) {
	var e DeclarationEntry
	if err := j.read(declarationsDir, gen, &e); err != nil {
		return nil, fmt.Errorf("declaration %d: %w", gen, err)
	}
	if len(e.Declaration) == 0 {
		return nil, fmt.Errorf("declaration %d: the journal holds its summary only", gen)
	}
	d, err := specjson.ParseDeclaration(e.Declaration)
	if err != nil {
		return nil, fmt.Errorf("declaration %d in the journal: %w", gen, err)
	}
	return d, nil
}

// Declarations returns every declaration entry held, oldest first.
func (j *Journal) Declarations() ([]DeclarationEntry, error) {
	return decodeAll[DeclarationEntry](j, declarationsDir)
}

// RosterDiff returns what changed from roster generation a to roster
// generation b (as `meshhost roster diff A B` names them), by composing
// the diffs the journal holds between them, of declaration entries and
// roster entries alike: it costs the names that changed, not the rosters.
// Either generation must be one an entry held carried, or one an entry's
// diff starts from; a later than b gives the change back
// from a to b. A change between them that was not recorded (Diff.Unknown,
// or entries pruned of one kind and not the other) is ErrNotFound.
func (j *Journal) RosterDiff(a, b uint64) (Diff, error) {
	chain, err := j.chain()
	if err != nil {
		return Diff{}, err
	}
	// pos is where a roster generation is in the chain: after entry i
	// (the last one carrying it), or, for one only a diff starts from,
	// before that entry (i-1; -1 before the first).
	pos := func(gen uint64) (int, error) {
		for i, l := range slices.Backward(chain) {
			if l.gen == gen {
				return i, nil
			}
		}
		for i, l := range chain {
			if l.diff.From == gen && !l.diff.Unknown {
				return i - 1, nil
			}
		}
		return 0, fmt.Errorf("roster %d: %w", gen, ErrNotFound)
	}
	pa, err := pos(a)
	if err != nil {
		return Diff{}, err
	}
	pb, err := pos(b)
	if err != nil {
		return Diff{}, err
	}
	lo, hi, start, end := pa, pb, a, b
	if pb < pa {
		lo, hi, start, end = pb, pa, b, a
	}
	d := Diff{From: start, To: start}
	for _, l := range chain[lo+1 : hi+1] {
		switch {
		case l.diff.Unknown:
			return Diff{}, fmt.Errorf("roster %d to %d: the change to roster %d was not recorded: %w", a, b, l.gen, ErrNotFound)
		case l.diff.From != d.To:
			return Diff{}, fmt.Errorf("roster %d to %d: the change from roster %d to %d was not recorded: %w", a, b, d.To, l.diff.From, ErrNotFound)
		}
		d = d.Then(l.diff)
	}
	if d.To != end {
		return Diff{}, fmt.Errorf("roster %d to %d: the change from roster %d to %d was not recorded: %w", a, b, d.To, end, ErrNotFound)
	}
	if pa > pb {
		d = d.Reverse()
	}
	d.From, d.To = a, b
	return d, nil
}
