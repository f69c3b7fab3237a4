package admit

import (
	"fmt"

	"github.com/meshhost/meshhost/spec"
)

// Rollback judges re-issuing old, a declaration the journal holds, over
// cur, the declaration in force, and returns the declaration to push: old's
// containers and mesh_names under generation newest+1 (newest: the newest
// generation the machine has seen, cur's or journaled), with cur's roster
// (a roster never goes back: names would return to old addresses). It is
// a local override: the controller's declarations up to its generation are
// refused (Declaration), and its first one above supersedes it. Refused
// for another machine's declaration, or when the result is not valid.
func Rollback(old, cur *spec.Declaration, newest uint64) (*spec.Declaration, Decision) {
	if old.Machine != cur.Machine {
		return nil, refuse(OtherMachine, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("declaration %d is for machine %q; the one in force is for %q", old.Generation, old.Machine, cur.Machine)})
	}
	next := *old
	next.Generation = max(newest, cur.Generation) + 1
	next.Roster = cur.Roster
	next.Schema = spec.SchemaVersion
	if err := next.Validate(); err != nil {
		return nil, refuse(Invalid, &spec.FieldError{Reason: fmt.Sprintf("declaration %d re-issued as %d: %v", old.Generation, next.Generation, err)})
	}
	return &next, accept
}

// Approve judges an operator's approval of declaration generation gen,
// given held, the generation the blast-radius hold keeps back (0: none).
// Only the declaration held may be approved: an approval of any other
// would wait for it, and let a future push of that generation skip the
// hold unseen. nothing says, when nothing is held, what is known
// ("nothing is (meshhost status)").
func Approve(gen, held uint64, nothing string) Decision {
	switch {
	case held == 0:
		return refuse(NotHeld, &spec.FieldError{Reason: fmt.Sprintf("declaration %d is not held: %s", gen, nothing)})
	case held != gen:
		return refuse(NotHeld, &spec.FieldError{Reason: fmt.Sprintf("declaration %d is not held: the declaration held is %d (meshhost status shows what it would change)", gen, held)})
	}
	return accept
}

// AcceptCovers says whether an accept of roster generation gen covers the
// guard's hold of the change from roster generation served to newest: the
// rule the pass releases by, and AcceptRoster admits by.
func AcceptCovers(served, newest, gen uint64) bool {
	return served < gen && gen <= newest
}

// AcceptRoster judges an operator's accept of roster generation gen, given
// whether the guard holds a shrink, from roster generation served to
// newest. Only a generation the guard holds may be accepted: an accept of
// any other would release nothing now, and could let a future shrink of
// that generation through unseen.
func AcceptRoster(gen uint64, holding bool, served, newest uint64) Decision {
	switch {
	case !holding:
		return refuse(NotHeld, &spec.FieldError{Reason: fmt.Sprintf("roster generation %d is not held: no roster is held, so there is nothing to accept (meshhost status)", gen)})
	case !AcceptCovers(served, newest, gen):
		return refuse(NotHeld, &spec.FieldError{Reason: fmt.Sprintf("roster generation %d is not held: the guard holds the change from roster generation %d to %d; accept one of %d to %d (meshhost roster diff %d %d shows it)",
			gen, served, newest, served+1, newest, served, newest)})
	}
	return accept
}
