package declsource

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/spec"
)

// TestDeltaGenerationsCannotLie: a declaration delta with the generation
// in force and the roster generation in force is the same push again only
// if it makes the roster in force: then 200, and nothing changes. Any
// other is refused as a whole declaration is (409, generation_reused,
// counted), each fault naming an entry that differs; it was answered 200
// and dropped, so the controller believed a name had moved that never
// did.
func TestDeltaGenerationsCannotLie(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(Config{Machine: "ace", Registerer: reg})
	if _, err := s.Offer([]byte(genDoc(1, 1, namesA, "busybox:1", "pw")), "test"); err != nil {
		t.Fatal(err)
	}
	pushed := deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.1", "10.5.5.2"]`, "b.internal")
	if _, err := s.Offer([]byte(pushed), "push"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	reused := "generation: 2 is in force with roster generation 2, which this delta would make otherwise; a changed declaration needs a newer generation"
	for _, tc := range []struct {
		name string
		doc  string
		want []string // the faults, in order; nil: accepted
	}{
		{name: "the same delta again", doc: pushed},
		{name: "the same delta, addresses in another order", doc: deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.2", "10.5.5.1"]`, "b.internal")},
		{name: "another address", doc: deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.9"]`, "b.internal"),
			want: []string{reused, `roster_delta.set["x.internal"]: 10.5.5.9 here, 10.5.5.1,10.5.5.2 in force`}},
		{name: "one name more", doc: deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.1", "10.5.5.2"], "y.internal": ["10.0.0.7"]`, "b.internal"),
			want: []string{reused, `roster_delta.set["y.internal"]: 10.0.0.7 here; not in roster generation 2 in force`}},
		{name: "a removal left out", doc: deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.1", "10.5.5.2"]`),
			want: []string{reused, `roster_delta: does not remove "b.internal" (10.0.0.2); roster generation 2 in force removed it`}},
		{name: "a name left out", doc: deltaDoc(2, 1, 2, ``, "b.internal"),
			want: []string{reused, `roster_delta: does not set "x.internal"; roster generation 2 in force has it at 10.5.5.1,10.5.5.2`}},
		{name: "another removal", doc: deltaDoc(2, 1, 2, `"x.internal": ["10.5.5.1", "10.5.5.2"]`, "a.internal", "b.internal"),
			want: []string{reused, `roster_delta.remove[0]: "a.internal" is removed here; roster generation 2 in force has it (10.0.0.1)`}},
		{name: "from another roster", doc: deltaDoc(2, 0, 2, `"x.internal": ["10.5.5.1", "10.5.5.2"]`, "b.internal"),
			want: []string{reused, "roster_delta.from: 0 here; roster generation 2 in force was made from generation 1"}},
		{name: "other zones", doc: strings.Replace(pushed, `"set"`, `"zones": ["mesh"], "set"`, 1),
			want: []string{reused, "roster_delta.zones: [mesh] here, [internal] in force"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(t, reg)[string(RefusedGenerationReused)]
			code, body := put(t, srv.URL, tc.doc)
			wantCode := http.StatusOK
			if tc.want != nil {
				wantCode = http.StatusConflict
			}
			if code != wantCode {
				t.Fatalf("PUT = %d, want %d\n%s", code, wantCode, body)
			}
			if tc.want != nil {
				lines := faultLines(body)
				if diff := cmp.Diff(tc.want, lines); diff != "" {
					t.Errorf("the refusal's faults (-want +got):\n%s", diff)
				}
			}
			wantCount := before
			if tc.want != nil {
				wantCount++
			}
			if got := refusedCounts(t, reg)[string(RefusedGenerationReused)]; got != wantCount {
				t.Errorf("refused{reason=generation_reused} = %v, want %v", got, wantCount)
			}
			cur, _ := s.Current()
			want := map[string]string{"a.internal": "10.0.0.1", "x.internal": "10.5.5.1,10.5.5.2"}
			if diff := cmp.Diff(want, namesOf(cur.Roster)); diff != "" || cur.Generation != 2 || cur.Roster.Generation != 2 {
				t.Errorf("in force: generation %d, roster %d; names (-want +got):\n%s", cur.Generation, cur.Roster.Generation, diff)
			}
		})
	}
	if changes, _ := s.ChangesSince(2); len(changes) != 0 {
		t.Errorf("%d changes recorded after the delta in force; want none", len(changes))
	}
}

// TestDeltaGenerationsCannotLieInitial: with the declaration saved last
// time in force (no change of it recorded), a delta to its generations is
// judged by its own names against the roster in force.
func TestDeltaGenerationsCannotLieInitial(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	initial := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 4, MeshNames: spec.FlagOff,
		Roster: &spec.Roster{Generation: 3, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"a.internal": {a}}}}
	s := New(Config{Machine: "ace", Initial: initial})
	if _, err := s.Offer([]byte(deltaDoc(4, 2, 3, `"a.internal": ["10.0.0.1"]`)), "push"); err != nil {
		t.Errorf("a delta agreeing with the roster in force = %v, want accepted", err)
	}
	_, err := s.Offer([]byte(deltaDoc(4, 2, 3, `"a.internal": ["10.0.0.9"]`)), "push")
	if refusalOf(err) != RefusedGenerationReused || !strings.Contains(fmt.Sprint(err), `roster_delta.set["a.internal"]: 10.0.0.9 here, 10.0.0.1 in force`) {
		t.Errorf("a delta moving a name of the roster in force = %v, want generation_reused naming it", err)
	}
}

