package declsource

import (
	"errors"
	"net/netip"

	"github.com/meshhost/meshhost/internal/admit"
)

// Refusal says why a declaration was refused, as
// meshhost_agent_declarations_refused_total counts it (admit.Reason).
type Refusal = admit.Reason

// The refusals, as package admit names and documents them.
const (
	RefusedInvalid                = admit.Invalid
	RefusedTooLarge               = admit.TooLarge
	RefusedOtherMachine           = admit.OtherMachine
	RefusedOlder                  = admit.Older
	RefusedGenerationReused       = admit.GenerationReused
	RefusedRosterOlder            = admit.RosterOlder
	RefusedRosterGenerationReused = admit.RosterGenerationReused
	RefusedDeltaBase              = admit.DeltaBase
)

// ErrConflict is matched (errors.Is) by every refusal of a declaration that
// contradicts what is in force (admit.ErrConflict): the push endpoint
// answers 409.
var ErrConflict = admit.ErrConflict

// ConflictError is a refusal, each fault naming a path of the refused
// document (admit.Error).
type ConflictError = admit.Error

// refused is a refusal of the document itself (too large), and why.
type refused struct {
	why Refusal
	err error
}

func (r *refused) Error() string { return r.err.Error() }
func (r *refused) Unwrap() error { return r.err }

// refusalOf classifies an error of Offer.
func refusalOf(err error) Refusal {
	var r *refused
	if errors.As(err, &r) {
		return r.why
	}
	return admit.ReasonOf(err, RefusedInvalid)
}

// faultList is a list of faults being built (admit.Faults).
type faultList = admit.Faults

// addrList writes addresses as a fault shows them (admit.AddrList).
func addrList(addrs []netip.Addr) string { return admit.AddrList(addrs) }
