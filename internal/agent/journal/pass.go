package journal

import (
	"fmt"
	"slices"
	"time"
)

// PassEntry records what one reconcile pass did.
//
// Actions are what the pass planned; each says whether it was done,
// deferred by the budget, frozen or failed (Action.Done). Holds are the
// holds and freezes the pass met first (a declaration held or frozen
// applied nothing of its plan); Released those it found released
// (approved, accepted, unfrozen). A hold is journalled when it begins and
// when it ends, not at every pass it lasts. Both were added in format 4
// (an older meshhost reads such an entry as a pass without actions).
type PassEntry struct {
	Version int `json:"version"`
	// Seq is the pass's number, the one its log lines carry (pass=): given
	// by the agent, or, when 0, assigned by RecordPass.
	Seq        uint64        `json:"seq"`
	Time       time.Time     `json:"time"`
	Generation uint64        `json:"generation,omitempty"` // the declaration applied, when known
	Duration   time.Duration `json:"duration_ns"`
	Deferred   int           `json:"deferred,omitempty"`
	Actions    []Action      `json:"actions"`
	Holds      []Hold        `json:"holds,omitempty"`
	Released   []Hold        `json:"released,omitempty"`
}

// Stopped reports whether a hold of p stopped it applying its plan (a
// held declaration, a freeze; a held roster stops no container).
func (p *PassEntry) Stopped() bool {
	for _, h := range p.Holds {
		if h.Kind != HoldRoster {
			return true
		}
	}
	return false
}

// The kinds of Hold.
const (
	HoldDeclaration = "declaration" // the blast-radius hold (meshhost approve GEN)
	HoldRoster      = "roster"      // the roster guard (meshhost roster accept GEN)
	HoldFrozen      = "frozen"      // meshhost freeze (meshhost unfreeze)
)

// Hold is a hold or a freeze a pass met.
type Hold struct {
	Kind string `json:"kind"` // HoldDeclaration, HoldRoster or HoldFrozen
	// Generation is the declaration held (HoldDeclaration) or the newest
	// roster held (HoldRoster).
	Generation uint64 `json:"generation,omitempty"`
	// Served is the roster generation that keeps serving (HoldRoster).
	Served uint64 `json:"served,omitempty"`
	// Replacements and Removals count what the held declaration would do
	// (HoldDeclaration).
	Replacements int `json:"replacements,omitempty"`
	Removals     int `json:"removals,omitempty"`
	// Reason is the freeze's reason (HoldFrozen).
	Reason string `json:"reason,omitempty"`
}

// Command is the operator's command that releases h.
func (h Hold) Command() string {
	switch h.Kind {
	case HoldDeclaration:
		return fmt.Sprintf("meshhost approve %d", h.Generation)
	case HoldRoster:
		return fmt.Sprintf("meshhost roster accept %d", h.Generation)
	case HoldFrozen:
		return "meshhost unfreeze"
	}
	return ""
}

// Released says that h was released, for the history.
func (h Hold) Released() string {
	switch h.Kind {
	case HoldDeclaration:
		return fmt.Sprintf("declaration %d released (approved, or no longer held)", h.Generation)
	case HoldRoster:
		return fmt.Sprintf("roster hold released (roster %d accepted, or superseded)", h.Generation)
	case HoldFrozen:
		return "unfrozen"
	}
	return h.Kind + " released"
}

// String says what h holds, for the history.
func (h Hold) String() string {
	switch h.Kind {
	case HoldDeclaration:
		return fmt.Sprintf("declaration %d held (%d replacements, %d removals)", h.Generation, h.Replacements, h.Removals)
	case HoldRoster:
		return fmt.Sprintf("roster %d held (roster %d keeps serving)", h.Generation, h.Served)
	case HoldFrozen:
		if h.Reason != "" {
			return fmt.Sprintf("frozen (%s)", h.Reason)
		}
		return "frozen"
	}
	return h.Kind + " held"
}

// Action is one action of a pass.
type Action struct {
	Kind      string        `json:"kind"`
	Container string        `json:"container"`
	Reason    string        `json:"reason,omitempty"`
	ID        string        `json:"id,omitempty"`
	NewID     string        `json:"new_id,omitempty"`
	Deferred  bool          `json:"deferred,omitempty"`
	Frozen    bool          `json:"frozen,omitempty"` // not begun: the machine froze mid-pass
	Err       string        `json:"error,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// Done reports whether a was carried out: neither deferred, frozen nor
// failed.
func (a Action) Done() bool { return !a.Deferred && !a.Frozen && a.Err == "" }

// RecordPass records p, giving it the next sequence number, and returns it
// as stored.
func (j *Journal) RecordPass(p PassEntry) (PassEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if p.Seq < j.nextSeq {
		p.Seq = j.nextSeq
	}
	p.Version = Version
	p.Time = p.Time.UTC()
	if err := j.writeLocked(passesDir, p.Seq, p); err != nil {
		return PassEntry{}, err
	}
	j.nextSeq = p.Seq + 1
	return p, nil
}

// HoldsInForce returns the holds the journal's passes leave in force:
// each one journalled and not released since, oldest first.
func HoldsInForce(passes []PassEntry) []Hold {
	var in []Hold
	for _, p := range passes {
		in = slices.DeleteFunc(in, func(h Hold) bool { return slices.Contains(p.Released, h) })
		for _, h := range p.Holds {
			if !slices.Contains(in, h) {
				in = append(in, h)
			}
		}
	}
	return in
}

// LastPass returns the number of the newest pass recorded, 0 for none:
// an agent numbers its passes on from it.
func (j *Journal) LastPass() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.nextSeq - 1
}

// Passes returns every pass entry held, oldest first.
func (j *Journal) Passes() ([]PassEntry, error) {
	return decodeAll[PassEntry](j, passesDir)
}
