package rosterguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

func roster(gen uint64, n int) *spec.Roster {
	r := &spec.Roster{Generation: gen, Names: map[string][]netip.Addr{}}
	for i := range n {
		r.Names[fmt.Sprintf("svc%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})}
	}
	return r
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name       string
		prev, next *spec.Roster
		held       bool
	}{
		{"first roster", nil, roster(1, 100), false},
		{"growth", roster(1, 100), roster(2, 150), false},
		{"small drop", roster(1, 100), roster(2, 80), false},
		{"quarter exactly", roster(1, 100), roster(2, 75), false},
		{"large drop", roster(1, 100), roster(2, 60), true},
		{"everything gone", roster(1, 100), roster(2, 0), true},
		{"tiny mesh", roster(1, 5), roster(2, 1), false},
	}
	for _, tt := range tests {
		err := Check(tt.prev, tt.next, Policy{})
		var se *ShrinkError
		if held := errors.As(err, &se); held != tt.held {
			t.Errorf("%s: Check = %v, want held=%v", tt.name, err, tt.held)
		}
	}
	err := Check(roster(1, 100), roster(7, 50), Policy{})
	if !strings.Contains(err.Error(), "drops 50 of 100 names") || !strings.Contains(err.Error(), "meshhost roster accept 7") {
		t.Errorf("error = %v; want the count and the override command", err)
	}
}

// TestCheckDelta: the guard judges a delta exactly as it judges the whole
// roster the delta makes.
func TestCheckDelta(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prev, next *spec.Roster
	}{
		{"first roster", nil, roster(1, 100)},
		{"growth", roster(1, 100), roster(2, 150)},
		{"quarter exactly", roster(1, 100), roster(2, 75)},
		{"large drop", roster(1, 100), roster(2, 60)},
		{"everything gone", roster(1, 100), roster(2, 0)},
		{"tiny mesh", roster(1, 5), roster(2, 1)},
	} {
		d, _ := spec.DiffRosters(tc.prev, tc.next)
		whole, delta := Check(tc.prev, tc.next, Policy{}), CheckDelta(tc.prev, d, Policy{})
		if fmt.Sprint(whole) != fmt.Sprint(delta) {
			t.Errorf("%s: CheckDelta = %v, Check = %v", tc.name, delta, whole)
		}
	}
}
