package declsource

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// TestDeltaNamesLimit: a delta may not grow the roster in force past
// spec.MaxNames names (a delta adding a million names to a roster of one
// was accepted), whichever source it comes from; the refusal names the
// path and the limit, and the roster in force stays.
func TestDeltaNamesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a million names take seconds")
	}
	s := New(Config{Machine: "ace"})
	if _, err := s.Offer([]byte(genDoc(1, 1, namesA, "busybox:1", "pw")), "test"); err != nil {
		t.Fatal(err)
	}
	addr := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	d := &spec.RosterDelta{From: 1, To: 2, Set: make(map[string][]netip.Addr, spec.MaxNames)}
	for i := range spec.MaxNames - 1 {
		d.Set[fmt.Sprintf("n%d.internal", i)] = addr
	}
	err := s.PutRosterDelta("ace", 1, d, "nats")
	want := []spec.FieldError{{Path: "roster_delta.set", Reason: fmt.Sprintf("the roster would hold %d names after this delta (2 before); at most %d", spec.MaxNames+1, spec.MaxNames)}}
	if diff := cmp.Diff(want, spec.Faults(err)); diff != "" {
		t.Errorf("PutRosterDelta(+%d names to 2) faults (-want +got):\n%s", len(d.Set), diff)
	}
	if cur, _ := s.Current(); cur.Roster.Generation != 1 || len(cur.Roster.Names) != 2 {
		t.Errorf("in force after the refusal: roster %d with %d names, want 1 with 2", cur.Roster.Generation, len(cur.Roster.Names))
	}
	delete(d.Set, "n0.internal")
	if err := s.PutRosterDelta("ace", 1, d, "nats"); err != nil {
		t.Errorf("PutRosterDelta(up to the limit) = %v", err)
	}
}
