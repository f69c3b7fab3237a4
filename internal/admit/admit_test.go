package admit

import (
	"errors"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestRefusalsMatchTheirSentinels: a refusal matches ErrConflict when it
// contradicts what is in force, ErrStale when it is older, ErrDeltaBase
// (and spec.ErrDeltaBase) when its base is another: what the push
// endpoint's status and the NATS source's retries branch on.
func TestRefusalsMatchTheirSentinels(t *testing.T) {
	for _, tc := range []struct {
		r                      Reason
		conflict, stale, based bool
	}{
		{Invalid, false, false, false},
		{TooLarge, false, false, false},
		{OtherMachine, false, false, false},
		{Older, true, true, false},
		{GenerationReused, true, false, false},
		{RosterOlder, true, true, false},
		{RosterGenerationReused, true, false, false},
		{DeltaBase, false, false, true},
		{NotHeld, false, false, false},
	} {
		err := refuse(tc.r, &spec.FieldError{Path: "generation", Reason: "x"}).Err()
		if got := errors.Is(err, ErrConflict); got != tc.conflict {
			t.Errorf("%s: Is(ErrConflict) = %v", tc.r, got)
		}
		if got := errors.Is(err, ErrStale); got != tc.stale {
			t.Errorf("%s: Is(ErrStale) = %v", tc.r, got)
		}
		if got := errors.Is(err, ErrDeltaBase) && errors.Is(err, spec.ErrDeltaBase); got != tc.based {
			t.Errorf("%s: Is(ErrDeltaBase) = %v", tc.r, got)
		}
		if got := ReasonOf(err, ""); got != tc.r {
			t.Errorf("ReasonOf = %q, want %q", got, tc.r)
		}
	}
	if err := (Decision{Verdict: Same}).Err(); err != nil {
		t.Errorf("Same.Err() = %v, want nil", err)
	}
}
