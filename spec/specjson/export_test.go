package spec

// The two roster readers, for the differential test of FuzzParseRoster.
var (
	ParseRosterStrict = parseRosterStrict
	DecodeRosterFast  = decodeRosterFast
)

// The two declaration readers, for the differential test of
// FuzzParseDeclaration.
var (
	ParseDeclarationStrict = parseDeclarationStrict
	ParseDeclarationFast   = parseDeclarationFast
)
