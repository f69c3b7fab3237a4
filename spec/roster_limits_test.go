package spec_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestRosterValidateNamesLimit: Validate refuses a roster built in code
// with more than MaxNames names, naming the limit.
func TestRosterValidateNamesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a million-name roster takes seconds")
	}
	r := &spec.Roster{Generation: 1, Names: make(map[string][]netip.Addr, spec.MaxNames+1)}
	addr := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	for i := range spec.MaxNames + 1 {
		r.Names[fmt.Sprintf("n%d.internal", i)] = addr
	}
	err := r.Validate()
	want := fmt.Sprintf("names: %d names; at most %d", spec.MaxNames+1, spec.MaxNames)
	if err == nil || err.Error() != want {
		t.Errorf("Validate(%d names) = %v, want %q", len(r.Names), err, want)
	}
	if err != nil && strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("Validate reported more than the limit: %.300v", err)
	}
}
