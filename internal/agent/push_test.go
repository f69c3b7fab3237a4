package agent

import (
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/testkit/decltest"
)

// pushCase is one row of a push table: the documents pushed first (each
// taken, each followed by a pass), then the one judged, with the verdict
// wanted of it and, when taken, what the pass after it must leave.
type pushCase struct {
	name   string
	before []decltest.Doc
	push   decltest.Doc
	want   decltest.Verdict

	// After the pass (when taken):
	wantRoster     uint64    // the roster generation the resolver serves (0: not checked)
	wantRosterHeld string    // what the report's roster hold says ("": no roster held)
	wantHeld       *heldWant // the declaration hold (nil: none)
	wantReplaced   int       // containers the pass replaced
	wantContainers int       // containers the runtime has after it (0: not checked)
}

// heldWant is the declaration hold a push case wants.
type heldWant struct {
	replacements, removals int
	reason                 []string // words the first replacement's reason has
}

// runPush runs tc on the fixture f and returns the report of the pass
// after the push (nil when the push was refused).
func runPush(t *testing.T, f *fixture, tc pushCase) *Report {
	t.Helper()
	for _, d := range tc.before {
		f.push(t, d.JSON())
	}
	before := ids(f.rt)
	decltest.Offer(t, f.source, tc.push, tc.want)
	if tc.want != decltest.Taken {
		return nil
	}
	rep := f.pass(t)
	if tc.wantRoster != 0 && f.srv.Roster().Generation != tc.wantRoster {
		t.Errorf("the resolver serves roster %d, want %d", f.srv.Roster().Generation, tc.wantRoster)
	}
	if tc.wantRosterHeld == "" && rep.RosterHeld != "" || !strings.Contains(rep.RosterHeld, tc.wantRosterHeld) {
		t.Errorf("roster held %q, want %q", rep.RosterHeld, tc.wantRosterHeld)
	}
	switch h := tc.wantHeld; {
	case h == nil && rep.Held.Held():
		t.Errorf("declaration held: %+v, want no hold", rep.Held)
	case h == nil:
	case !rep.Held.Held() || len(rep.Held.Replacements) != h.replacements || len(rep.Held.Removals) != h.removals:
		t.Fatalf("declaration hold %+v, want %d replacements and %d removals held", rep.Held, h.replacements, h.removals)
	default:
		for _, w := range h.reason {
			if r := rep.Held.Replacements[0].Reason; !strings.Contains(r, w) {
				t.Errorf("the first replacement's reason %q does not say %q", r, w)
			}
		}
	}
	after := ids(f.rt)
	if n := replaced(before, after); n != tc.wantReplaced {
		t.Errorf("the pass replaced %d containers, want %d", n, tc.wantReplaced)
	}
	if tc.wantContainers != 0 && len(after) != tc.wantContainers {
		t.Errorf("%d containers after the pass, want %d", len(after), tc.wantContainers)
	}
	return rep
}