// TestPutRosterDeltaGenerationReused: the NATS source's roster delta with
// the roster generation in force and other names is refused
// (roster_generation_reused); the same one again is accepted.
func TestPutRosterDeltaGenerationReused(t *testing.T) {
	a1, a9 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")
	reg := prometheus.NewRegistry()
	s := New(Config{Machine: "ace", Registerer: reg})
	d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 5, MeshNames: spec.FlagOff,
		Roster: &spec.Roster{Generation: 3, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"a.internal": {a1}}}}
	if err := s.Put(d, "nats"); err != nil {
		t.Fatal(err)
	}
	delta := func(addr netip.Addr) *spec.RosterDelta {
		return &spec.RosterDelta{From: 3, To: 4, Set: map[string][]netip.Addr{"b.internal": {addr}}}
	}
	if err := s.PutRosterDelta("ace", 5, delta(a1), "nats"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRosterDelta("ace", 5, delta(a1), "nats"); err != nil {
		t.Errorf("the same delta again = %v, want no fault", err)
	}
	err := s.PutRosterDelta("ace", 5, delta(a9), "nats")
	want := []spec.FieldError{
		{Path: "roster_delta.to", Reason: "roster generation 4 is in force, and this delta would make it otherwise; a changed roster needs a newer generation"},
		{Path: `roster_delta.set["b.internal"]`, Reason: "10.0.0.9 here, 10.0.0.1 in force"},
	}
	if diff := cmp.Diff(want, spec.Faults(err)); diff != "" {
		t.Errorf("PutRosterDelta(other names, roster generation in force) faults (-want +got):\n%s", diff)
	}
	if got := refusedCounts(t, reg)[string(RefusedRosterGenerationReused)]; got != 1 {
		t.Errorf("refused{reason=roster_generation_reused} = %v, want 1", got)
	}
	if cur, _ := s.Current(); cur.Roster.Names["b.internal"][0] != a1 {
		t.Errorf("b.internal in force = %v, want %v still", cur.Roster.Names["b.internal"], a1)
	}
}

// namesOf is r's names with their addresses as one string each.
func namesOf(r *spec.Roster) map[string]string {
	out := map[string]string{}
	for n, a := range r.Names {
		out[n] = addrList(a)
	}
	return out
}

// TestDeltaGenerationsCannotLieAfterAWholeDeclaration: when the last
// declaration came whole and kept the roster generation (only its
// containers changed), a delta to those generations is judged by its own
// names against the roster in force.
func TestDeltaGenerationsCannotLieAfterAWholeDeclaration(t *testing.T) {
	s := New(Config{Machine: "ace"})
	for _, doc := range []string{genDoc(1, 1, namesA, "busybox:1", "pw"), genDoc(2, 2, namesA, "busybox:1", "pw"), genDoc(3, 2, namesA, "busybox:2", "pw")} {
		if _, err := s.Offer([]byte(doc), "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Offer([]byte(deltaDoc(3, 1, 2, `"a.internal": ["10.0.0.1"]`)), "push"); err != nil {
		t.Errorf("a delta agreeing with the roster in force = %v, want accepted", err)
	}
	_, err := s.Offer([]byte(deltaDoc(3, 1, 2, `"a.internal": ["10.0.0.9"]`)), "push")
	if refusalOf(err) != RefusedGenerationReused || !strings.Contains(fmt.Sprint(err), `roster_delta.set["a.internal"]: 10.0.0.9 here, 10.0.0.1 in force`) {
		t.Errorf("a delta moving a name of the roster in force = %v, want generation_reused naming it", err)
	}
}
