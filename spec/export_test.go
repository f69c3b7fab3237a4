package spec

// The two roster readers, for the differential test of FuzzParseRoster.
var (
	ParseRosterStrict = parseRosterStrict
	DecodeRosterFast  = decodeRosterFast
)
