package specjson

import (
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// The two roster readers, for the differential test of FuzzParseRoster.
func ParseRosterStrict(data []byte) (*spec.Roster, error) {
	return parseRosterStrict(data, &yield.Yielder{})
}

func DecodeRosterFast(data []byte) (*spec.Roster, bool) {
	return decodeRosterFast(data, &yield.Yielder{})
}

// The two declaration readers, for the differential test of
// FuzzParseDeclaration.
func ParseDeclarationStrict(data []byte) (*spec.Declaration, error) {
	return parseDeclarationStrict(data, &yield.Yielder{})
}

func ParseDeclarationFast(data []byte) (*spec.Declaration, bool) {
	d, ok, _ := parseDeclarationFast(data, &yield.Yielder{})
	return d, ok
}
