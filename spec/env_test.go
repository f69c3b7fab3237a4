package spec

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidateEnv: a fault of an environment entry says whether its name
// or its value is wrong (a NUL in a value was reported as a bad name),
// and never shows the value.
func TestValidateEnv(t *testing.T) {
	const secret = "s3cr3t"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []FieldError
	}{
		{"fine", map[string]string{"DB_PASSWORD": secret}, []FieldError{}},
		{"empty name", map[string]string{"": secret}, []FieldError{{Path: `c.env[""]`, Reason: "an environment variable name may not be empty or hold '=' or NUL"}}},
		{"'=' in the name", map[string]string{"A=B": secret}, []FieldError{{Path: `c.env["A=B"]`, Reason: "an environment variable name may not be empty or hold '=' or NUL"}}},
		{"NUL in the name", map[string]string{"A\x00B": secret}, []FieldError{{Path: `c.env["A\x00B"]`, Reason: "an environment variable name may not be empty or hold '=' or NUL"}}},
		{"NUL in the value", map[string]string{"DB_PASSWORD": secret + "\x00"}, []FieldError{{Path: "c.env.DB_PASSWORD", Reason: "the value holds a NUL byte, which an environment cannot carry (the value is not shown: it may be a secret)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs FaultList
			validateContainer(&errs, "c", Container{Name: "app", Image: "busybox", Env: tc.env})
			if diff := cmp.Diff(tc.want, Faults(errs.Err())); diff != "" {
				t.Errorf("validateContainer(env %q) faults (-want +got):\n%s", tc.env, diff)
			}
		})
	}
}
