package specjson

import (
	"net/netip"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
	"github.com/meshhost/meshhost/spec"
)

// ParseRosterDelta reads a roster delta document strictly, the change
// from one roster generation to the next:
//
//	{"from": 7, "generation": 8,
//	 "zones": ["internal"],
//	 "set": {"gitea.novox.internal": ["10.89.0.8"], "new.novox.internal": ["10.89.0.9"]},
//	 "remove": ["old.novox.internal"]}
//
// "set" adds a name or gives it new addresses (all of them); "remove" takes
// a name out; "zones", when present, replaces the zones whole. "set",
// "remove" and "zones" are optional. It returns a validated, normalized
// delta, or every fault, each a *spec.FieldError naming its path. Reading
// it costs what it changes.
func ParseRosterDelta(data []byte) (*spec.RosterDelta, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &spec.FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	d := readRosterDelta(&rep, "", v)
	if err := mergeFaults(rep, d.Validate()); err != nil {
		return nil, err
	}
	return d.Normalize(), nil
}

// ParseDeclarationDelta reads a declaration delta document strictly: a new
// declaration generation whose roster is the one in force changed by a
// roster delta (ParseRosterDelta's format); containers and mesh_names stay
// as they are.
//
//	{"schema": 1, "machine": "novox", "generation": 43,
//	 "roster_delta": {"from": 7, "generation": 8, "set": {"new.novox.internal": ["10.89.0.9"]}}}
//
// It returns every fault, each a *spec.FieldError naming its path
// (roster_delta.set["a..b"]), and never a half-parsed delta.
func ParseDeclarationDelta(data []byte) (*spec.DeclarationDelta, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &spec.FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	o := rep.Object("", v)
	d := &spec.DeclarationDelta{}
	d.Schema, d.Machine, d.Generation = readHead(&rep, o)
	if rv, p, ok := o.Required("roster_delta"); ok {
		d.Roster = readRosterDelta(&rep, p, rv)
	}
	o.Done()
	if err := mergeFaults(rep, d.Validate()); err != nil {
		return nil, err
	}
	d.Roster = d.Roster.Normalize()
	return d, nil
}

// IsDeclarationDelta reports whether a document is a declaration delta
// (it has a top-level "roster_delta") rather than a whole declaration. It
// looks at the top-level keys only, skipping their values, and stops at
// the first "roster" or "roster_delta".
func IsDeclarationDelta(data []byte) bool {
	d := fastDecoder{b: data}
	if !d.byte('{') {
		return false
	}
	for first := true; ; first = false {
		if d.byte('}') || !first && !d.byte(',') {
			return false
		}
		k, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		switch string(k) {
		case "roster":
			return false
		case "roster_delta":
			return true
		}
		if !d.skipValue(0) {
			return false
		}
	}
}

func readRosterDelta(rep *strictjson.Report, path string, v strictjson.Value) *spec.RosterDelta {
	o := rep.Object(path, v)
	d := &spec.RosterDelta{Set: map[string][]netip.Addr{}}
	if fv, p, ok := o.Required("from"); ok {
		d.From, _ = rep.Uint(p, fv, 0, 1<<63-1)
	}
	if gv, p, ok := o.Required("generation"); ok {
		d.To, _ = rep.Uint(p, gv, 1, 1<<63-1)
	}
	if zv, p, ok := o.Field("zones"); ok {
		if zones, ok := rep.Strings(p, zv); ok {
			d.Zones = zones
			if d.Zones == nil {
				d.Zones = []string{}
			}
		}
	}
	if sv, p, ok := o.Field("set"); ok {
		readNames(rep, p, sv, d.Set)
	}
	if rv, p, ok := o.Field("remove"); ok {
		d.Remove, _ = rep.Strings(p, rv)
	}
	o.Done()
	return d
}
