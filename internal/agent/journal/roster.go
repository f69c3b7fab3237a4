package journal

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// RosterEntry records a roster the machine applied without a new
// declaration: the roster moved alone, the declaration's generation
// unchanged (a NATS roster change; a roster put with the generation of the
// declaration in force). It is named by its roster generation and holds
// the roster's diff alone, so that it costs the names that changed.
type RosterEntry struct {
	Version int       `json:"version"`
	Time    time.Time `json:"time"`
	Machine string    `json:"machine"`
	// Generation is the declaration in force, whose roster moved.
	Generation       uint64 `json:"generation"`
	RosterGeneration uint64 `json:"roster_generation"`
	// RosterDiff is the roster's change from the one recorded before it
	// (by a declaration entry or a roster entry).
	RosterDiff Diff `json:"roster_diff"`
}

// RecordRoster records that the roster of declaration generation gen, on
// machine, moved alone by diff (Diff.Unknown when the caller could not
// tell what changed), at time at. The entry is named by diff.To, the
// roster generation in force after the move. Recording the roster
// generation last recorded again does nothing and returns that entry; an
// older one is refused (ErrOlderGeneration).
func (j *Journal) RecordRoster(machine string, gen uint64, diff Diff, at time.Time) (RosterEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	last, any, err := j.lastLocked(rostersDir)
	if err != nil {
		return RosterEntry{}, err
	}
	if any {
		switch {
		case diff.To == last:
			var e RosterEntry
			err := j.read(rostersDir, last, &e)
			return e, err
		case diff.To < last:
			return RosterEntry{}, fmt.Errorf("recording roster %d: the journal already holds %d: %w", diff.To, last, ErrOlderGeneration)
		}
	}
	e := RosterEntry{Version: Version, Time: at.UTC(), Machine: machine, Generation: gen, RosterGeneration: diff.To, RosterDiff: diff}
	return e, j.writeLocked(rostersDir, diff.To, e)
}

// Rosters returns every roster entry held, oldest first.
func (j *Journal) Rosters() ([]RosterEntry, error) {
	return decodeAll[RosterEntry](j, rostersDir)
}

// link is one step of the roster's history: the roster generation an
// entry of either kind carried, and its diff from the step before.
type link struct {
	gen  uint64
	diff Diff
}

// chain returns the roster's history the journal holds: its declaration
// and roster entries, in the order the rosters were applied. Roster
// generations never go backwards, so that is their order; of the entries
// carrying one generation, the one that moved to it comes first.
func (j *Journal) chain() ([]link, error) {
	decls, err := j.Declarations()
	if err != nil {
		return nil, err
	}
	rosters, err := j.Rosters()
	if err != nil {
		return nil, err
	}
	out := make([]link, 0, len(decls)+len(rosters))
	for _, e := range decls {
		out = append(out, link{e.RosterGeneration, e.RosterDiff})
	}
	for _, e := range rosters {
		out = append(out, link{e.RosterGeneration, e.RosterDiff})
	}
	moved := func(l link) int { // 0: moved to l.gen; 1: stayed there
		if l.diff.Unknown || l.diff.From != l.gen {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b link) int {
		return cmp.Or(cmp.Compare(a.gen, b.gen), cmp.Compare(moved(a), moved(b)))
	})
	return out, nil
}
