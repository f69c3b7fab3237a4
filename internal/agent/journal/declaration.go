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
	// Declaration is the whole declaration, in the format
	// specjson.ParseDeclaration reads: values of env and labels included,
	// which is why the journal's files are the owner's alone (0600, in
	// directories of mode 0700). Summary leaves it out.
	Declaration json.RawMessage `json:"declaration,omitempty"`
}

// Summary is e without the declaration's document: what `meshhost history`
// shows. The document holds env and label values, which may be secrets,
// and a roster of up to a million names.
func (e DeclarationEntry) Summary() DeclarationEntry {
	e.Declaration = nil
	return e
}

// RecordDeclaration records d as applied at time at, with its roster's
// change from the last declaration recorded. Recording the generation last
// recorded again does nothing and returns that entry; an older generation
// is refused, since generations never go backwards.
func (j *Journal) RecordDeclaration(d *spec.Declaration, at time.Time) (DeclarationEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	gens, err := j.keys(declarationsDir)
	if err != nil {
		return DeclarationEntry{}, err
	}
	var prev *spec.Roster
	if len(gens) > 0 {
		last := gens[len(gens)-1]
		switch {
		case d.Generation == last:
			var e DeclarationEntry
			err := j.read(declarationsDir, last, &e)
			return e, err
		case d.Generation < last:
			return DeclarationEntry{}, fmt.Errorf("recording declaration %d: the journal already holds %d: %w", d.Generation, last, ErrOlderGeneration)
		}
		pd, err := j.declaration(last)
		if err != nil {
			return DeclarationEntry{}, err
		}
		prev = pd.Roster
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return DeclarationEntry{}, fmt.Errorf("recording declaration %d: %w", d.Generation, err)
	}
	e := DeclarationEntry{
		Version: Version, Time: at.UTC(), Machine: d.Machine, Generation: d.Generation,
		MeshNames: string(d.MeshNames), Containers: len(d.Containers),
		RosterDiff: RosterDiff(prev, d.Roster), Declaration: raw,
	}
	if d.Roster != nil {
		e.RosterGeneration = d.Roster.Generation
	}
	return e, j.writeLocked(declarationsDir, d.Generation, e)
}

// Declarations returns every declaration entry held, oldest first.
func (j *Journal) Declarations() ([]DeclarationEntry, error) {
	gens, err := j.keys(declarationsDir)
	if err != nil {
		return nil, err
	}
	out := make([]DeclarationEntry, 0, len(gens))
	for _, g := range gens {
		var e DeclarationEntry
		if err := j.read(declarationsDir, g, &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Declaration returns the declaration of generation gen.
func (j *Journal) Declaration(gen uint64) (*spec.Declaration, error) {
	return j.declaration(gen)
}

func (j *Journal) declaration(gen uint64) (*spec.Declaration, error) {
	var e DeclarationEntry
	if err := j.read(declarationsDir, gen, &e); err != nil {
		return nil, fmt.Errorf("declaration %d: %w", gen, err)
	}
	d, err := specjson.ParseDeclaration(e.Declaration)
	if err != nil {
		return nil, fmt.Errorf("declaration %d in the journal: %w", gen, err)
	}
	return d, nil
}

// Roster returns the roster of generation gen (a roster generation, as
// `meshhost roster diff A B` names them), from the newest declaration that
// carried it.
func (j *Journal) Roster(gen uint64) (*spec.Roster, error) {
	decls, err := j.Declarations()
	if err != nil {
		return nil, err
	}
	for _, e := range slices.Backward(decls) {
		if e.RosterGeneration == gen {
			d, err := j.declaration(e.Generation)
			if err != nil {
				return nil, err
			}
			return d.Roster, nil
		}
	}
	return nil, fmt.Errorf("roster %d: %w", gen, ErrNotFound)
}
