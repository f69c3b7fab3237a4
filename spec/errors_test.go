package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFaults: every error a refusal joins is one fault, a field's with its
// path, however deep below wrappers the join or the field's fault is
// (`meshhost plan --output json` once listed one fault of two: the
// declaration's faults were joined below "reading FILE: %w").
func TestFaults(t *testing.T) {
	field := &FieldError{Path: "containers[0].image", Reason: "is empty"}
	other := &FieldError{Path: "containers[1].name", Reason: "is taken"}
	plain := errors.New("no such file")
	for _, tc := range []struct {
		name string
		err  error
		want []FieldError
	}{
		{"nil", nil, []FieldError{}},
		{"one field", field, []FieldError{*field}},
		{"wrapped field", fmt.Errorf("declaration: %w", field), []FieldError{*field}},
		{"plain", plain, []FieldError{{Reason: "no such file"}}},
		{"wrapped plain keeps its context", fmt.Errorf("reading x.json: %w", plain), []FieldError{{Reason: "reading x.json: no such file"}}},
		{"joined", errors.Join(field, plain), []FieldError{*field, {Reason: "no such file"}}},
		{"a join in a join", errors.Join(errors.Join(field, plain)), []FieldError{*field, {Reason: "no such file"}}},
		{"a join below a wrapper", fmt.Errorf("reading x.json: %w", errors.Join(field, other)), []FieldError{*field, *other}},
		{"a join below nested wrappers", fmt.Errorf("plan: %w", fmt.Errorf("declaration %q: %w", "x.json", errors.Join(field, other))), []FieldError{*field, *other}},
		{"wrapped joins in a join", errors.Join(fmt.Errorf("a: %w", errors.Join(field, plain)), fmt.Errorf("b: %w", other)), []FieldError{*field, {Reason: "no such file"}, *other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Faults(tc.err)); diff != "" {
				t.Errorf("Faults(%q) (-want +got):\n%s", tc.err, diff)
			}
		})
	}
}

// TestFaultsBounded: an error never names more than MaxFaults faults,
// and then says how many it left out, whether the faults were collected
// by a FaultList (bounded as they are added: the error's message, which
// logs print, is bounded too) or joined by someone else.
func TestFaultsBounded(t *testing.T) {
	const n = 1_500_000
	var l FaultList
	for i := range n {
		l.Add(fmt.Sprintf("remove[%d]", i), "%q is not in the roster", fmt.Sprint("n", i))
	}
	many := make([]error, 0, MaxFaults+50)
	for i := range MaxFaults + 50 {
		many = append(many, &FieldError{Path: fmt.Sprintf("x[%d]", i), Reason: "bad"})
	}
	more := func(k int) FieldError { return FieldError{Reason: fmt.Sprintf("and %d more faults", k)} }
	for _, tc := range []struct {
		name      string
		err       error
		wantLen   int
		wantFirst FieldError
		wantLast  FieldError
	}{
		{"FaultList", l.Err(), MaxFaults + 1, FieldError{Path: "remove[0]", Reason: `"n0" is not in the roster`}, more(n - MaxFaults)},
		{"FaultList wrapped", fmt.Errorf("roster delta: %w", l.Err()), MaxFaults + 1, FieldError{Path: "remove[0]", Reason: `"n0" is not in the roster`}, more(n - MaxFaults)},
		{"errors.Join", errors.Join(many...), MaxFaults + 1, FieldError{Path: "x[0]", Reason: "bad"}, more(50)},
		{"JoinFaults", JoinFaults(many...), MaxFaults + 1, FieldError{Path: "x[0]", Reason: "bad"}, more(50)},
		{"a FaultList's error joined again", JoinFaults(append([]error{errors.New("first")}, unjoin(l.Err())...)...), MaxFaults + 1, FieldError{Reason: "first"}, more(n - MaxFaults + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Faults(tc.err)
			if len(got) != tc.wantLen {
				t.Fatalf("Faults: %d faults, want %d", len(got), tc.wantLen)
			}
			if diff := cmp.Diff(tc.wantFirst, got[0]); diff != "" {
				t.Errorf("first fault (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLast, got[len(got)-1]); diff != "" {
				t.Errorf("last fault (-want +got):\n%s", diff)
			}
			if msg := tc.err.Error(); len(msg) > 100<<10 {
				t.Errorf("Error() is %d bytes; a bounded error's message is short (it is logged)", len(msg))
			}
		})
	}
	if l.Len() != n {
		t.Errorf("FaultList.Len = %d, want %d (those left out counted)", l.Len(), n)
	}
	if !strings.HasSuffix(l.Err().Error(), fmt.Sprintf("and %d more faults", n-MaxFaults)) {
		t.Errorf("FaultList.Err() does not end saying how many more")
	}
}
