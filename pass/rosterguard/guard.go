// Package rosterguard holds back a roster that drops a large share of its
// names at once. A real incident: a node's plan failed to compose upstream,
// its names silently fell out of the roster, and came back on the next
// pass, so names flapped. A roster must never lose names because something
// upstream was briefly unreachable; a drop that large waits for an operator.
package rosterguard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Policy says how large a drop is held.
type Policy struct {
	// MaxDropFraction is the share of the previous roster's names that may
	// go in one step; more is held. Default 0.25.
	MaxDropFraction float64
	// MinNames: rosters smaller than this are never held (a small mesh
	// losing two of five names is an ordinary change). Default 8.
	MinNames int
}

// DefaultPolicy holds a roster that drops more than a quarter of 8 or more names.
var DefaultPolicy = Policy{MaxDropFraction: 0.25, MinNames: 8}

// ShrinkError reports a held roster: which names it would drop.
type ShrinkError struct {
	Generation    uint64
	Before, After int
	Dropped       []string // sorted
	MaxFraction   float64
}

func (e *ShrinkError) Error() string {
	shown := e.Dropped
	more := ""
	if len(shown) > 10 {
		shown, more = shown[:10], fmt.Sprintf(" and %d more", len(e.Dropped)-10)
	}
	return fmt.Sprintf("roster generation %d drops %d of %d names at once (more than %.0f%%): %s%s; held, the previous roster keeps serving. "+
		"If the drop is intended, accept it with `meshhost roster accept %d`",
		e.Generation, len(e.Dropped), e.Before, e.MaxFraction*100, strings.Join(shown, ", "), more, e.Generation)
}

// withDefaults is p with DefaultPolicy's value for each field left zero.
func (p Policy) withDefaults() Policy {
	if p.MaxDropFraction == 0 {
		p.MaxDropFraction = DefaultPolicy.MaxDropFraction
	}
	if p.MinNames == 0 {
		p.MinNames = DefaultPolicy.MinNames
	}
	return p
}

// Check returns a *ShrinkError when next drops too many of prev's names,
// and nil otherwise (including when prev is nil: the first roster).
func Check(prev, next *spec.Roster, p Policy) error {
	p = p.withDefaults()
	if prev == nil || len(prev.Names) < p.MinNames {
		return nil
	}
	var dropped []string
	for name := range prev.Names {
		if _, ok := next.Names[name]; !ok {
			dropped = append(dropped, name)
		}
	}
	if float64(len(dropped)) <= p.MaxDropFraction*float64(len(prev.Names)) {
		return nil
	}
	slices.Sort(dropped)
	return &ShrinkError{Generation: next.Generation, Before: len(prev.Names), After: len(next.Names), Dropped: dropped, MaxFraction: p.MaxDropFraction}
}

// CheckDelta is Check for the roster prev changed by d: it looks only at
// the names d removes, so it costs what changed, not the roster.
func CheckDelta(prev *spec.Roster, d *spec.RosterDelta, p Policy) error {
	p = p.withDefaults()
	if prev == nil || len(prev.Names) < p.MinNames {
		return nil
	}
	var dropped []string
	for _, name := range d.Remove {
		if _, ok := prev.Names[name]; ok {
			dropped = append(dropped, name)
		}
	}
	if float64(len(dropped)) <= p.MaxDropFraction*float64(len(prev.Names)) {
		return nil
	}
	slices.Sort(dropped)
	after := len(prev.Names) - len(dropped)
	for name := range d.Set {
		if _, ok := prev.Names[name]; !ok {
			after++
		}
	}
	return &ShrinkError{Generation: d.To, Before: len(prev.Names), After: after, Dropped: dropped, MaxFraction: p.MaxDropFraction}
}
