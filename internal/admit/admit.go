package admit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Verdict is what a Decision says of an input.
type Verdict int

const (
	// Accepted: the input is newer and agrees with what is in force; put
	// it in force.
	Accepted Verdict = iota
	// Same: the input is what is in force again (the same push twice, a
	// touched file, a retried commit): no fault, and nothing changes.
	Same
	// Refused: see the Decision's Reason and Faults.
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Same:
		return "same"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Reason says why an input was refused. The values are metric labels and
// wire values: they never change.
type Reason string

const (
	// Invalid: a fault in the document, or a delta past its limits (HTTP 400).
	Invalid Reason = "invalid"
	// TooLarge: the document is over spec.MaxDocumentBytes (HTTP 413).
	TooLarge Reason = "too_large"
	// OtherMachine: the declaration is another machine's (HTTP 400).
	OtherMachine Reason = "other_machine"
	// Older: its generation is older than the one in force (HTTP 409).
	Older Reason = "older_generation"
	// GenerationReused: the generation in force, with other content (HTTP
	// 409). The same document again is Same.
	GenerationReused Reason = "generation_reused"
	// RosterOlder: its roster is older than the one served or the one in
	// force (HTTP 409).
	RosterOlder Reason = "roster_older"
	// RosterGenerationReused: its roster has the generation of the one
	// served (or in force) with other names (HTTP 409).
	RosterGenerationReused Reason = "roster_generation_reused"
	// DeltaBase: a delta that does not apply to the roster in force
	// (ErrDeltaBase, HTTP 409): the sender sends the whole roster or
	// declaration.
	DeltaBase Reason = "delta_base"
	// NotHeld: an operator's approve or roster accept of a generation that
	// is not held.
	NotHeld Reason = "not_held"
)

// Reasons lists the reasons a declaration is refused for, in the order of
// the metric's help text (NotHeld is an operator's, and not counted there).
var Reasons = []Reason{Invalid, TooLarge, OtherMachine, Older, GenerationReused, RosterOlder, RosterGenerationReused, DeltaBase}

// Decision is the verdict on one input.
type Decision struct {
	Verdict Verdict
	// Reason is why it was refused; empty unless Refused.
	Reason Reason
	// Faults name each field and the fix; empty unless Refused.
	Faults []*spec.FieldError
	// RosterOnly: Accepted, but only the roster moves; the declaration in
	// force stays (Parts: an older declaration under a local rollback,
	// with a newer roster).
	RosterOnly bool
}

var (
	accept = Decision{Verdict: Accepted}
	same   = Decision{Verdict: Same}
)

func refuse(why Reason, faults ...*spec.FieldError) Decision {
	return Decision{Verdict: Refused, Reason: why, Faults: faults}
}

// Err returns the refusal as an *Error; nil unless Refused.
func (d Decision) Err() error {
	if d.Verdict != Refused {
		return nil
	}
	return &Error{Reason: d.Reason, Faults: d.Faults}
}

// ErrConflict is matched (errors.Is) by every refusal of an input that
// contradicts what is in force (Older, GenerationReused, RosterOlder,
// RosterGenerationReused): the push endpoint answers 409. A generation
// names one declaration, and one roster: a changed one needs a newer
// generation, or a machine would silently keep what the controller
// believes it changed.
var ErrConflict = errors.New("the declaration contradicts what is in force")

// ErrStale is matched by the refusal of an input whose generation, or
// roster generation, is older than the one in force (Older, RosterOlder).
var ErrStale = errors.New("declaration generation is older than the one in force")

// ErrDeltaBase is matched by a DeltaBase refusal: a delta from another
// roster generation than the one in force, or none in force yet. It
// matches spec.ErrDeltaBase too, so that a source that knows only spec
// tells it from other refusals.
var ErrDeltaBase error = deltaBase{}

type deltaBase struct{}

func (deltaBase) Error() string        { return "the roster delta does not apply to the roster in force" }
func (deltaBase) Is(target error) bool { return target == spec.ErrDeltaBase }

// Error is a refusal, each fault naming a path of the refused input. It
// matches ErrConflict, ErrStale and ErrDeltaBase by its Reason.
type Error struct {
	Reason Reason
	Faults []*spec.FieldError
}

func (e *Error) Error() string {
	s := make([]string, len(e.Faults))
	for i, f := range e.Faults {
		s[i] = f.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the faults, so that every one is reported.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Faults))
	for i, f := range e.Faults {
		out[i] = f
	}
	return out
}

// Is matches ErrConflict for a conflict with what is in force, ErrStale
// for an older declaration or roster, ErrDeltaBase (and spec.ErrDeltaBase)
// for a delta from another base.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrConflict:
		return e.Reason == Older || e.Reason == GenerationReused || e.Reason == RosterOlder || e.Reason == RosterGenerationReused
	case ErrStale:
		return e.Reason == Older || e.Reason == RosterOlder
	case ErrDeltaBase, spec.ErrDeltaBase:
		return e.Reason == DeltaBase
	}
	return false
}

// ReasonOf returns the Reason of err: an *Error's, else fallback.
func ReasonOf(err error, fallback Reason) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return fallback
}

// maxFaults bounds the faults a refusal lists (spec.MaxFaults); the last
// says how many more.
const maxFaults = spec.MaxFaults

// Faults is a list of faults being built.
type Faults []*spec.FieldError

// Add appends a fault at path.
func (l *Faults) Add(path, format string, args ...any) {
	*l = append(*l, &spec.FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// Bounded returns the list, at most spec.MaxFaults long.
func (l Faults) Bounded() []*spec.FieldError {
	if len(l) <= maxFaults {
		return l
	}
	more := len(l) - maxFaults + 1
	return append(l[:maxFaults-1:maxFaults-1], &spec.FieldError{Reason: fmt.Sprintf("and %d more differences", more)})
}
