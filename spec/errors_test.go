package spec

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestFaults: every error a refusal joins is one fault, a field's with its
// path, whether joined at the top or one join below a wrap.
func TestFaults(t *testing.T) {
	field := &FieldError{Path: "containers[0].image", Reason: "is empty"}
	plain := errors.New("no such file")
	for _, tc := range []struct {
		name string
		err  error
		want []FieldError
	}{
		{"one field", field, []FieldError{*field}},
		{"wrapped field", fmt.Errorf("declaration: %w", field), []FieldError{*field}},
		{"plain", plain, []FieldError{{Reason: "no such file"}}},
		{"joined", errors.Join(field, plain), []FieldError{*field, {Reason: "no such file"}}},
		{"a join in a join", errors.Join(errors.Join(field, plain)), []FieldError{*field, {Reason: "no such file"}}},
	} {
		if got := Faults(tc.err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Faults = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
